"""Workloads: each module that defines `WORKLOAD` (a hosts.workloads.base.Workload) is one;
`registry()` finds them by importing the package's modules, so a new workload is its module
(plus its analysis in analysis/workloads/ under the same name) and nothing else."""
from __future__ import annotations

from functools import lru_cache

from config.plugins import collect


@lru_cache(maxsize=None)
def registry() -> dict:
    """{name: Workload} of every module of this package that defines WORKLOAD."""
    return collect(__name__, "WORKLOAD")
