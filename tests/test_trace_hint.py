"""Root integration: Blitzstart's hint on a trace link, through the real runner.

trace-table1.yaml on wifi-onoff (a trace that idles for 20 ms after 80 ms on average),
the oracle's hint, 70 KB, one run: the hint the client's SYN carries on the wire is the
one the run records, and it is what the trace offers in the RTT after the handshake,
recomputed here from the trace file and the moment the run says it read it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from links import traces
from links.profiles import get_profile
from wiretrace import SYN, read_pcap
from wire.blitzstart import decode_option, hint_kbps

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]


def test_the_oracles_hint_is_what_the_trace_offers_next_and_is_on_the_wire(tmp_path):
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(ROOT / "scenarios" / "trace-table1.yaml"),
                          "--profiles", "wifi-onoff", "--sizes", "70KB", "--variants", "blitz-oracle",
                          "--reps", "1", "--out", str(out), "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    [run_dir] = [d for d in out.iterdir() if d.is_dir() and (d / "meta.json").is_file()]
    meta = json.loads((run_dir / "meta.json").read_text())
    [(node, got)] = meta["before_fetch"].items()
    assert node.endswith("cl1") and got["basis"] == "oracle", got
    prof = get_profile("wifi-onoff")
    trace = traces.read(prof.trace_path("down"))
    start = got["at_trace_ms"] + prof.rtt_ms
    offered = traces.offered_bytes(trace, start, start + prof.rtt_ms, prof.frame_bytes) * 8 / prof.rtt_s
    assert got["basis_bps"] == pytest.approx(offered)
    assert got["hint_kbps"] == hint_kbps(max(offered, 1000.0), 1.0)
    # The short flow's SYN (client → server, port 80) carries that hint.
    syns = [p for p in read_pcap(run_dir / "cap-client.pcap")
            if p.flags & SYN and not p.flags & 0x10 and p.dport == meta["spec"]["short"]["server_port"]]
    assert syns, "no SYN of the short flow in the capture"
    assert {decode_option(p.tcp_options)[0] for p in syns} == {got["hint_kbps"]}
    # The long flow filled the link against what the trace offered, and the run says how much it used.
    assert meta["timings"]["fill_s"] > 0 and meta["link_use"]["utilisation"] > 0
