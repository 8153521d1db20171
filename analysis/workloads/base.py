"""What a workload's analysis declares, so summary, report and compare loop over it.

A workload analysis module defines one `ANALYSIS` object with:
  - `run_metrics(run_dir, meta)`: a run's captures → its metrics.json (JSON-able), with a
    "flows" block holding each declared flow's first flight, which every run is checked on;
  - `columns`: its summary.csv columns after profile, size_bytes, variant and runs, in order;
  - `compared`: the per-run figures compared with the baseline (the Table-1 cells, nightly
    regressions), the first being the primary one (one-way ANOVA across variants);
  - `describe(runs)`, `compare(runs, base)`: the figures of one summary cell;
  - `display(row)`/`display_headers`: the summary as a table for people;
  - `plots(...)`, `sections(rows)`: its figures and further report tables.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from results.campaign import RunRecord

Row = dict[str, Any]


@dataclass(frozen=True)
class Compared:
    """A per-run figure compared with the baseline at the same cell.

    Summary columns: `{column}_mean_{unit}`, `{column}_diff_{unit}`, `{column}_ratio`,
    `{column}_significant` (and `{column}_within_one_rtt` where `rtt_floor`); compare rows:
    `{name}_old`, `{name}_new`, `{name}_diff`, …. Lower is better. With `rtt_floor`, a
    change smaller than one RTT is shown orange and is no regression."""
    column: str
    name: str
    label: str
    unit: str
    get: Callable[[RunRecord], float]
    rtt_floor: bool = False


@dataclass(frozen=True)
class Plot:
    """A written figure and what it shows; size is None for per-profile figures."""
    kind: str
    profile: str
    size_bytes: Optional[int]
    path: Path
    caption: str = ""


@dataclass(frozen=True)
class Section:
    """A further table of the report: title, headers, rows of display texts, a note."""
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


class WorkloadAnalysis(ABC):
    name: str = ""
    columns: list[str] = []
    compared: tuple[Compared, ...] = ()
    display_headers: list[str] = []

    @abstractmethod
    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        """Metrics of one run from its captures."""

    @abstractmethod
    def describe(self, runs: list[RunRecord]) -> Row:
        """Figures of one summary cell (one variant at one profile, size and sweep point)."""

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        """Figures of `runs` against the baseline's runs at the same cell."""
        return {}

    @abstractmethod
    def display(self, row: Row) -> list[str]:
        """One summary row as display texts, in the order of display_headers."""

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        return []

    def sections(self, rows: list[Row]) -> list[Section]:
        return []
