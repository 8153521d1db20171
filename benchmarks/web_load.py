#!/usr/bin/env python3
"""Benchmark: does the web workload deliver the load it is asked for, without starving the emulator?

    sudo flock /tmp/startlab-emulation.lock .venv/bin/python benchmarks/web_load.py \\
        [--users 1,10,100] [--modes http10,http11] [--duration 180] [--model surge-default]
    .venv/bin/python benchmarks/web_load.py --campaign DIR      # figures of a campaign it ran before

It runs the web workload through run.py on lab-1g (1 Gbit/s, 20 ms: the path never holds
the users back) with the users swept and a stationary start (every user in steady state
from the first second), then prints per users and HTTP mode (JSON lines):

- requested_Bps: content bytes of the pages whose document httperf requested in
  [start, start + duration], per second (from its per-call log);
- schedule_Bps: the same for the users' sessions as the generator was asked to replay
  them — each user's pages one after another, the think time after each page, the pages'
  load times as measured — so requested ÷ schedule − 1 is the generator's own error
  (late timers, a starved process);
- model_Bps: users × mean page bytes ÷ (mean think time + mean load time) for this file
  set, and model_range_Bps, the 2.5–97.5 % range of what sessions of this many users
  request in this duration over 400 seeds: Pareto think times (α = 1.4, infinite
  variance) and heavy-tailed page sizes make a finite run's load a random quantity
  around the expectation, whatever generator replays it;
- think_late_ms: the next page's start (its SYN or document request on the wire) minus the
  previous page's last byte minus the think time (httperf's timers), p50/p99;
- delay_late_p99_ms: the delay line's lateness over the run (≤ 1 ms: not starved);
- cpu_per_user_pct: httperf + stamper, and lighttpd, CPU seconds ÷ replay seconds ÷ users.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from hosts.workloads import surge  # noqa: E402
from results.campaign import Campaign  # noqa: E402
from wire.httperf_log import parse_files  # noqa: E402

SCENARIO = """name: web-load
profiles: [lab-1g]
workload:
  kind: web
  model: {model}
  mode: [{modes}]
  users: 1
  clients: {clients}
  stationary: true
  duration_s: {duration}
sweep:
  param: users
  values: [{users}]
