"""What a workload's analysis declares, so summary, report and compare loop over it.

A workload analysis module defines one `ANALYSIS` object with:
  - `run_metrics(run_dir, meta)`: a run's captures → its metrics.json (JSON-able), with a
    "flows" block holding each declared flow's first flight, which every run is checked on;
  - `columns`: its summary.csv columns after profile, size_bytes, variant and runs, in order;
  - `compared`: the per-run figures compared with the baseline (the Table-1 cells, nightly
    regressions), the first being the primary one (one-way ANOVA across variants);
    `per_mode` and `described`: further figures with statistics in its rows (per model and
    mode; others), which the tidy summary lists as figures of their own;
  - `describe(runs)`, `compare(runs, base)`: the figures of one summary cell;
  - `display(row)`/`display_headers`: the summary as a table for people;
  - `plots(...)`, `sections(rows)`: its figures and further report tables.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from analysis import stats
from results.campaign import RunRecord

Row = dict[str, Any]
# Summary columns of a compared figure that carry its unit (fct_mean_s, loss_median_pkts, …).
UNIT_KINDS = ("mean", "median", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high")


@dataclass(frozen=True)
class Compared:
    """A per-run figure compared with the baseline at the same cell.

    Summary columns: `{column}_mean[_{unit}]`, `{column}_diff[_{unit}]`, `{column}_ratio`,
    `{column}_significant` (and `{column}_within_one_rtt` where `rtt_floor`); compare rows:
    `{name}_old`, `{name}_new`, `{name}_diff`, …. `higher_is_better` says which way is an
    improvement (lower by default: times, losses). With `rtt_floor`, a change smaller than
    one RTT is shown orange and is no regression."""
    column: str
    name: str
    label: str
    unit: str
    get: Callable[[RunRecord], float]
    rtt_floor: bool = False
    higher_is_better: bool = False
    # In the tidy summary (analysis.tidy): the figure's name (default: `column`), the model
    # and mode it was measured in (None: the whole cell), and the wide column counting its
    # samples (empty: one per run).
    figure_name: str = ""
    model: Optional[str] = None
    mode: Optional[str] = None
    samples: str = ""

    @property
    def figure(self) -> str:
        return self.figure_name or self.column

    def col(self, kind: str) -> str:
        """The summary column of `kind` ('mean', 'diff', 'ratio', 'significant', …)."""
        with_unit = kind in UNIT_KINDS and self.unit
        return f"{self.column}_{kind}" + (f"_{self.unit}" if with_unit else "")

    def better(self, diff: float) -> bool:
        """Is a (significant) difference variant − baseline an improvement?"""
        return diff > 0 if self.higher_is_better else diff < 0


def describe_metric(m: Compared, runs: list[RunRecord]) -> Row:
    """Mean, median and 95 % interval of the mean of a compared figure over a cell's runs."""
    xs = [m.get(r) for r in runs]
    ci = stats.mean_ci(xs)
    return {m.col("mean"): stats.mean(xs), m.col("median"): stats.median(xs),
            m.col("ci_low"): ci[0] if ci else None, m.col("ci_high"): ci[1] if ci else None}


def compare_metric(m: Compared, runs: list[RunRecord], base: list[RunRecord]) -> Row:
    """A compared figure of a cell against the baseline's: the difference of the means with
    its 95 % Welch interval, the ratio of the means, significance, and within one RTT."""
    xs, bs = [m.get(r) for r in runs], [m.get(r) for r in base]
    d = stats.welch_difference(xs, bs)
    out = {m.col("diff"): d.diff, m.col("diff_ci_low"): d.ci[0] if d.ci else None,
           m.col("diff_ci_high"): d.ci[1] if d.ci else None, m.col("ratio"): stats.ratio_of_means(xs, bs),
           m.col("significant"): d.significant}
    if m.rtt_floor:
        out[m.col("within_one_rtt")] = stats.within_one_rtt(d.diff, runs[0].rtt_s)
    return out


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
    per_mode: tuple[Compared, ...] = ()
    described: tuple[Compared, ...] = ()
    display_headers: list[str] = []

    def figures(self) -> tuple[Compared, ...]:
        """Every figure its rows hold with statistics, the primary first."""
        return (*self.compared, *self.per_mode, *self.described)

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
