"""Workloads: each module that defines `WORKLOAD` (a hosts.workloads.base.Workload) is one;
`registry()` finds them by importing the package's modules, so a new workload is its module
(plus its analysis in analysis/workloads/ under the same name) and nothing else."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache


@lru_cache(maxsize=None)
def registry() -> dict:
    """{name: Workload} of every module of this package that defines WORKLOAD."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        workload = getattr(module, "WORKLOAD", None)
        if workload is not None:
            found[workload.name] = workload
    return dict(sorted(found.items()))
