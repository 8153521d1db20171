"""Compare two campaigns cell by cell (profile, size, variant, sweep value): did anything regress?

Made for nightly runs: the same scenario run last night (OLD) and tonight (NEW). For every
figure the workload compares with its baseline (competing: FCT and lost packets), a cell
regresses when the new mean is significantly worse (the 95 % Welch interval of new − old
excludes 0; higher, or lower for figures where higher is better) by more than the noise
floor: one RTT for durations, nothing for counts. The exit code is 1 when any cell
regressed, so a scheduler can alert on it.
"""
from __future__ import annotations

import json
from pathlib import Path

from analysis.runs import workload_analysis
from analysis.stats import mean, welch_difference
from analysis.tables import text_table
from config.sizes import size_label
from machine.errors import UserError
from results import schema
from results.campaign import Campaign, RunRecord


def cells(records: list[RunRecord]) -> dict[tuple, list[RunRecord]]:
    """Runs by (profile, size, variant, swept parameter=value or "" without a sweep)."""
    found: dict[tuple, list[RunRecord]] = {}
    for rec in records:
        point = ",".join(f"{k}={v:g}" for k, v in rec.sweep.items())
        found.setdefault((rec.profile, rec.size_bytes, rec.variant, point), []).append(rec)
    return found


def compare(old_dir: Path, new_dir: Path) -> list[dict]:
    """One row per cell present in both campaigns, with the change of each compared figure."""
    old, new = Campaign.open(old_dir), Campaign.open(new_dir)
    workloads = {c.record.get("workload", schema.LEGACY_WORKLOAD) for c in (old, new)}
    if len(workloads) != 1:
        raise UserError(f"the campaigns ran different workloads ({', '.join(sorted(workloads))}): nothing to compare")
    analysis = workload_analysis(workloads.pop())
    old_records, new_records = old.records(), new.records()
    clocks = {r.meta.get("run_clock", {}).get("clock", "real") for r in old_records + new_records}
    if len(clocks) > 1:
        # A figure's change would be the clock's: the real clock's runs carry the host's timing.
        raise UserError(f"the campaigns ran on different clocks ({', '.join(sorted(clocks))}): nothing to compare")
    old_cells, new_cells = cells(old_records), cells(new_records)
    rows = []
    for key in sorted(set(old_cells) & set(new_cells), key=lambda k: (k[0], k[1] or 0, k[2], k[3])):
        before, after = old_cells[key], new_cells[key]
        row = {"profile": key[0], "size_bytes": key[1], "variant": key[2], "sweep": key[3],
               "runs_old": len(before), "runs_new": len(after), "regressed": False, "changed": False}
        for metric in analysis.compared:
            a, b = [metric.get(r) for r in after], [metric.get(r) for r in before]
            d = welch_difference(a, b)
            floor = after[0].rtt_s if metric.rtt_floor else 0.0
            worse = d.significant and abs(d.diff) > floor and not metric.better(d.diff)
            row.update({f"{metric.name}_old": mean(b), f"{metric.name}_new": mean(a), f"{metric.name}_diff": d.diff,
                        f"{metric.name}_significant": d.significant, f"{metric.name}_regressed": worse})
            row["regressed"] = row["regressed"] or worse
            row["changed"] = row["changed"] or d.significant
        rows.append(row)
    return rows


def compare_campaigns(old_dir: Path, new_dir: Path, as_json: bool) -> int:
    rows = compare(old_dir, new_dir)
    if as_json:
        print(json.dumps({"old": str(old_dir), "new": str(new_dir), "rows": rows}, indent=2))
    elif not rows:
        print("the two campaigns have no (profile, size, variant) in common")
    else:
        analysis = workload_analysis(Campaign.open(new_dir).record.get("workload", schema.LEGACY_WORKLOAD))
        headers = ["profile", "size", "variant"]
        for m in analysis.compared:
            headers += [f"{m.label} old", f"{m.label} new"]
        table = []
        for r in rows:
            cells = [r["profile"], "–" if r["size_bytes"] is None else size_label(r["size_bytes"]),
                     f"{r['variant']} {r['sweep']}".strip()]
            for m in analysis.compared:
                cells += [f"{r[f'{m.name}_old']:.4g}", f"{r[f'{m.name}_new']:.4g}"]
            table.append(cells + ["REGRESSED" if r["regressed"] else ("changed" if r["changed"] else "same")])
        print(text_table(headers + ["verdict"], table))
    return 1 if any(r["regressed"] for r in rows) else 0
