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

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from machine.errors import UserError
from wire.quickstart import QsRequest, QsResponse, SentRequest, find_request, find_response, ttl_diff, \
    validate_response

SYN, ACK = 0x02, 0x10
REQUEST_METHODS = (b"GET ", b"HEAD ")


@dataclass(frozen=True)
class Segment:
    """What the analysis reads of one captured IPv4 TCP packet."""
    ts: float
    src: int                 # IPv4 address as a big-endian integer (as the columns hold it)
    dst: int
    sport: int
    dport: int
    seq: int
    flags: int
    ttl: int
    ip_options: bytes
    tcp_options: bytes
    payload: bytes           # as far as the snap length kept it


def segments(path: Path) -> Iterator[Segment]:
    """The IPv4 TCP packets of a classic pcap (Ethernet, either byte order, µs or ns)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror}") from None
    if len(data) < 24:
        raise UserError(f"{path}: not a pcap file (too short)")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise UserError(f"{path}: not a classic pcap file")
    scale = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    header = struct.Struct(endian + "IIII")
    off = 24
    while off + 16 <= len(data):
        sec, frac, caplen, _ = header.unpack_from(data, off)
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 0x0F) * 4
        tcp = frame[14 + ihl:]
        if len(tcp) < 20:
            continue
        total = struct.unpack_from("!H", frame, 16)[0]
        thl = (tcp[12] >> 4) * 4
        src, dst = struct.unpack_from("!II", frame, 26)
        sport, dport, seq = struct.unpack_from("!HHI", tcp)
        payload_len = max(0, total - ihl - thl)
        yield Segment(sec + frac * scale, src, dst, sport, dport, seq, tcp[13], frame[22], bytes(frame[34:14 + ihl]),
                      bytes(tcp[20:thl]), bytes(tcp[thl:thl + payload_len]))


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
        if s.sport == server_port and s.flags & (SYN | ACK) == SYN | ACK:
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
        if s.sport == server_port and s.flags & (SYN | ACK) == SYN | ACK:
            h = shakes.setdefault((s.dst, s.dport, s.seq), Handshake(s.dst, s.dport, s.seq))
            if h.sent is None:
                h.sent = (s.ttl, find_request(s.ip_options))
