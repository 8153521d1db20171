"""Root integration: every third-party QUIC stack on Blitzstart's Table 1 workload through the
real runner (scenarios/quic-stacks.yaml, one repetition each: the stack's own client
fetches 2 MB from its own server at dsl-fast while a kernel TCP CUBIC flow fills the
bottleneck).

Checked per run: the object arrived whole, the stack and version the run records are the
variant's and the pinned ones; the short flow was observed as a stack's (the controller its
server was started with) and its first flight checked against its server qlog's first
window (s2n-quic, which writes none, against its sources'); its qlog said when it left slow
start; the long flow was the kernel's CUBIC; and the report has the stacks' table. A run
the host disturbed may fail its first-flight check only where the monitor flagged it
(tests/timing.finished_runs), as every real-clock campaign test here.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from hosts.stacks import STACKS
from results.schema import FAILED_SUFFIX
from timing import finished_runs

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

VARIANTS = {"aioquic-reno": "aioquic", "cfquiche-cubic": "cfquiche", "ngtcp2-cubic": "ngtcp2",
            "quicgo-reno": "quicgo", "s2n-cubic": "s2n"}


def test_every_stack_races_a_tcp_flow_on_the_table1_workload(tmp_path):
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(ROOT / "scenarios" / "quic-stacks.yaml"),
                          "--reps", "1", "--out", str(out), "--json", "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=900)
    per_run, runs = finished_runs(out, res)
    failed = [d.name for d in out.glob(f"*{FAILED_SUFFIX}")]
    assert len(runs) + len(failed) == len(VARIANTS), ([d.name for d, _, _ in runs], failed)
    for run_dir, meta, metrics in runs:
        name = VARIANTS[meta["variant"]]
        short = metrics["short"]
        assert short["bytes"] == 2_000_000 and short["complete"], (run_dir.name, short)
        # Debian's package version carries its revision (0.12.1+dfsg-1+deb12u1).
        assert short["stack"]["stack"] == name and short["stack"]["version"].split("+")[0] == STACKS[name].pin(), \
            short["stack"]
        checks = {c["flow"]: c for c in metrics["flow_checks"]}
        assert checks["short"]["observed_by"] == "stack" and checks["short"]["cc_ok"], checks["short"]
        block = metrics["flows"]["short"]
        assert block["window_from"] == ("sources" if name == "s2n" else "qlog"), block
        if not per_run.get(run_dir.name):
            assert checks["short"]["window_ok"], (run_dir.name, checks["short"], block)
        # Against a flow already filling the link every stack leaves slow start within the
        # fetch; the four that write a qlog say when.
        assert (short["ss_exit_qlog_s"] is None) == (name == "s2n"), (run_dir.name, short)
        if name != "s2n":
            assert 0 < short["ss_exit_qlog_s"] < short["fct_s"], (run_dir.name, short)
        assert checks["long"]["observed_by"] == "kernel" and checks["long"]["observed_cc"] == ["cubic"], checks["long"]
        assert metrics["fairness_ratio"] and metrics["long"]["mbps_before"] > 0, metrics["long"]
        print(run_dir.name, f"fct {short['fct_s']:.3f} s", f"first flight {block['first_flight']['datagrams']}",
              f"exit {short['ss_exit_qlog_s']}", f"first loss {short['first_loss_s']}", f"lost {short['lost_pkts']}",
              "flagged" if per_run.get(run_dir.name) else "")
    report = (out / "report.md").read_text()
    table = report.split("## QUIC stacks", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {v} |" in table for v, _ in zip(VARIANTS, runs)) or len(runs) < len(VARIANTS), table
