#!/usr/bin/env python3
"""Campaign wall time with 1 lane and with N lanes (a cluster's: benchmarks/slurm_overhead.py).

Runs the same scenario (default: smoke with --reps 4) two ways into fresh directories
and prints, per way, the wall time, the mean run time and the emulator's per-run
fidelity (delay element lateness p50/p99 and drops, from every run's meta.json):
  * 1 lane;
  * N lanes (`--lanes auto` where the machine has ≥ 2 CPUs per lane; on a smaller machine
    2 lanes with --force, only to show that the path works: fidelity degrades, the table
    says by how much).
Needs root; wrap it in `flock /tmp/startlab-emulation.lock` (it is the emulation).

    sudo flock /tmp/startlab-emulation.lock .venv/bin/python benchmarks/scale.py [--reps 4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine.cpuset import own_cpus  # noqa: E402
from scenarios.lanes import auto_lanes  # noqa: E402

ENV = {**os.environ, "STARTLAB_NO_REEXEC": "1"}


def run(argv: list[str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), *argv, "--json"], capture_output=True,
                         text=True, env=ENV, cwd=ROOT)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return wall, json.loads(res.stdout)


def fidelity(campaign: Path) -> dict:
    """Per-run emulator figures of a campaign: worst and median lateness p99, drops."""
    p50s, p99s, drops, run_s = [], [], 0, []
    for meta_file in campaign.glob("*/meta.json"):
        meta = json.loads(meta_file.read_text())
        run_s.append(meta.get("timings", {}).get("run_s") or 0)
        for element in meta.get("emulator") or []:
            late = element.get("lateness_us") or {}
            if late.get("p99") is not None:
                p50s.append(late["p50"])
                p99s.append(late["p99"])
            drops += element.get("drops") or 0
    return {"runs": len(run_s), "mean_run_s": statistics.mean(run_s) if run_s else None,
            "lateness_p50_us_median": statistics.median(p50s) if p50s else None,
            "lateness_p99_us_median": statistics.median(p99s) if p99s else None,
            "lateness_p99_us_max": max(p99s) if p99s else None, "drops": drops}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="smoke")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = len(own_cpus())
    lanes = auto_lanes(cpus)
    forced = lanes < 2
    lanes = max(lanes, 2)
    tmp = Path(tempfile.mkdtemp(prefix="startlab-scale-"))
    common = ["run", args.scenario, "--reps", str(args.reps)]
    out: dict = {"cpus": cpus, "scenario": args.scenario, "reps": args.reps}
    try:
        wall, _ = run([*common, "--out", str(tmp / "one")])
        out["one_lane"] = {"wall_s": wall, **fidelity(tmp / "one")}
        wall, figures = run([*common, "--lanes", str(lanes), *(["--force"] if forced else []),
                             "--out", str(tmp / "lanes")])
        out["lanes"] = {"lanes": lanes, "forced": forced, "wall_s": wall, **fidelity(tmp / "lanes"),
                        "per_lane": figures["run_stats"].get("lanes")}
        out["speedup"] = out["one_lane"]["wall_s"] / wall
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{args.scenario}, {args.reps} reps, {cpus} CPUs")
    rows = [("1 lane", out["one_lane"]),
            (f"{lanes} lanes{' (--force)' if forced else ''}", out["lanes"])]
    print(f"{'':24} {'wall':>8} {'runs':>5} {'run mean':>9} {'late p50':>9} {'p99 med':>8} {'p99 max':>8} {'drops':>6}")
    for label, r in rows:
        print(f"{label:24} {r['wall_s']:7.1f}s {r['runs']:5d} {r['mean_run_s'] or 0:8.1f}s "
              f"{r['lateness_p50_us_median'] or 0:7.0f}µs {r['lateness_p99_us_median'] or 0:6.0f}µs "
              f"{r['lateness_p99_us_max'] or 0:6.0f}µs {r['drops']:6d}")
    print(f"speed-up with {lanes} lanes: {out['speedup']:.2f} (target on ≥ 2 CPUs per lane: ≥ {0.8 * lanes:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
