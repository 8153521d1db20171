"""Per-(profile, size, variant) summary of a campaign: summary.csv, figures.csv, summary.json.

Generic over workloads: the runs are grouped into cells (profile, size, sweep value,
variant) in campaign order, and the workload's analysis describes each cell and compares
it with the baseline at the same profile, size and sweep value, as one row of its own
columns (what the report and the console table show). The files hold the same figures as
tidy tables with the same columns for every workload (analysis.tidy); their first eleven
columns are the stable interface other tools and acceptance checks read (docs/design.md).
"""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

from analysis import flow_checks, stats
from analysis.tidy import (FIGURE_COLUMNS, KEY_COLUMNS, STABLE_COLUMNS, SUMMARY_COLUMNS, SUMMARY_FORMAT,
                           TRAILING_COLUMNS, tidy_rows)
from analysis.workloads.base import Row, WorkloadAnalysis
from results.campaign import RunRecord
from results.schema import FIGURES_CSV, SUMMARY_CSV, SUMMARY_JSON
from results.store import write_atomically


def columns_of(analysis: WorkloadAnalysis) -> list[str]:
    """A workload's own row's columns: the stable ones (empty where the workload has none),
    the workload's, then the generic trailing ones."""
    own = [c for c in analysis.columns if c not in KEY_COLUMNS]
    missing = [c for c in STABLE_COLUMNS if c not in KEY_COLUMNS and c not in own]
    return KEY_COLUMNS + missing + own + [c for c in TRAILING_COLUMNS if c not in own]


def summary_rows(campaign: dict[str, Any], records: list[RunRecord], analysis: WorkloadAnalysis) -> list[Row]:
    """One row per (profile, size, sweep value, variant) present in the records, in campaign
    order; variants are compared with the baseline at the same point of the matrix."""
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for rec in records:
        groups[rec.cell].append(rec)
    columns = columns_of(analysis)
    primary = analysis.compared[0] if analysis.compared else None
    baseline = campaign.get("baseline")
    rows: list[Row] = []
    for profile, size in ordered_cells(campaign, records):
        points = sorted({k[2] for k in groups if k[:2] == (profile, size)}, key=lambda x: (x is not None, x))
        for point in points:
            variants = [v for v in ordered_variants(campaign, records) if (profile, size, point, v) in groups]
            anova = (stats.anova_p([[primary.get(r) for r in groups[(profile, size, point, v)]] for v in variants])
                     if primary else None)
            base = groups.get((profile, size, point, baseline)) if baseline else None
            for variant in variants:
                runs = groups[(profile, size, point, variant)]
                sweep = runs[0].sweep
                row: Row = {c: None for c in columns}
                row.update(profile=profile, size_bytes=size, variant=variant, runs=len(runs),
                           rtt_s=runs[0].rtt_s, rate_bps=runs[0].rate_bps,
                           sweep_param=next(iter(sweep), None), sweep_value=next(iter(sweep.values()), None),
                           emulator_flagged_runs=sum(1 for r in runs if flow_checks.emulator_flags(r.meta)),
                           flow_check_failed_runs=sum(1 for r in runs if flow_checks.failed_checks(r.metrics)))
                if primary:
                    row[f"anova_{primary.column}_p"] = anova
                row.update(analysis.describe(runs))
                if base and variant != baseline:
                    row.update(analysis.compare(runs, base))
                rows.append({c: row.get(c) for c in columns})
    return rows


def ordered_cells(campaign: dict[str, Any], records: list[RunRecord]) -> list[tuple[str, Optional[int]]]:
    """The (profile, size) cells with runs: profiles in campaign order, sizes ascending."""
    order = {name: i for i, name in enumerate(campaign.get("profiles") or [])}
    cells = {(r.profile, r.size_bytes) for r in records}
    return sorted(cells, key=lambda c: (order.get(c[0], len(order)), c[0], c[1] or 0))


def ordered_variants(campaign: dict[str, Any], records: list[RunRecord]) -> list[str]:
    """Variants with runs: the baseline first, then campaign order, then any others by name."""
    listed = list(campaign.get("variants") or [])
    baseline = campaign.get("baseline")
    if baseline:
        listed = [baseline] + [v for v in listed if v != baseline]
    present = {r.variant for r in records}
    return [v for v in listed if v in present] + sorted(present - set(listed))


def write_summary(campaign_dir: Path | str, campaign: dict[str, Any], records: list[RunRecord],
                  analysis: WorkloadAnalysis) -> list[Row]:
    """Write summary.csv, figures.csv and summary.json (the tidy tables) into the campaign
    directory; return the workload's own rows (for the report)."""
    root = Path(campaign_dir)
    rows = summary_rows(campaign, records, analysis)
    summary, figures = tidy_rows(analysis, rows)
    write_atomically(root / SUMMARY_CSV, _csv_text(SUMMARY_COLUMNS, summary))
    write_atomically(root / FIGURES_CSV, _csv_text(FIGURE_COLUMNS, figures))
    document = {"format": SUMMARY_FORMAT, "campaign": campaign, "columns": SUMMARY_COLUMNS, "rows": summary,
                "figure_columns": FIGURE_COLUMNS, "figures": figures}
    write_atomically(root / SUMMARY_JSON, json.dumps(document, indent=2, allow_nan=False) + "\n")
    return rows


def split_rows(campaign: dict[str, Any], records: list[RunRecord], analysis: WorkloadAnalysis,
               key: str) -> list[Row]:
    """The workload's rows computed separately for each value of a run's meta[key] ("host"
    on a cluster, "machine"): a testbed that disagrees with the others shows up in its own rows."""
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for rec in records:
        value = rec.meta.get(key)
        groups[str(value.get("index") if isinstance(value, dict) else value)].append(rec)
    return [{key: value, **row} for value in sorted(groups)
            for row in summary_rows(campaign, groups[value], analysis)]


def write_split_summary(campaign_dir: Path | str, campaign: dict[str, Any], records: list[RunRecord],
                        analysis: WorkloadAnalysis, key: str) -> Path:
    """summary-by-<key>.csv: every figure (figures.csv's rows), per value of `key`."""
    path = Path(campaign_dir) / f"summary-by-{key}.csv"
    rows = split_rows(campaign, records, analysis, key)
    figures = [{key: row[key], **figure} for row in rows for figure in tidy_rows(analysis, [row])[1]]
    write_atomically(path, _csv_text([key] + FIGURE_COLUMNS, figures))
    return path


def _csv_text(columns: list[str], rows: Iterable[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(row[c]) for c in columns])
    return out.getvalue()


def _csv_cell(value: Any) -> str:
    """Empty for missing figures, lowercase booleans, full float precision (repr)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
