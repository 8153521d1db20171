"""Compare two campaigns cell by cell (profile, size, variant): did anything regress?

Made for nightly runs: the same scenario run last night (OLD) and tonight (NEW). A cell
regresses when the new mean FCT or loss is significantly higher (the 95 % Welch interval
of new − old excludes 0) by more than the noise floor of one RTT for FCT. The exit code is
1 when any cell regressed, so a scheduler can alert on it.
"""
from __future__ import annotations

import json
from pathlib import Path

from analysis.records import load_campaign, size_label
from analysis.stats import mean, welch_difference

METRICS = {"fct_s": lambda r: r["short"]["fct_s"], "lost_pkts": lambda r: r["short"]["lost_pkts"]}


def _cells(records: list[dict]) -> dict[tuple, list[dict]]:
    """Runs by (profile, size, variant, swept parameter=value or "" without a sweep)."""
    cells: dict[tuple, list[dict]] = {}
    for rec in records:
        point = ",".join(f"{k}={v:g}" for k, v in (rec.get("sweep") or {}).items())
        cells.setdefault((rec["profile"], rec["size_bytes"], rec["variant"], point), []).append(rec)
    return cells


def compare(old_dir: Path, new_dir: Path) -> list[dict]:
    """One row per cell present in both campaigns, with the change of each metric."""
    _, old_records = load_campaign(old_dir)
    _, new_records = load_campaign(new_dir)
    old_cells, new_cells = _cells(old_records), _cells(new_records)
    rows = []
    for key in sorted(set(old_cells) & set(new_cells)):
        old, new = old_cells[key], new_cells[key]
        row = {"profile": key[0], "size_bytes": key[1], "variant": key[2], "sweep": key[3], "runs_old": len(old),
               "runs_new": len(new), "regressed": False}
        for name, get in METRICS.items():
            a, b = [get(r) for r in new], [get(r) for r in old]
            d = welch_difference(a, b)
            floor = new[0]["rtt_s"] if name == "fct_s" else 0.0
            worse = d.significant and d.diff > floor
            row.update({f"{name}_old": mean(b), f"{name}_new": mean(a), f"{name}_diff": d.diff,
                        f"{name}_significant": d.significant, f"{name}_regressed": worse})
            row["regressed"] = row["regressed"] or worse
        rows.append(row)
    return rows


def compare_campaigns(old_dir: Path, new_dir: Path, as_json: bool) -> int:
    rows = compare(old_dir, new_dir)
    if as_json:
        print(json.dumps({"old": str(old_dir), "new": str(new_dir), "rows": rows}, indent=2))
    else:
        print(f"{'profile':<12} {'size':>6} {'variant':<14} {'FCT old':>9} {'FCT new':>9} {'loss old':>8} "
              f"{'loss new':>8}  verdict")
        for r in rows:
            verdict = "REGRESSED" if r["regressed"] else ("changed" if r["fct_s_significant"]
                                                            or r["lost_pkts_significant"] else "same")
            variant = f"{r['variant']} {r['sweep']}".strip()
            print(f"{r['profile']:<12} {size_label(r['size_bytes']):>6} {variant:<14} "
                  f"{r['fct_s_old']:>8.3f}s {r['fct_s_new']:>8.3f}s {r['lost_pkts_old']:>8.1f} "
                  f"{r['lost_pkts_new']:>8.1f}  {verdict}")
        if not rows:
            print("the two campaigns have no (profile, size, variant) in common")
    return 1 if any(r["regressed"] for r in rows) else 0
