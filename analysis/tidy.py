"""The written summary as two tidy tables with the same columns for every workload.

`summary.csv` has one row per cell (profile, size, sweep value, variant) and, where the
workload measures per model and mode (the web workload), one more per model × mode: the
stable columns first, then the rest of the cell's key, then the row's primary figure as
generic statistics (`figure`, `unit`, `mean`, …, `diff`, …), the path's configured figures
and the emulator counts. `figures.csv` has one row per cell × figure: every figure of the
workload, a compared one with its statistics, any other as its `value`. Loaded into pandas
or R, each is a long table to filter and pivot, whatever ran.

A workload's analysis describes a cell as one row of its own columns
(analysis.summary.summary_rows), which the report and the console table read; this module
turns such rows into the two tables. Old summaries (format ≤ 3, which held those rows) are
read through the same conversion (`upgrade`), so a history over nights before and after
the change stays one history.
"""
from __future__ import annotations

from typing import Any, Iterable

from analysis.workloads.base import Compared, Row, WorkloadAnalysis

# Version 4: the tidy tables (3: levels' intervals are bootstraps, analysis.stats.CI_METHOD).
SUMMARY_FORMAT = 4
KEY_COLUMNS = ["profile", "size_bytes", "variant", "runs"]
STABLE_COLUMNS = KEY_COLUMNS + ["fct_mean_s", "fct_median_s", "fct_ci_low_s", "fct_ci_high_s",
                                "loss_mean_pkts", "retx_mean_pkts", "fairness_median"]
# Every workload's summary ends with these: how many runs of the cell the emulator's own
# figures flag (delay element late by more than 1 ms at p99, or dropping), and how many
# failed the fidelity checks of their flows after re-analysis.
TRAILING_COLUMNS = ["emulator_flagged_runs", "flow_check_failed_runs"]
# The rest of a cell's key: the swept parameter and its value, the model and mode a figure
# was measured in (empty: all of the cell's).
CELL_COLUMNS = ["sweep_param", "sweep_value", "model", "mode"]
# A figure's statistics over the cell's samples (runs, or pages for page times), and
# against the baseline's at the same cell (empty for the baseline).
STATISTICS = ["mean", "median", "ci_low", "ci_high", "sd", "diff", "diff_ci_low", "diff_ci_high", "ratio",
              "significant", "within_one_rtt"]
SUMMARY_COLUMNS = (STABLE_COLUMNS + CELL_COLUMNS + ["figure", "unit", "samples", *STATISTICS, "anova_p"]
                   + ["rtt_s", "rate_bps"] + TRAILING_COLUMNS)
FIGURE_COLUMNS = (["profile", "size_bytes", "sweep_param", "sweep_value", "variant", "model", "mode", "runs",
                   "figure", "unit", "samples", *STATISTICS, "value"])
# A workload's own columns that are part of the cell, not a figure.
_NOT_FIGURES = set(KEY_COLUMNS + CELL_COLUMNS + TRAILING_COLUMNS + ["rtt_s", "rate_bps"])


def statistic_columns(m: Compared) -> dict[str, str]:
    """The wide columns that hold each statistic of `m` (STATISTICS → column)."""
    cols = {kind: m.col(kind) for kind in STATISTICS if kind != "sd"}
    cols["sd"] = f"{m.column}_sd" + (f"_{m.unit}" if m.unit else "")
    return cols


def _figure_row(w: Row, m: Compared, key: Row) -> Row:
    stats = {kind: w.get(col) for kind, col in statistic_columns(m).items()}
    samples = w.get(m.samples) if m.samples else w.get("runs")
    return {**key, "model": m.model, "mode": m.mode, "figure": m.figure, "unit": m.unit or None,
            "samples": samples, **stats}


def _has_figures(row: Row) -> bool:
    return any(row.get(kind) is not None for kind in STATISTICS)


def tidy_rows(analysis: WorkloadAnalysis, wide: Iterable[Row]) -> tuple[list[Row], list[Row]]:
    """(summary rows, figure rows) of a workload's own cell rows."""
    summary: list[Row] = []
    figures: list[Row] = []
    primary = analysis.compared[0] if analysis.compared else None
    anova = f"anova_{primary.column}_p" if primary else None
    with_stats = set(_NOT_FIGURES) | {anova}
    for m in analysis.figures():
        with_stats |= set(statistic_columns(m).values()) | ({m.samples} if m.samples else set())
    # A stable column the workload does not have is no figure of it.
    absent = {c for c in STABLE_COLUMNS if c not in analysis.columns}
    # Per model and mode, the longest column prefix first (a mode's name may begin another's).
    per_mode = sorted((m for m in analysis.figures() if m.model is not None), key=lambda m: -len(m.column))
    for w in wide:
        key = {c: w.get(c) for c in ("profile", "size_bytes", "sweep_param", "sweep_value", "variant", "runs")}
        cell = {c: w.get(c) for c in SUMMARY_COLUMNS if c in w and c not in ("model", "mode")}
        consumed = with_stats | absent
        # The cell's own row: its stable columns and its primary figure.
        head = {c: None for c in SUMMARY_COLUMNS}
        head.update({c: v for c, v in cell.items() if c in STABLE_COLUMNS or c in _NOT_FIGURES})
        if primary:
            head.update({k: v for k, v in _figure_row(w, primary, key).items() if k in SUMMARY_COLUMNS})
            head["anova_p"] = w.get(anova)
        summary.append(head)
        extras: dict[Compared, list[tuple[str, Any]]] = {}
        for m in per_mode:
            for col in w:
                if col.startswith(m.column + "_") and col not in consumed:
                    consumed = consumed | {col}
                    extras.setdefault(m, []).append((col[len(m.column) + 1:], w[col]))
        for m in analysis.figures():
            row = _figure_row(w, m, key)
            if m.model is not None:
                # A figure measured per model and mode: where it has figures, a summary row of
                # its own (the primary figure's) and its further values of that model and mode.
                if not _has_figures(row):
                    continue
                if primary and m.figure == primary.figure:
                    summary.append({**{c: None for c in SUMMARY_COLUMNS},
                                    **{c: v for c, v in cell.items() if c in KEY_COLUMNS or c in _NOT_FIGURES},
                                    **{k: v for k, v in row.items() if k in SUMMARY_COLUMNS}})
                figures.extend(_value_row(key, name, value, m.model, m.mode) for name, value in extras.get(m, []))
            figures.append({c: row.get(c) for c in FIGURE_COLUMNS})
        figures.extend(_value_row(key, col, value) for col, value in w.items() if col not in consumed)
    return summary, figures


def _value_row(key: Row, figure: str, value: Any, model: str | None = None, mode: str | None = None) -> Row:
    row = {c: None for c in FIGURE_COLUMNS}
    row.update(key, model=model, mode=mode, figure=figure, value=value)
    return row


def upgrade(document: dict[str, Any], analysis: WorkloadAnalysis) -> dict[str, Any]:
    """A summary.json of any format as format 4 (older ones hold the wide rows)."""
    if int(document.get("format") or 0) >= SUMMARY_FORMAT:
        return document
    rows, figures = tidy_rows(analysis, document.get("rows") or [])
    return {**document, "format": SUMMARY_FORMAT, "upgraded_from": document.get("format"),
            "columns": SUMMARY_COLUMNS, "rows": rows, "figure_columns": FIGURE_COLUMNS, "figures": figures}
