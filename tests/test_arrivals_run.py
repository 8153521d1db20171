"""A small arrivals run through run.py (root): a few flows each way on the Jump Start
dumbbell, opened on schedule, checked from the captures against the client's log.

Every fetch the client logged is one connection in the capture next to its requester
(found by its local port, one to one: same count, no connection of the run left over),
delivered exactly the object size, and opened close to its schedule; both directions'
bottleneck queues were crossed (each direction's flows are seen before and after its
queue); and the variant under test ran on both directions' senders.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from analysis import flows
from analysis.packets import load
from analysis.flow_checks import emulator_flags
from conftest import ROOT
from results.schema import CAPTURE_FILES, UPSTREAM_CAPTURE_FILES
from timing import report_flagged, timing_check

SIZE = 60_000
FLOWS = 8
ON_TIME_S = 0.020          # a SYN within 20 ms of its schedule; the launcher at most 20 ms late
SCENARIO = f"""
name: arrivals-test
profiles: [js-dumbbell]
sizes: [{SIZE}B]
workload:
  kind: arrivals
  flows: {FLOWS}
  interarrival_s: 0.3
  process: poisson
  directions: both
  seed: 5
  timeout_s: 60
variants: [reno-iw3]
repetitions: 1
"""


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_arrivals_run_matches_the_log(tmp_path):
    path = tmp_path / "arrivals.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(path), "--out", str(out), "--json",
                          "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("js-dumbbell")]
    meta = json.loads((run / "meta.json").read_text())
    spec = meta["spec"]
    # Opening on schedule needs a punctual host: the run's own flags, and one stall as long as
    # the tolerance (the monitor's longest wake-up), which the flags' percentiles can miss.
    flags = emulator_flags(meta)
    stall_us = (((meta.get("host_check") or {}).get("monitor") or {}).get("timer_wakeup_us") or {}).get("max") or 0
    stall = [f"host stalled {stall_us / 1000:.0f} ms during the run (monitor max wake-up)"] \
        if stall_us > ON_TIME_S * 1e6 else []
    shown = report_flagged(out) + stall          # the stall: from the run's own monitor record (meta.json)
    late_syns = []
    assert set(spec["directions"]) == {"down", "up"}
    near = {"down": CAPTURE_FILES["client"], "up": UPSTREAM_CAPTURE_FILES["server"]}
    after = {"down": CAPTURE_FILES["bneck-out"], "up": UPSTREAM_CAPTURE_FILES["bneck-up-out"]}
    for d, ds in spec["directions"].items():
        logged = ds["fetches"]
        assert len(logged) == FLOWS and all(f["bytes"] == SIZE for f in logged)
        cap = load(run / near[d])
        ours = flows.opened_in_capture(cap.conns, flows.between(cap.conns, ds["requester_ip"], ds["sender_ip"], 80))
        assert len(ours) == FLOWS, (d, len(ours))                 # one connection per logged fetch, no more
        ports = sorted(int(cap.conns["sport"][c]) for c in ours)
        assert ports == sorted(f["local_port"] for f in logged)
        index = flows.ConnIndex(cap.conns)
        for f in logged:
            # Ports may be reused within a run: the connection whose SYN is nearest the log's start.
            c = index.find(int(ipaddress.IPv4Address(ds["requester_ip"])), f["local_port"], f["started"])
            dc = flows.direction_from_port(cap.conns, c, 80)
            assert flows.delivered_bytes(cap.conns, c, dc) == SIZE + f["head_bytes"]   # the response's headers too
            assert 100 < f["head_bytes"] < 1000
            # Opened on schedule: never before it, and the SYN passed the requester's router
            # within 20 ms of it (timing, below).
            after_schedule = flows.syn_time(cap.conns, c) - f["scheduled"]
            assert after_schedule >= 0, (d, f)
            if after_schedule >= ON_TIME_S:
                late_syns.append((d, f["local_port"], round(after_schedule * 1e3, 1)))
        out_cap = load(run / after[d])
        crossed = flows.between(out_cap.conns, ds["requester_ip"], ds["sender_ip"], 80)
        assert len(flows.opened_in_capture(out_cap.conns, crossed)) == FLOWS
    timing_check("every SYN within 20 ms of its schedule", flags + stall, not late_syns,
                 f"late (direction, port, ms): {late_syns}" if late_syns else f"{2 * FLOWS} SYNs on time", shown=shown)
    metrics = json.loads((run / "metrics.json").read_text())
    for d in ("down", "up"):
        m = metrics["directions"][d]
        assert m["count"] == FLOWS and 0 <= m["drop_rate"] < 1
        late_ms = m["lateness_app_ms"]["max"]
        timing_check(f"the {d} launcher less than 20 ms late", flags + stall, late_ms < ON_TIME_S * 1e3,
                     f"max lateness {late_ms} ms", shown=shown)
        assert np.isfinite(m["duration_mean_s"]) and m["duration_mean_s"] > meta["profile_params"]["rtt_ms"] / 1e3
    by_flow = {f["name"]: f for f in meta["flows"]}
    assert set(by_flow) == {"down", "up"}
    for f in by_flow.values():
        assert f["observed_cc"] == ["reno"] and f["connections_seen"] >= FLOWS
