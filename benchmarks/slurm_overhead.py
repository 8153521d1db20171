#!/usr/bin/env python3
"""What Slurm costs a campaign: the same campaign run here and submitted with `--slurm` to a
one-node cluster of startlab's own on this machine (machine/slurm.LocalCluster).

Prints, per way, the wall time, the runs' own time (setup, traffic, analysis, from their
stats) and, for Slurm, its overhead against the local run: submission, each task's start
(its host check on the real clock, its guest's boot on the virtual clock), polling and the
merge. With `--node-dir` a third campaign goes to the same cluster with its runs on the node's
own storage, staged back through srun (scenarios/staging.py): the staging's cost is its wall
time against the shared one's. With `--clock virtual` it also compares the two campaigns' per-run figures
(analysis/determinism.py): on the virtual clock the node and the batch a run lands in must
not change them.

    sudo .venv/bin/python benchmarks/slurm_overhead.py [--clock real|virtual] [--batch N] \\
        [--scenario scenarios/smoke.yaml] [--profiles dsl-slow] [--reps 2] [--node-dir]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis import determinism  # noqa: E402
from machine.slurm import LocalCluster  # noqa: E402


def campaign(argv: list[str], env: dict) -> tuple[float, dict]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", *argv, "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"run {' '.join(argv)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return wall, json.loads(res.stdout)["run_stats"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clock", default="real", choices=["real", "virtual"])
    ap.add_argument("--scenario", default="scenarios/smoke.yaml")
    ap.add_argument("--profiles", default=None)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2, help="runs per array task")
    ap.add_argument("--node-dir", action="store_true", help="also the campaign on the node's own storage, staged back")
    ap.add_argument("--out", help="keep the campaigns here (default: a temporary directory)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    base = [args.scenario, "--reps", str(args.reps), "--clock", args.clock, "--unfit-host",
            *(["--profiles", args.profiles] if args.profiles else [])]
    env = {**os.environ, "STARTLAB_NO_REEXEC": "1"}
    with tempfile.TemporaryDirectory(prefix="startlab-bench-slurm-") as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        if args.clock == "virtual":
            base.remove("--unfit-host")
        local_wall, local = campaign([*base, "--out", str(out / "local")], env)
        staged_wall = None
        with LocalCluster() as cluster:
            on_slurm = [*base, "--slurm", "--batch", str(args.batch)]
            slurm_env = {**env, "SLURM_CONF": str(cluster.conf)}
            slurm_wall, slurm = campaign([*on_slurm, "--out", str(out / "slurm")], slurm_env)
            if args.node_dir:
                staged_wall, _ = campaign([*on_slurm, "--out", str(out / "staged"),
                                           "--node-dir", str(out / "node-local")], slurm_env)
        runs = local["runs"]
        tasks = len(slurm["slurm"]["tasks"])
        print(f"campaign: {' '.join(base)} ({runs} runs)")
        print(f"{'way':<28} {'wall s':>8} {'s/run':>7}")
        print(f"{'here, one process':<28} {local_wall:8.1f} {local_wall / runs:7.1f}")
        print(f"{f'Slurm, {tasks} tasks of ≤{args.batch} runs':<28} {slurm_wall:8.1f} {slurm_wall / runs:7.1f}")
        if staged_wall is not None:
            print(f"{'Slurm, node storage, staged':<28} {staged_wall:8.1f} {staged_wall / runs:7.1f}")
        print(f"Slurm's overhead: {slurm_wall - local_wall:+.1f} s ({(slurm_wall / local_wall - 1) * 100:+.0f} %), "
              f"{(slurm_wall - local_wall) / tasks:+.1f} s a task")
        if staged_wall is not None:
            print(f"staging from the node's storage: {staged_wall - slurm_wall:+.1f} s against the shared campaign")
        if args.clock == "virtual":
            dirs = [out / "local", out / "slurm", *([out / "staged"] if args.node_dir else [])]
            results = determinism.compare(dirs)
            print(determinism.text(results, dirs))
            same = all(not r.differing_figures for r in results)
            print(f"per-run figures {'identical' if same else 'DIFFER'} here and on Slurm "
                  f"({len(results)} runs compared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
