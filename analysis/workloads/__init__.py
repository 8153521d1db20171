"""Per-workload analysis: each module turns its workload's captures into metrics and
declares the summary columns, comparisons, plots and report sections of its campaigns
(the interface is analysis/workloads/base.py). `registry()` finds every module that
defines `ANALYSIS`, by the workload's name, without loading the emulation side."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache


@lru_cache(maxsize=None)
def registry() -> dict:
    """{name: WorkloadAnalysis} of every module of this package that defines ANALYSIS."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        analysis = getattr(module, "ANALYSIS", None)
        if analysis is not None:
            found[analysis.name] = analysis
    return dict(sorted(found.items()))
