"""Root integration: no connection of a run reaches the next run on the same network.

A server killed at the end of a run leaves its socket as an orphan while data is still
queued (here against a receiver that never reads: FIN_WAIT1 with zero-window probes, kept
for minutes); on a lossy path it retransmits at cwnd 1 as long. The next run on the network
would carry its packets and see its socket, with the earlier run's congestion control. The
session destroys its end hosts' TCP sockets when it ends (Network.close_sockets).
"""
from __future__ import annotations

import sys
import time

import pytest

from hosts.process import NodeProcess
from hosts.session import RunSession
from hosts.variants import get_variant
from links.profiles import LinkProfile
from topologies.network import Network

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

PORT = 9000

SENDER = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen(1); print("listening", flush=True)
c, _ = s.accept()
while True:
    c.sendall(b"x" * 65536)
"""

NON_READER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], {port})); print("connected", flush=True)
time.sleep(120)
""".format(port=PORT)


def sockets(node) -> list[str]:
    """The node's TCP sockets on the test's port, any state but TIME-WAIT (not a full socket:
    it sends nothing but a last ACK)."""
    out = node.cmd(f"ss -tanH '( sport = :{PORT} or dport = :{PORT} )'")
    return [line for line in out.splitlines() if line.strip() and not line.startswith("TIME-WAIT")]


def wait_for(what, predicate, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_run_leaves_no_connection_to_the_next(tmp_path):
    prof = LinkProfile(name="sockets-test", down_mbps=10, up_mbps=10, rtt_ms=20, buffer_pkts=100)
    with Network(prof, tmp_path / "net") as net:
        n = net.names
        sv, cl = net.host(n.server(1)), net.host(n.client(1))
        work = tmp_path / "run"
        work.mkdir()
        reader = None
        try:
            with RunSession(net, get_variant("cubic-iw10"), work, tmp_path / "scratch", get_variant) as s:
                s.install_under_test(server=[sv], client=[cl])
                sender = s.spawn(sv, [sys.executable, "-c", SENDER], "sender", "sender.log")
                wait_for("the sender listens", lambda: "listening" in sender.output())
                # The receiver outlives the run, as a stuck peer would: not the session's.
                reader = NodeProcess(cl, [sys.executable, "-c", NON_READER, n.server_ip(1)], s.instance,
                                     "non-reader", log_path=work / "reader.log")
                wait_for("the receiver connects", lambda: "connected" in reader.output())
                # The receiver's window fills and the sender's data waits in its socket.
                wait_for("data queued at the sender",
                         lambda: any(line.split()[2] != "0" for line in sockets(sv) if line.startswith("ESTAB")))
            # The sender was killed at the session's end with data queued: without the
            # session's close its socket would stay (FIN-WAIT-1, probing the zero window).
            assert sockets(sv) == [], sockets(sv)
            assert sockets(cl) == [], sockets(cl)
            assert reader.running(), "the receiver was not the session's to stop"
        finally:
            if reader is not None:
                reader.stop()
