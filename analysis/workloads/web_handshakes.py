"""The web workload's small filtered captures: HTTP request lines and Quick-Start handshakes
per connection.

The columnar extractor keeps headers, not payload or options; the web workload therefore
captures, besides the standard full captures, only the few packets per connection that
carry what the analysis must read (hosts/workloads/web.py, HANDSHAKE_FILTERS):

* at the clients' uplink: every SYN-ACK as it arrived (the Quick-Start Request the
  routers left), every client packet with data (its HTTP request line, with the call's
  user/page/object tag) or with options beyond timestamps (the Quick-Start echo on the
  handshake's ACK);
* before the bottleneck queue: every SYN-ACK as the server sent it (the request, QS TTL
  and nonce the sender remembers).

These files hold a handful of packets per connection (one per HTTP request), so reading
them record by record here costs what parsing httperf's per-call log costs; the full
captures are only ever read as columns. The Quick-Start decoding is wire/quickstart.py's,
the verdict RFC 4782's sender check, as analysis/quickstart.py does for one connection.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from analysis.packets import SYN, synacks
from wire.pcap import TcpPacket as Segment
from wire.pcap import tcp_packets as segments
from wire.quickstart import QsRequest, QsResponse, SentRequest, find_request, find_response, ttl_diff, \
    validate_response

REQUEST_METHODS = (b"GET ", b"HEAD ")


@dataclass(frozen=True)
class Request:
    """An HTTP request line seen on the wire (the first of a segment; pipelined requests
    sharing a segment show only the first)."""
    ts: float
    client: int
    client_port: int
    uri: str


@dataclass
class Handshake:
    """One connection's Quick-Start exchange, keyed by client address, port and the server's ISN."""
    client: int
    client_port: int
    server_isn: int
    sent: Optional[tuple[int, QsRequest]] = None       # (IP TTL, request) of the SYN-ACK as sent
    arrived: Optional[QsRequest] = None                # the request as the client got it
    arrived_ts: float = 0.0
    echo: Optional[QsResponse] = None

    def figures(self) -> dict:
        """requested / approved (RFC 4782's sender check of the echo) / the approved rate."""
        if self.sent is None or self.sent[1] is None:
            return {"requested": False, "approved": False}
        ttl, req = self.sent
        out = {"requested": True, "requested_bps": req.rate_bps, "echoed": self.echo is not None,
               "arrived_bps": self.arrived.rate_bps if self.arrived else None}
        if self.echo is None:
            return {**out, "verdict": "no-echo", "approved": False, "approved_bps": 0}
        verdict = validate_response(SentRequest(req.rate_code, ttl_diff(ttl, req.qs_ttl), req.nonce), self.echo)
        return {**out, "verdict": verdict, "approved": verdict == "approved",
                "approved_bps": self.echo.rate_bps if verdict == "approved" else 0}


def read_client_side(path: Path, server_port: int) -> tuple[list[Request], dict[tuple, Handshake]]:
    """Request lines and the arrived half of each handshake (SYN-ACK and echo) at the clients' uplink."""
    requests: list[Request] = []
    shakes: dict[tuple, Handshake] = {}
    latest: dict[tuple[int, int], Handshake] = {}       # (client, port) → its newest handshake
    for s in segments(path):
        if s.sport == server_port and synacks(s.flags):
            h = shakes.setdefault((s.dst, s.dport, s.seq), Handshake(s.dst, s.dport, s.seq))
            h.arrived, h.arrived_ts = find_request(s.ip_options), s.ts
            latest[(s.dst, s.dport)] = h
        elif s.dport == server_port and not s.flags & SYN:
            h = latest.get((s.src, s.sport))
            if h is not None and h.echo is None and s.ts >= h.arrived_ts:
                h.echo = find_response(s.tcp_options)
            if s.payload.startswith(REQUEST_METHODS):
                line = s.payload.split(b"\r\n", 1)[0].split(b" ")
                if len(line) >= 2:
                    requests.append(Request(s.ts, s.src, s.sport, line[1].decode("latin-1")))
    return requests, shakes


def read_server_side(path: Path, server_port: int, shakes: dict[tuple, Handshake]) -> None:
    """Add to `shakes` the SYN-ACKs as the server sent them (before the routers changed them)."""
    for s in segments(path):
        if s.sport == server_port and synacks(s.flags):
            h = shakes.setdefault((s.dst, s.dport, s.seq), Handshake(s.dst, s.dport, s.seq))
            if h.sent is None:
                h.sent = (s.ttl, find_request(s.ip_options))
