"""Root integration: the competing workload over QUIC through the real runner.

`run blitzstart-table1-quic.yaml --profiles dsl-fast --sizes 70KB --variants
quic-cubic-iw32,quic-blitz-1.0x --reps 1`: both flows run startlab's QUIC endpoints in the
Mininet hosts, the long one fills the 50 Mbit/s bottleneck first. Checked per run: the
FCT is plausible (at least the handshake and one response RTT, at most a few seconds);
the hint the Blitzstart server received is the client's, 1.0 × 50 Mbit/s with the
profile's technology (the hint travels encrypted: the server's report is where it can be
read); the first flights on the wire are what the servers report (32 datagrams for the
baseline, the whole object for Blitzstart, whose window hint × RTT exceeds 70 KB); every
run's checks passed, with the congestion control as the endpoints report it; and the
machine is left clean (the clean_machine fixture).
"""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from results.schema import ERROR_FILE, FAILED_SUFFIX
from timing import campaign_flags, report_flagged, timing_check

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

RATE_BPS, RTT_S, SIZE, DATAGRAM = 50e6, 0.050, 70_000, 1472


def test_quic_competing_run_blitz_and_baseline(tmp_path):
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run",
                          str(ROOT / "scenarios" / "blitzstart-table1-quic.yaml"), "--profiles", "dsl-fast",
                          "--sizes", "70KB", "--variants", "quic-cubic-iw32,quic-blitz-1.0x", "--reps", "1",
                          "--out", str(out), "--json", "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    # A run whose first flights differ from what its servers report is kept as <run>.failed/:
    # the host's doing only where the run carries host flags (its meta.json), else a failure.
    per_run, _ = campaign_flags(out)
    failed = {d.name: (d / ERROR_FILE).read_text() if (d / ERROR_FILE).exists() else "no error.txt"
              for d in out.glob(f"*{FAILED_SUFFIX}")}
    unexplained = {name: error for name, error in failed.items() if not per_run.get(name)}
    assert res.returncode == (1 if failed else 0) and not unexplained, \
        (unexplained, failed, res.stdout[-2000:], res.stderr[-3000:])
    rows = {r["variant"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    runs = {}
    for meta_path in out.glob("*/meta.json"):             # finished and failed runs alike
        meta = json.loads(meta_path.read_text())
        runs[meta["variant"]] = (meta_path.parent, meta, json.loads((meta_path.parent / "metrics.json").read_text()))
    assert set(runs) == {"quic-cubic-iw32", "quic-blitz-1.0x"}, list(out.iterdir())
    assert set(rows) == {v for v, (d, _, _) in runs.items() if d.name not in failed}, rows

    timely = {}                # per variant: its timing figures within tolerance, and what they were
    for variant, (run_dir, meta, metrics) in runs.items():
        short = metrics["short"]
        print(variant, "failed" if run_dir.name in failed else "done",
              json.dumps({k: short[k] for k in ("fct_s", "lost_pkts", "retx_pkts", "wire_sent_datagrams")}),
              "fairness", metrics["fairness_ratio"], "first flights",
              {n: f["first_flight"] for n, f in metrics["flows"].items()})
        if run_dir.name not in failed:
            assert int(rows[variant]["runs"]) == 1
            assert float(rows[variant]["fct_mean_s"]) == pytest.approx(short["fct_s"])
        # Handshake + request/response: two RTTs at least, on any host (lateness only adds).
        assert 2 * RTT_S <= short["fct_s"], short["fct_s"]
        assert short["bytes"] == SIZE and short["complete"]
        assert metrics["fairness_ratio"] is not None and metrics["long"]["bytes"] > SIZE
        # Every check ran, for both flows: congestion control and hint from the endpoints.
        for check in metrics["flow_checks"]:
            assert check["observed_by"] == "endpoint" and check["cc_ok"] and check.get("hint_ok", True), check
        flows = {f["name"]: f for f in meta["flows"]}
        assert flows["long"]["observed_cc"] == ["cubic-iw32"] and flows["long"]["transport"] == "quic"
        # A 70 KB object against a full 50 ms queue ends well within a few seconds; the first
        # flights on the wire are what the servers report, every datagram captured.
        long_flight = metrics["flows"]["long"]["first_flight"]
        # A flight a loss disturbed leaves its window unchecked (flow_checks), and says why:
        # the flight's own disturbance, found on the wire (e.g. Blitzstart's 49-datagram flight
        # into the queue the long flow keeps full: "window reduced by a loss before the response").
        for c in metrics["flow_checks"]:
            if "window_unchecked" in c:
                assert c["window_unchecked"] == metrics["flows"][c["flow"]]["first_flight"]["disturbed"], c
        timely[variant] = [(short["fct_s"] < 3.0, f"FCT {short['fct_s']} s"),
                           (abs(long_flight["segments"] - 32) <= 1, f"long first flight {long_flight['segments']}"),
                           *((("window_unchecked" in c or c["window_ok"]) and c["sent_ok"], f"check {c}")
                             for c in metrics["flow_checks"])]

    base_dir, base_meta, base = runs["quic-cubic-iw32"]
    assert {f["name"]: f["observed_cc"] for f in base_meta["flows"]}["short"] == ["cubic-iw32"]
    short_flight = base["flows"]["short"]["first_flight"]
    timely["quic-cubic-iw32"] += [(abs(short_flight["segments"] - 32) <= 1,
                                   f"short first flight {short_flight['segments']}"),
                                  *((c["iw_ok"], f"check {c}") for c in base["flow_checks"])]
    assert base["short"]["endpoint"]["hint_kbps"] is None

    blitz_dir, blitz_meta, blitz = runs["quic-blitz-1.0x"]
    assert {f["name"]: f["observed_cc"] for f in blitz_meta["flows"]}["short"] == ["blitz"]
    server = blitz["short"]["endpoint"]
    assert server["hint_kbps"] == RATE_BPS / 1e3 and server["hint_tech"] == "dsl" and server["hint_applied"]
    client = json.loads((blitz_dir / "quic-client.json").read_text().strip().splitlines()[-1])
    assert client["hint_kbps"] == server["hint_kbps"]
    # Start window = hint × handshake RTT, rounded up to whole datagrams.
    line = json.loads((blitz_dir / "quic-server-sv1.jsonl").read_text().splitlines()[-1])
    bdp = RATE_BPS / 8 * line["blitz_rtt_ms"] / 1e3
    assert 0 <= server["cwnd_start_bytes"] - bdp < DATAGRAM
    # 70 KB is less than that window: the whole object leaves in the first flight.
    flight = blitz["flows"]["short"]["first_flight"]
    assert server["cwnd_start_bytes"] > SIZE
    timely["quic-blitz-1.0x"].append((abs(flight["segments"] - flight["total_segments"]) <= 1
                                      and flight["segments"] >= math.ceil(SIZE / DATAGRAM),
                                      f"short first flight {flight['segments']} of {flight['total_segments']}"))

    report = report_flagged(out)
    for variant, figures in timely.items():
        run_dir = runs[variant][0]
        off = [what for ok, what in figures if not ok]
        # A failed run's flags are in its own meta.json; report.html lists it only with its error.
        timing_check(f"{variant}: FCT under 3 s, first flights as declared and reported", per_run[run_dir.name],
                     not off, "; ".join(off) or "all within tolerance",
                     shown=None if run_dir.name in failed else report)
