"""The QUIC tests' path: client — tbf, delay line — server (hosts/quic/quic_net.py), one
place for its shape and for what it needs on the machine."""
from __future__ import annotations

import json
import shutil
from typing import Iterator, Optional

import pytest

from hosts.quic.quic_net import CLIENT_BIN, DELAYLINE_BIN, SERVER_BIN, Datagram, PathSpec, QuicNet, read_udp_pcap
from timing import Deferred

RATE_BPS = 50e6
RTT_MS = 50.0
LIMIT_BYTES = 208 * 1514


def quic_path(missing: Optional[str] = None, limit_bytes: int = LIMIT_BYTES, rate_bps: float = RATE_BPS,
              rtt_ms: float = RTT_MS) -> Iterator[QuicNet]:
    """Yield a built path (50 Mbit/s, 50 ms unless told); skip, saying what is missing, when
    the binaries or tcpdump are not there, or with `missing`, what else the caller needs and
    lacks; `limit_bytes` is the bottleneck's queue.

    Timing claims a test makes while the path is up (`net.timing.add(...)`) are settled
    after the teardown, against the host monitor's delay flags (tests/timing.py)."""
    unbuilt = [str(b) for b in (SERVER_BIN, CLIENT_BIN, DELAYLINE_BIN) if not b.exists()]
    if unbuilt:
        pytest.skip(f"not built: {', '.join(unbuilt)} (cargo build --release)")
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed")
    if missing:
        pytest.skip(missing)
    claims = Deferred()
    with QuicNet(PathSpec(rate_bps=rate_bps, rtt_ms=rtt_ms, limit_bytes=limit_bytes)) as net:
        net.timing = claims
        yield net
    claims.settle(net.host_flags["delay"])


def fetch_captured(net: QuicNet, name: str, server_args: list[str], client_args: list[str],
                   size: str = "2MB") -> tuple[dict, dict, list[Datagram]]:
    """One fetch through a fresh server, the server's interface captured: the client's
    result, the server's line for the connection, and the captured datagrams."""
    stats = net.workdir / f"{name}.jsonl"
    stats.unlink(missing_ok=True)
    pcap = net.workdir / f"{name}.pcap"
    server = net.start_server(server_args, stats, net.workdir / f"{name}.log")
    capture = net.start_capture(net.server, net.server_intf, pcap)
    try:
        result = net.fetch(size, [*client_args, "--verify"])
    finally:
        net.stop_capture(capture)
        net.stop(server)
    return result, json.loads(stats.read_text().splitlines()[-1]), read_udp_pcap(pcap)
