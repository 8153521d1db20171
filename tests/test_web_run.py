"""A small web run through run.py (root): two users for 10 s in each HTTP mode, over a
Quick-Start variant, checked from the captures and httperf's logs. The seed schedules three
pages a mode, two of them of three objects, so pipelining has a page to show itself on.

Every page httperf logged was served (its requests are on the wire and the server sent at
least the bytes httperf received) and counted (it is among the run's pages with a
download time); each mode's connection pattern holds on the wire: one SYN per object
over HTTP/1.0 and one per user over HTTP/1.1, never two requests of a connection
unanswered except with pipelining, where a page's embedded objects are all requested
before their replies come back.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.packets import load
from conftest import ROOT
from timing import campaign_flags, report_flagged, timing_check, union
from wire.httperf_log import parse_files

SCENARIO = """
name: web-test
profiles: [scharf-200ms]
workload:
  kind: web
  model: surge-default
  mode: [http10, http11, http11-pipelined]
  users: 2
  clients: 2
  duration_s: 10
  seed: 3
  max_file_bytes: 500000
variants: [qs-reno]
repetitions: 1
"""


def httperf_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "httperf":
                found.append(entry.name)
        except OSError:
            continue
    return found


def requests_unanswered_in_a_row(pk, conns: np.ndarray) -> int:
    """Most client requests on one connection sent one after another with no server data
    between them (from the capture alone): 1 for one request at a time."""
    most = 0
    for c in conns:
        m = (pk["conn"] == c) & (pk["payload"] > 0) & (pk["retx"] == 0)
        dirs = pk["dir"][m]
        run = best = 0
        for d in dirs:
            run = run + 1 if d == 0 else 0
            best = max(best, run)
        most = max(most, best)
    return most


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_web_run_end_to_end(tmp_path):
    path = tmp_path / "web.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(path), "--out", str(out), "--json",
                          "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not httperf_processes()
    rows = list(csv.DictReader(open(out / "summary.csv")))
    # One row for the cell (all pages), one per model and mode that ran: all download times.
    [row] = [r for r in rows if not r["model"]]
    assert row["variant"] == "qs-reno" and row["figure"] == "download" and int(row["samples"]) > 0
    per_mode = [r for r in rows if r["model"]]
    assert per_mode and all(r["figure"] == "download" and r["mode"] for r in per_mode)
    assert sum(int(r["samples"]) for r in per_mode) == int(row["samples"])
    # The summary counts the runs the emulator flagged (whatever the host); on a qualified
    # host there are none, on an unfit one the reasons are in the report's flagged section.
    per_run, _ = campaign_flags(out)
    assert row["emulator_flagged_runs"] == str(sum(1 for f in per_run.values() if f)), (row, per_run)
    timing_check("the web run not flagged by the emulator", union(per_run.values()),
                 row["emulator_flagged_runs"] == "0", f"emulator_flagged_runs {row['emulator_flagged_runs']}",
                 shown=report_flagged(out))
    [run] = [p for p in out.iterdir() if (p / "metrics.json").exists()]
    meta = json.loads((run / "meta.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert all(c["cc_ok"] for c in metrics["flow_checks"])
    client = load(run / "cap-client.pcap")
    pk, conns = client.packets, client.conns
    for combo in meta["spec"]["combos"]:
        mode, got = combo["mode"], metrics["combos"][combo["key"]]
        window = (pk["ts"] >= combo["t_start"]) & (pk["ts"] <= combo["t_end"])
        # Every page httperf logged was served and counted.
        reports = [parse_files(run / h["log"], run / h["err"]) for h in combo["hosts"]]
        logged = {(pl.user, pl.page) for rep in reports for pl in rep.page_loads() if pl.complete}
        assert logged and len(logged) == combo["pages_scheduled"]
        assert logged == set(zip(got["page_user"], got["page_index"]))
        assert all(t > meta["spec"]["rtt_s"] for t in got["download_s"])
        calls = [c for rep in reports for c in rep.calls.values()]
        requests = window & (pk["dport"] == 80) & (pk["payload"] > 0) & (pk["retx"] == 0)
        assert int(requests.sum()) == len(calls)
        in_window = np.flatnonzero((conns["dport"] == 80) & (conns["syn_ts"] >= combo["t_start"])
                                   & (conns["syn_ts"] <= combo["t_end"]))
        assert conns["unique_bytes"][in_window, 1].sum() >= sum(c.header_bytes + c.content_bytes for c in calls)
        # The mode's connection pattern on the wire.
        syns = len(in_window)
        if mode == "http10":
            assert syns == len(calls) and got["syns_per_object"] == 1.0
        else:
            assert syns == meta["spec"]["users"] and got["connections"] == syns
        in_a_row = requests_unanswered_in_a_row(pk, in_window)
        pages_with_two_embedded = any(o >= 3 for o in got["page_objects"])
        if mode == "http11-pipelined":
            assert pages_with_two_embedded and in_a_row >= 2 and got["in_flight_max"] >= 2
        else:
            assert in_a_row == 1 and got["in_flight_max"] == 1
        # Quick-Start: every connection asked; the routers approved some.
        assert got["qs_requested"] == got["connections"] and 1 <= got["qs_approved"] <= got["qs_requested"]
    assert "Object download time per model and HTTP mode" in (out / "report.html").read_text()
