#!/usr/bin/env python3
"""The competing experiment's ordering on dsl-fast, 2 MB, against a CUBIC long flow.

An experiment's outcome, not the emulator's behaviour: printed here, never asserted in the
suite (making it pass by changing the emulator would be tuning toward a result). It runs
`run blitzstart-table1.yaml --profiles dsl-fast --sizes 2MB --variants
cubic-iw32,cubic-iw10,reno-iw3 --reps N` and prints each variant's median FCT, the
IW32 − IW10 and Reno IW3 − CUBIC IW10 differences, and how many runs the host flagged.

Measured on the machine the suite was first written on (5 repetitions): CUBIC IW32 1.40 s,
CUBIC IW10 1.75 s, Reno IW3 1.72 s; a single IW32 run can land in a slow mode (1 of 17 took
1.71 s), so medians of at least 5 repetitions are compared.
Run as root: sudo .venv/bin/python benchmarks/competing_order.py [--reps 5] [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", help="campaign directory (default: a temporary one, removed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="startlab-order-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "campaign"
        res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run",
                              str(ROOT / "scenarios" / "blitzstart-table1.yaml"), "--profiles", "dsl-fast",
                              "--sizes", "2MB", "--variants", "cubic-iw32,cubic-iw10,reno-iw3",
                              "--reps", str(args.reps), "--out", str(out), "--unfit-host"],
                             capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)
            return res.returncode
        rows = {r["variant"]: r for r in csv.DictReader(open(out / "summary.csv"))}
        host = json.loads((out / "host.json").read_text())
    fct = {v: float(r["fct_median_s"]) for v, r in rows.items()}
    for v, r in rows.items():
        print(f"{v:<12} median FCT {fct[v]:.3f} s over {r['runs']} runs")
    print(f"IW32 - IW10      {fct['cubic-iw32'] - fct['cubic-iw10']:+.3f} s")
    print(f"Reno3 - CUBIC10  {fct['reno-iw3'] - fct['cubic-iw10']:+.3f} s")
    print(f"host before the campaign: {host['verdicts']['dsl-fast']['reason'] or 'fit for dsl-fast'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
