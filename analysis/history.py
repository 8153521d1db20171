"""A scenario's nights side by side: what regressed since the previous night, and each
cell's figures over all nights.

"Regressed" is exactly what `./run.py compare` decides (analysis/compare.py): a cell whose
compared figure got significantly worse (the 95 % Welch interval of tonight − last night
excludes 0, in the bad direction) by more than the figure's noise floor (one RTT for
durations). This module adds no threshold of its own; it calls `compare` and attaches to
each regressed cell the two nights' means with their 95 % intervals, so a reader of
regressions.json sees how far apart the nights are without opening the campaigns.

The history itself is read from each night's summary.json (its primary compared figure:
FCT for the competing workload; a summary of an older format is upgraded as it is read,
analysis.tidy.upgrade) and its stored verdict (results/nightly.py), never from the runs,
so a page over months of nights stays cheap to draw.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

# compare's own grouping of runs into cells, reused so both always agree on what a cell is.
from analysis import tidy
from analysis.compare import cells, compare
from analysis.runs import workload_analysis
from analysis.workloads.base import Compared, describe_metric
from config.sizes import size_label
from machine.errors import UserError
from results import nightly, schema
from results.campaign import Campaign
from results.store import read_json_or_none

CellKey = tuple[str, Optional[int], str, str]     # (profile, size, variant, sweep "param=value" or "")
HISTORY_NIGHTS = 60      # nights a history shows: a season, and a figure whose axis stays legible


def _workload_of(campaign_dir: Path) -> str:
    return Campaign.open(campaign_dir).record.get("workload", schema.LEGACY_WORKLOAD)


def _figures(metric: Compared, runs: list, night: Path) -> dict[str, Any]:
    """Mean and 95 % interval of `metric` over a cell's runs in one night."""
    described = describe_metric(metric, runs)
    return {"night": night.name, "campaign": str(night), "runs": len(runs),
            "mean": described[metric.col("mean")], "ci_low": described[metric.col("ci_low")],
            "ci_high": described[metric.col("ci_high")]}


def night_verdict(scenario: str, previous: Optional[Path], current: Path) -> dict[str, Any]:
    """Tonight against the previous night: compare's rows and one entry per regressed
    (cell, figure). A first night, or two nights of different workloads, has no rows; the
    latter says why in "note"."""
    verdict: dict[str, Any] = {"scenario": scenario, "night": current.name, "campaign": str(current),
                               "previous": previous.name if previous else None,
                               "previous_campaign": str(previous) if previous else None,
                               "rows": [], "regressions": [], "note": None}
    if previous is None:
        verdict["note"] = "first night: nothing to compare with"
        return verdict
    try:
        rows = compare(previous, current)
    except UserError as exc:
        verdict["note"] = str(exc)
        return verdict
    verdict["rows"] = rows
    regressed = [r for r in rows if r["regressed"]]
    if not regressed:
        return verdict
    metrics = workload_analysis(_workload_of(current)).compared
    before, after = cells(Campaign.open(previous).records()), cells(Campaign.open(current).records())
    for row in regressed:
        key = (row["profile"], row["size_bytes"], row["variant"], row["sweep"])
        for metric in metrics:
            if not row.get(f"{metric.name}_regressed"):
                continue
            verdict["regressions"].append({
                "scenario": scenario, "profile": row["profile"], "size_bytes": row["size_bytes"],
                "size": None if row["size_bytes"] is None else size_label(row["size_bytes"]),
                "variant": row["variant"], "sweep": row["sweep"] or None,
                "metric": metric.name, "label": metric.label, "unit": metric.unit,
                "previous": _figures(metric, before[key], previous),
                "current": _figures(metric, after[key], current),
                "diff": row[f"{metric.name}_diff"],
                "nights": [previous.name, current.name]})
    return verdict


# ------------------------------------------------------------------ history over the nights

@dataclass
class Point:
    """One night's figure of a cell: its mean and 95 % interval (None with a single run)."""
    night: str
    mean: float
    ci_low: Optional[float]
    ci_high: Optional[float]
    regressed: bool = False


@dataclass
class Series:
    """A cell's figure over the nights in which it ran."""
    profile: str
    size_bytes: Optional[int]
    sweep: str
    variant: str
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> CellKey:
        return self.profile, self.size_bytes, self.variant, self.sweep


@dataclass
class ScenarioHistory:
    """Everything the history page shows of one scenario."""
    name: str
    nights: list[str]
    metric_label: str
    metric_unit: str
    series: list[Series]
    latest: Optional[dict[str, Any]]          # the last night's stored verdict, if any

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(s.variant for s in self.series))


def _sweep_text(row: dict[str, Any]) -> str:
    """A summary row's sweep point in compare's spelling ("param=value", "" without one)."""
    if row.get("sweep_param") is None or row.get("sweep_value") is None:
        return ""
    return f"{row['sweep_param']}={row['sweep_value']:g}"


def _regressed_cells(verdict: Optional[dict[str, Any]], metric_name: str) -> set[CellKey]:
    """Cells whose `metric_name` regressed in a stored verdict."""
    return {(r["profile"], r["size_bytes"], r["variant"], r["sweep"] or "")
            for r in (verdict or {}).get("regressions", []) if r["metric"] == metric_name}


def scenario_history(scenario_dir: Path) -> ScenarioHistory:
    """Each cell's primary figure (FCT for the competing workload) over the last
    HISTORY_NIGHTS finished nights, with the nights where it regressed marked. The first
    night's workload decides the figure; nights of another workload are left out."""
    nights = nightly.finished_nights(scenario_dir)[-HISTORY_NIGHTS:]
    series: dict[CellKey, Series] = {}
    metric: Optional[Compared] = None
    for night in nights:
        summary = read_json_or_none(night / schema.SUMMARY_JSON) or {}
        workload = (summary.get("campaign") or {}).get("workload", schema.LEGACY_WORKLOAD)
        analysis = workload_analysis(workload)
        summary = tidy.upgrade(summary, analysis)         # nights before format 4 read alike
        compared = analysis.compared
        if not compared:
            continue
        metric = metric or compared[0]
        if compared[0].name != metric.name:
            continue                            # the scenario changed workload: not one history
        regressed = _regressed_cells(nightly.read_verdict(night), metric.name)
        for row in summary.get("rows", []):
            if row.get("model") is not None or row.get("figure") != metric.figure or row.get("mean") is None:
                continue
            cell = Series(row["profile"], row["size_bytes"], _sweep_text(row), row["variant"])
            entry = series.setdefault(cell.key, cell)
            entry.points.append(Point(night.name, row["mean"], row.get("ci_low"), row.get("ci_high"),
                                      cell.key in regressed))
    latest = nightly.read_verdict(nights[-1]) if nights else None
    return ScenarioHistory(name=scenario_dir.name, nights=[n.name for n in nights],
                           metric_label=metric.label if metric else "", metric_unit=metric.unit if metric else "",
                           series=list(series.values()), latest=latest)


def regressions_document(verdicts: list[dict[str, Any]], failures: list[dict[str, Any]],
                         generated: str) -> dict[str, Any]:
    """regressions.json: the nights this invocation ran, what regressed in them, and what
    could not run (so an empty list is never mistaken for a clean night that did not
    happen)."""
    return {"format": nightly.NIGHTLY_FORMAT, "generated": generated,
            "nights": [{"scenario": v["scenario"], "night": v["night"], "campaign": v["campaign"],
                        "previous": v["previous"], "cells_compared": len(v["rows"]), "note": v["note"]}
                       for v in verdicts],
            "regressions": [r for v in verdicts for r in v["regressions"]],
            "failures": failures}
