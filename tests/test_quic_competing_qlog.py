"""Root integration: a competing QUIC run with the servers' qlogs (workload parameter
`qlog`), through the real runner.

blitzstart-table1-gquic.yaml with `qlog: true`, dsl-fast, 70 KB, the baseline, one run:
both servers write a qlog into the run's qlog/ directory, and the run's metrics carry each
sender's trace (analysis/quic_sender.py). What the qlog says must be what the same server
counted: its first window (32 datagrams), and as many packets declared lost as quinn's
counter in the server's line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

DATAGRAM = 1472


def test_competing_run_records_both_senders_from_their_qlogs(tmp_path):
    scenario = yaml.safe_load((ROOT / "scenarios" / "blitzstart-table1-gquic.yaml").read_text())
    scenario["workload"]["qlog"] = True
    path = tmp_path / "gquic-qlog.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(path), "--profiles", "dsl-fast",
                          "--sizes", "70KB", "--variants", "gquic-cubic-iw32", "--reps", "1", "--out", str(out),
                          "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    [run_dir] = [d for d in out.iterdir() if d.is_dir() and (d / "metrics.json").is_file()]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(list((run_dir / "qlog").glob("*.sqlog"))) == 2
    for which, log in (("short", "quic-server-sv1.jsonl"), ("long", "quic-server-sv2.jsonl")):
        line = json.loads((run_dir / log).read_text().splitlines()[-1])
        trace = metrics["flows"][which]["sender"]
        print(which, json.dumps({"exit": trace["exit"], "lost": trace["lost_packets"],
                                 "line_lost": line["lost_packets"], "cwnd_points": len(trace["cwnd"]["t"])}))
        assert trace["cwnd"]["bytes"][0] == 32 * DATAGRAM, trace["cwnd"]["bytes"][:5]
        assert trace["lost_packets"] == line["lost_packets"]
        assert trace["cwnd"]["t"] == sorted(trace["cwnd"]["t"])
        if trace["exit"] is not None:
            assert trace["exit"]["by"] == ("delay" if line["hystart_exit"] else "loss")   # no hint: the baseline
    # The long flow ran for seconds before the short one: its slow start ended long before.
    assert metrics["flows"]["long"]["sender"]["exit"]["t_s"] < 0
