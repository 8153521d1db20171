"""ECN end to end in a campaign: end hosts that ask for it (`ecn: on`), the kernel's CoDel
marking instead of dropping, and the run's figures counting the marks from the wire.

On the virtual clock, in Debian's stock kernel (which has sch_codel; this host's may not):
the queue's own mark counter and the CE-marked packets seen after it are two independent
readings of one thing, as are its drops of a full buffer and the ECN-capable segments lost."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from results.schema import ERROR_FILE, FAILED_SUFFIX

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

SCENARIO = """\
format: 1
name: ecn-codel
description: "CUBIC with ECN behind the kernel's CoDel marking, beside a Reno flow's slow start"
profiles: [dsl-fast]
sizes: [1MB]
workload:
  kind: competing
  fill_window_rtts: 4
  long_variant: reno-iw3
variants: [cubic-iw10]
repetitions: 1
ecn: on
shaper:
  kind: codel
  ecn: true
"""


def test_a_codel_that_marks_is_counted_on_the_wire_and_every_flow_set_up_ecn(tmp_path):
    scenario = tmp_path / "ecn-codel.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(scenario), "--out", str(out), "--json"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=900)
    failed = {d.name: (d / ERROR_FILE).read_text() for d in out.glob(f"*{FAILED_SUFFIX}")}
    assert res.returncode == 0 and not failed, (failed, res.stdout[-2000:], res.stderr[-3000:])
    (meta_path,) = out.glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    metrics = json.loads((meta_path.parent / "metrics.json").read_text())
    # Declared and read back: every end host asked, and both flows' handshakes set it up.
    assert meta["link"]["end_hosts"]["ecn"] == "on", meta["link"]["end_hosts"]
    assert all(f["declared_ecn"] for f in meta["flows"]), meta["flows"]
    checks = {c["flow"]: c for c in metrics["flow_checks"]}
    assert checks["short"]["ecn_ok"] and checks["long"]["ecn_ok"], checks
    assert metrics["flows"]["short"]["ecn"] and metrics["flows"]["long"]["ecn"]
    # The queue marked while the short flow loaded (its own counter, tc -s), and every one of
    # those marks is on the wire after it: the captures span the whole run, the counter the fetch.
    queued = meta["link_use"]["marked_pkts"]
    on_wire = metrics["short"]["ce_pkts"] + metrics["long"]["ce_pkts"]
    print(f"CoDel marks during the fetch {queued}, CE on the wire over the run {on_wire} "
          f"(short {metrics['short']['ce_pkts']}, long {metrics['long']['ce_pkts']}); drops "
          f"{meta['link_use']['dropped_pkts']}, short lost {metrics['short']['lost_pkts']}")
    assert queued > 0 and on_wire >= queued
    # Marked, not dropped: CoDel's control law signals an ECN-capable segment by a mark, so
    # the only ones lost met a full buffer; what the law drops could not carry a mark (Linux
    # sends its retransmissions Not-ECT). Over the whole run, and every loss on the wire is
    # one of the queue's drops. A slow start outruns the law: the long flow is Reno's, with
    # no HyStart to end it early, and doubles its window each RTT, so once it exceeds the
    # path's BDP (about the 208-frame buffer) the buffer fills within two RTTs, before
    # CoDel's first mark (after 100 ms above 5 ms: two RTTs) has come back to it (a third).
    run = meta["queue_run"]
    lost = metrics["short"]["lost_pkts"] + metrics["long"]["lost_pkts"]
    lost_ect = metrics["short"]["lost_ect_pkts"] + metrics["long"]["lost_ect_pkts"]
    print(f"over the run: queue drops {run['dropped_pkts']}, of a full buffer {run['overflowed_pkts']}, marks "
          f"{run['marked_pkts']}; lost on the wire {lost}, of them ECN-capable {lost_ect}")
    assert run["marked_pkts"] >= queued and lost <= run["dropped_pkts"]
    assert run["overflowed_pkts"] > 0 and lost_ect <= run["overflowed_pkts"], run
    # The queue the segments met, read from the captures around it: never longer than the
    # whole buffer takes to drain (208 frames of 1514 bytes at 50 Mbit/s: 50.4 ms; 1 ms more for
    # the captures' own stamping).
    prof = meta["profile_params"]
    drain_ms = prof["buffer_packets_down"] * (prof["mtu"] + 14) * 8 / (prof["down_mbps"] * 1e6) * 1e3
    queue = metrics["queue"]
    print(f"queueing delay while the short flow ran: {queue}")
    assert queue["samples"] > 0 and 0 <= queue["p50_ms"] <= queue["p99_ms"] <= queue["max_ms"] <= drain_ms + 1
    # The report's ECN section from these figures is the report's business, tested on a
    # crafted campaign (tests/test_report.py): drawing its plots in the guest cost this test
    # about a third of its guest CPU (profiled in a guest: the report 13 s of 36 busy).
