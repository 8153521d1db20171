"""The workload catalogue: one line per workload.

Each entry names the module that runs the workload in the emulated hosts (its object
`WORKLOAD`) and the module that analyses its results (its object `ANALYSIS`). They are
loaded by name, so the scenario parser, the runner and the analysis never import a
workload by hand, and the analysis side never loads the emulation side.
"""
from __future__ import annotations

import importlib
from typing import Any

WORKLOADS: dict[str, tuple[str, str]] = {
    # name:        (runs in the hosts,               analyses the results)
    "competing": ("hosts.workloads.competing", "analysis.workloads.competing"),
    "bulk": ("hosts.workloads.bulk", "analysis.workloads.bulk"),
    "web": ("hosts.workloads.web", "analysis.workloads.web"),
    "bursty": ("hosts.workloads.bursty", "analysis.workloads.bursty"),
    "arrivals": ("hosts.workloads.arrivals", "analysis.workloads.arrivals"),
    "websessions": ("hosts.workloads.websessions", "analysis.workloads.websessions"),
}


def _load(name: str, index: int, attribute: str) -> Any:
    if name not in WORKLOADS:
        raise KeyError(name)
    return getattr(importlib.import_module(WORKLOADS[name][index]), attribute)


def workload(name: str) -> Any:
    """The Workload object of `name` (hosts side)."""
    return _load(name, 0, "WORKLOAD")


def analysis(name: str) -> Any:
    """The WorkloadAnalysis object of `name` (analysis side)."""
    return _load(name, 1, "ANALYSIS")
