"""Each third-party QUIC stack on a real path (root): an object fetched through a 50 ms,
20 Mbit/s bottleneck by the stack's own client from its own server, its size checked, the
first flight at the bottleneck's input against the window the stack's sources give
(hosts/stacks: Start), and the server's qlog read and checked (wire/qlog_events): its first
congestion window is the stack's word beside the wire's.

The flight's size is the sender's window, not a time; but where it ends is a time (the
first datagram of the client one RTT after the flight began), so it is claimed and settled
against the host monitor (tests/timing.py). The size fetched and the qlog are asserted.
"""
from __future__ import annotations

import json

import pytest

from hosts.quic.quic_net import SERVER_IP, first_flight, first_rounds, read_udp_pcap, rounds_paced
from hosts.stacks import STACKS
from hosts.stacks.contract import Tls
from hosts.stacks.endpoints import fetch, start_server
from quicpath import quic_path
from wire import qlog_events

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

RATE_BPS, RTT_MS = 20e6, 50.0
SIZE = 1_000_000
PORT = 4433
# A data datagram of any stack here (aioquic's are 1200 bytes, the smallest).
DATA_DATAGRAM = 1200


@pytest.fixture
def path():
    yield from quic_path(rate_bps=RATE_BPS, rtt_ms=RTT_MS)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_a_stack_fetches_an_object_and_its_first_flight_is_its_window(path, name):
    stack = STACKS[name]
    assert stack.unavailable() is None, stack.unavailable()
    cc = stack.default_cc
    work = path.workdir
    tls = Tls.make(work / "tls")
    qlogs = {role: work / f"qlog-{role}" for role in ("server", "client")}
    for d in qlogs.values():
        d.mkdir()
    pcap = work / f"{name}.pcap"
    server = start_server(path.popen, path.server, stack, SERVER_IP, PORT, cc, tls, qlogs["server"], work)
    # A fetch of a second or less fits in one block of tcpdump's ring, which a SIGINT would
    # lose: every packet is handed over as it comes.
    capture = path.start_capture(path.server, path.server_intf, pcap, immediate=True)
    try:
        got = fetch(path.popen, path.client, stack, SERVER_IP, PORT, SIZE, cc, qlogs["client"], work, 60)
    finally:
        path.stop_capture(capture)
        path.stop(server)               # SIGTERM: the server's qlog is complete
    assert got.ok and got.bytes == SIZE, got

    start = stack.start(cc)
    datagrams = read_udp_pcap(pcap)
    flight = first_flight(datagrams, SERVER_IP, DATA_DATAGRAM, RTT_MS / 1e3, RTT_MS / 1e3)
    rounds = first_rounds(datagrams, SERVER_IP, DATA_DATAGRAM, RTT_MS / 1e3)
    for r in rounds:
        print(name, json.dumps(r))
    print(name, stack.version(), json.dumps({k: v for k, v in flight.items() if k not in ("times_ms", "release_ms")}),
          f"window {start.iw_bytes} B in datagrams of {start.datagram_bytes}")

    files = stack.qlog_files(qlogs["server"])
    if not stack.qlog_serialisation:
        assert files == [], f"{name} writes no qlog, yet {files}"
    else:
        assert len(files) == 1, files
        trace = qlog_events.read(files[0])
        print(name, trace.declared, f"{len(trace.events)} events", "cut off" if trace.cut_off else "")
        assert trace.problems == list(stack.qlog_deviations), trace.problems
        assert trace.vantage == "server"
        first_cwnd = trace.cwnds()[0][1]
        assert first_cwnd == start.iw_bytes, f"{name}'s qlog starts at {first_cwnd} B, its sources say {start.iw_bytes}"
    # The window counts every byte in flight, the flight's and what the handshake still has
    # out (acknowledged with the client's Finished, before the request): one datagram either way.
    # Its next rounds paced or not, as its wire showed here (hosts/stacks: rounds_paced).
    path.timing.add(f"{name}'s rounds 2 and 3 are {'' if stack.rounds_paced else 'not '}paced",
                    rounds_paced(rounds, RTT_MS / 1e3) == stack.rounds_paced, json.dumps(rounds[1:]))
    path.timing.add(f"{name}'s first flight is its window of {start.iw_bytes} B",
                    abs(flight["bytes"] - start.iw_bytes) <= start.datagram_bytes,
                    f"{flight['bytes']} B in {flight['datagrams']} datagrams, first ack at {flight['first_ack_ms']} ms")
