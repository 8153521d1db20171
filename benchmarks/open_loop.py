#!/usr/bin/env python3
"""Benchmark: are the open-loop workloads' connections opened on schedule at their highest load?

    sudo flock /tmp/startlab-emulation.lock .venv/bin/python benchmarks/open_loop.py \\
        [--scenario scenarios/jumpstart-load.yaml] [--point VALUE] [--variant NAME] [--duration S]
    .venv/bin/python benchmarks/open_loop.py --campaign DIR     # a campaign it ran before

For an `arrivals` or `websessions` scenario it runs one repetition at one sweep point (by
default the highest load: the smallest inter-arrival time, the most sessions) and prints per
kind of connection (JSON lines):

- late_ms: the client's connect() (HTTP) or curl's fork (FTP) minus the schedule,
  p50/p99/max over every connection of the run — the generator's own timing; the target
  is p99 ≤ 1 ms; for FTP also spawn_ms, how long forking curl took (the launcher's next
  transfer waits for it);
- peak_open: the most HTTP connections one client host had open at once (nothing bounds
  it but the file-descriptor limit);
- connections, and the run's delay-element lateness p99 (the emulator not starved).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from results.campaign import Campaign  # noqa: E402

HIGHEST = {"interarrival_s": min, "sessions": max}


def scheduled_starts(meta: dict) -> dict[str, list[tuple[float, float]]]:
    """(scheduled, started) per kind of connection, from either workload's log."""
    spec = meta["spec"]
    out: dict[str, list[tuple[float, float]]] = {}
    if "directions" in spec:                              # arrivals
        for d, ds in spec["directions"].items():
            out.setdefault("http", []).extend((f["scheduled"], f["started"]) for f in ds["fetches"])
    for f in spec.get("fetches") or []:                   # websessions
        out.setdefault(f.get("kind", "http"), []).append((f["scheduled"], f["started"]))
    return out


def spawn_ms(meta: dict) -> list[float]:
    """FTP: how long forking curl held the launcher (it delays the next transfer's start)."""
    return [(f["spawned"] - f["started"]) * 1e3 for f in meta["spec"].get("fetches") or []
            if f.get("kind") == "ftp" and f.get("spawned")]


def figures(campaign: Path) -> list[dict]:
    out = []
    for rec in Campaign.open(campaign).records():
        meta = rec.meta
        late_delay = [(e.get("lateness_us") or {}).get("p99") for e in meta.get("emulator") or []]
        late_delay = [x for x in late_delay if x is not None]
        app = meta.get("app") or {}
        peaks = [v["peak_open"] for v in app.values() if isinstance(v, dict) and "peak_open" in v] or \
            list((app.get("peak_open") or {}).values())
        spawns = spawn_ms(meta)
        for kind, pairs in scheduled_starts(meta).items():
            late = [(b - a) * 1e3 for a, b in pairs]
            out.append({"run": rec.run_id, "sweep": rec.sweep, "kind": kind, "connections": len(late),
                        "late_ms": _p(late),
                        "peak_open": max(peaks) if peaks and kind == "http" else None,
                        **({"spawn_ms": _p(spawns)} if kind == "ftp" and spawns else {}),
                        "delay_late_p99_ms": max(late_delay) / 1e3 if late_delay else None})
    return out


def _p(xs: list[float]) -> dict:
    a = np.array(xs)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p99": round(float(np.percentile(a, 99)), 3),
            "max": round(float(a.max()), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=str(REPO / "scenarios" / "jumpstart-load.yaml"))
    ap.add_argument("--point", type=float, help="the sweep value to run (default: the highest load)")
    ap.add_argument("--variant", help="default: the scenario's baseline")
    ap.add_argument("--duration", type=float, help="websessions: duration_s of the run")
    ap.add_argument("--campaign", help="print the figures of a campaign this benchmark ran before")
    a = ap.parse_args()
    if a.campaign:
        for line in figures(Path(a.campaign)):
            print(json.dumps(line))
        return 0
    doc = yaml.safe_load(Path(a.scenario).read_text())
    sweep = doc.pop("sweep", None)
    if sweep:
        pick = HIGHEST.get(sweep["param"], max)
        doc["workload"][sweep["param"]] = a.point if a.point is not None else pick(sweep["values"])
    if a.duration:
        doc["workload"]["duration_s"] = a.duration
    doc["variants"] = [a.variant or doc.get("baseline") or doc["variants"][0]]
    doc.pop("baseline", None)
    doc["repetitions"] = 1
    doc["profiles"] = doc["profiles"][:1]
    tmp = Path(tempfile.mkdtemp(prefix="startlab-open-loop-"))
    path = tmp / "open-loop.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(path), "--out", str(tmp / "campaign")],
                         env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
    if res.returncode != 0:
        print(f"the run failed (exit {res.returncode}); campaign in {tmp / 'campaign'}", file=sys.stderr)
        return 1
    for line in figures(tmp / "campaign"):
        print(json.dumps(line))
    print(f"campaign: {tmp / 'campaign'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
