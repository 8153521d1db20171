"""Per-workload analysis: each module turns its workload's captures into metrics and
declares the summary columns, comparisons, plots and report sections of its campaigns
(the interface is analysis/workloads/base.py). `registry()` finds every module that
defines `ANALYSIS`, by the workload's name, without loading the emulation side."""
from __future__ import annotations

from functools import lru_cache

from config.plugins import collect


@lru_cache(maxsize=None)
def registry() -> dict:
    """{name: WorkloadAnalysis} of every module of this package that defines ANALYSIS."""
    return collect(__name__, "ANALYSIS")