variants: [cubic-iw10]
repetitions: 1
seed: 11
"""


def run_campaign(args) -> Path:
    work = Path(tempfile.mkdtemp(prefix="stlweb-load-"))
    scenario = work / "web-load.yaml"
    scenario.write_text(SCENARIO.format(model=args.model, modes=", ".join(args.modes.split(",")),
                                        clients=args.clients, duration=args.duration, users=args.users))
    out = work / "campaign"
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(scenario), "--out", str(out), "--json"],
                         env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"run.py failed ({res.returncode}): {res.stderr[-2000:]}")
    print(f"# campaign {out}", flush=True)
    return out


def schedule_and_think(fs, sessions: dict, calls_by_user: dict, loads: dict, t0: float, t1: float
                       ) -> tuple[float, list[float]]:
    """Content bytes the sessions schedule in [t0, t1) given the measured starts and load
    times, and the think-time errors of the replay."""
    scheduled, late = 0.0, []
    for u, s in sessions.items():
        calls = calls_by_user.get(u)
        if not calls:
            continue
        # The user's clock starts at its first request (a warm-up when the start is stationary).
        t = min(c.sent_s for c in calls if c.sent_s is not None)
        if s.start_offset_s > 0:
            t += s.start_offset_s
        for p, v in enumerate(s.visits):
            if t0 <= t < t1:
                scheduled += sum(fs.files[i].size for i in fs.pages[v.page].files)
            load = loads.get((u, p))
            if load is None:
                break
            start, end = load
            nxt = loads.get((u, p + 1))
            if nxt is not None:
                late.append(nxt[0] - end - v.think_s)
            t += (end - start) + v.think_s
    return scheduled, late


def model_range(fs, users: int, duration: float, load_s: float, seeds: int = 400) -> tuple[float, float]:
    """2.5–97.5 % of bytes/s that `users` stationary sessions request over `duration`."""
    rates = []
    scale = fs.model.think_time.mean / (fs.model.think_time.mean + load_s)
    for seed in range(seeds):
        total = 0.0
        for u in range(users):
            s = surge.user_session(fs, u, duration, seed=10_000 + seed, stationary=True)
            t = s.start_offset_s
            for v in s.visits:
                if t < duration:
                    total += fs.page_bytes(v.page)
                t += v.think_s
        rates.append(total / duration * scale)
    return float(np.percentile(rates, 2.5)), float(np.percentile(rates, 97.5))


def figures(campaign: Path) -> list[dict]:
    rows = []
    for rec in Campaign.open(campaign).records():
        spec, run_dir = rec.meta["spec"], campaign / rec.run_id
        users, duration = spec["users"], spec["duration_s"]
        late_p99 = max(((e.get("lateness_us") or {}).get("p99") or 0) for e in rec.meta.get("emulator") or [{}])
        for combo in spec["combos"]:
            m = surge.model(combo["model"])
            fs = surge.make_file_set(m, spec["seed"])
            sessions = {u: surge.user_session(fs, u, duration, seed=spec["session_seed"], stationary=spec["stationary"])
                        for u in range(users)}
            calls_by_user: dict[int, list] = {}
            loads: dict[tuple, tuple] = {}
            cpu = 0.0
            for h in combo["hosts"]:
                rep = parse_files(run_dir / h["log"], run_dir / h["err"])
                for c in rep.calls.values():
                    tag = c.tag
                    user = tag[0] if tag else int(c.uri.split("u=")[1].split("&")[0])
                    calls_by_user.setdefault(user, []).append(c)
                app = rec.meta["app"][combo["key"]][h["host"]]
                cpu += (app.get("cpu") or {}).get("httperf_cpu_s", 0) + (app.get("cpu") or {}).get("stamper_cpu_s", 0)
            # Loads as the analysis measured them on the wire: from the SYN (HTTP/1.0) or the
            # document's request to the last byte.
            got = rec.metrics["combos"][combo["key"]]
            for u, p, s0, dl in zip(got["page_user"], got["page_index"], got["page_start_s"], got["download_s"]):
                loads[(u, p)] = (combo["t_start"] + s0, combo["t_start"] + s0 + dl)
            t0 = combo["t_start"]
            t1 = t0 + duration
            # A page counts in the window where its document was requested, with all its bytes,
            # in the replay as in the schedule.
            started = {(u, c.tag[1]) for u, cs in calls_by_user.items() for c in cs
                       if c.tag and c.tag[2] == 0 and c.sent_s is not None and t0 <= c.sent_s < t1}
            requested = sum(fs.page_bytes(sessions[u].visits[p].page) for u, p in started)
            scheduled, late = schedule_and_think(fs, sessions, calls_by_user, loads, t0, t1)
            load_mean = float(np.mean([e - s for s, e in loads.values()])) if loads else 0.0
            model = users * fs.expected_page_bytes / (m.think_time.mean + load_mean)
            lo, hi = model_range(fs, users, duration, load_mean)
            seconds = combo["t_end"] - combo["t_start"]
            lighttpd = rec.meta["app"][combo["key"]].get("lighttpd_cpu_s") or 0.0
            late_ms = np.array(late) * 1e3 if late else np.array([np.nan])
            rows.append({
                "users": users, "mode": combo["mode"], "model": combo["model"], "pages": len(loads),
                "requested_Bps": round(requested / duration), "schedule_Bps": round(scheduled / duration),
                "generator_error": round(requested / scheduled - 1, 4) if scheduled else None,
                "model_Bps": round(model), "model_range_Bps": [round(lo), round(hi)],
                "vs_model": round(requested / duration / model - 1, 4),
                "think_late_ms": {"p50": round(float(np.nanmedian(late_ms)), 3),
                                  "p99": round(float(np.nanpercentile(late_ms, 99)), 3)},
                "delay_late_p99_ms": round(late_p99 / 1000, 3),
                "cpu_per_user_pct": {"httperf+stamper": round(100 * cpu / seconds / users, 3),
                                     "lighttpd": round(100 * lighttpd / seconds / users, 3)},
                "replay_s": round(seconds, 1),
            })
    return sorted(rows, key=lambda r: (r["mode"], r["users"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="1,10,100")
    ap.add_argument("--modes", default="http10,http11")
    ap.add_argument("--model", default="surge-default", choices=list(surge.MODELS))
    ap.add_argument("--duration", type=float, default=180.0)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--campaign", help="report a campaign this benchmark ran before instead of running one")
    args = ap.parse_args()
    campaign = Path(args.campaign) if args.campaign else run_campaign(args)
    for row in figures(campaign):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
