"""Synthetic packet captures with known answers, for the analysis tests and benchmark.

Writes classic pcap files of Ethernet/IPv4/TCP (and UDP) frames whose IP total length
counts the full payload while only the first `snaplen` bytes are stored — exactly what
tcpdump -s 128 produces on a link with offloads off. `DumbbellCaptures` places
packets at the three capture points of a run (client, before and after the
bottleneck queue), so a test chooses which segments the queue drops and knows
every figure the analysis should report.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Iterable

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
ECE, CWR = 0x40, 0x80
ECT0, CE = 0x02, 0x03
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
MSS = 1448  # Linux MSS with timestamps on a 1500-byte MTU


@dataclass(frozen=True)
class Packet:
    """One TCP packet; `payload` is its length (contents never matter here)."""

    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int = 0
    flags: int = ACK
    payload: int = 0
    ipid: int = 0
    win: int = 65535
    tos: int = 0                  # DSCP and ECN: 2 = ECT(0), 3 = CE
    ip_options: bytes = b""       # IPv4 options (Quick-Start's), padded with end-of-list


@dataclass(frozen=True)
class Datagram:
    """One UDP datagram of `length` payload bytes, starting with `data` (zeros after it).

    ttl, ipid and tos are what a router may rewrite; a QUIC-like `data` (header byte,
    connection ID, packet number) makes the first payload bytes unique per datagram.
    """

    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    length: int
    data: bytes = b""
    ipid: int = 0
    ttl: int = 64
    tos: int = 0


@functools.lru_cache(maxsize=None)
def _ip(addr: str) -> bytes:
    return ipaddress.IPv4Address(addr).packed


def ipv4_tcp(p: Packet) -> bytes:
    """IPv4 (20 bytes and its options) + TCP headers (32 bytes, the timestamps option as on
    Linux) plus payload."""
    tcp_opts = b"\x01\x01\x08\x0a" + struct.pack("!II", 1, 2)
    tcp = struct.pack(
        "!HHIIBBHHH",
        p.sport,
        p.dport,
        p.seq & 0xFFFFFFFF,
        p.ack & 0xFFFFFFFF,
        (20 + len(tcp_opts)) // 4 << 4,
        p.flags,
        p.win,
        0,
        0,
    ) + tcp_opts
    options = p.ip_options + bytes(-len(p.ip_options) % 4)
    total = 20 + len(options) + len(tcp) + p.payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | (5 + len(options) // 4), p.tos, total, p.ipid & 0xFFFF, 0x4000, 64, 6,
                     0, _ip(p.src), _ip(p.dst))
    return ip + options + tcp + bytes(p.payload)


def ipv4_udp(d: Datagram) -> bytes:
    """IPv4 + UDP headers plus payload, with checksums that change with TTL and IP ID as real ones do."""
    payload = d.data[: d.length] + bytes(max(0, d.length - len(d.data)))
    udp = struct.pack("!HHHH", d.sport, d.dport, 8 + d.length, (d.ipid * 31 + 7) & 0xFFFF) + payload
    check = (d.ttl * 257 + d.ipid + d.tos) & 0xFFFF
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, d.tos, 28 + d.length, d.ipid & 0xFFFF, 0x4000, d.ttl, 17, check,
                     _ip(d.src), _ip(d.dst))
    return ip + udp


def frame(p: Packet | Datagram, linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """The whole frame on the wire (before snapping)."""
    if linktype == LINKTYPE_ETHERNET:
        head = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    elif linktype == LINKTYPE_LINUX_SLL:
        head = struct.pack("!HHH8sH", 0, 1, 6, b"\x02\x00\x00\x00\x00\x01\x00\x00", 0x0800)
    else:
        raise ValueError(f"pcapcraft cannot frame link type {linktype}")
    return head + (ipv4_udp(p) if isinstance(p, Datagram) else ipv4_tcp(p))


class PcapWriter:
    """Streams records into a classic pcap file (little endian, µs or ns timestamps)."""

    def __init__(
        self,
        out: BinaryIO,
        linktype: int = LINKTYPE_ETHERNET,
        snaplen: int = 128,
        nanosecond: bool = False,
        big_endian: bool = False,
    ) -> None:
        self.out = out
        self.linktype = linktype
        self.snaplen = snaplen
        self.scale = 1_000_000_000 if nanosecond else 1_000_000
        self.order = ">" if big_endian else "<"
        magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
        out.write(struct.pack(self.order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def record(self, ts: float, data: bytes, orig_len: int | None = None) -> None:
        """Writes raw captured bytes (snapped to snaplen)."""
        sec, frac = divmod(round(ts * self.scale), self.scale)
        cap = data[: self.snaplen]
        wire = len(data) if orig_len is None else orig_len
        self.out.write(struct.pack(self.order + "IIII", sec, frac, len(cap), wire) + cap)

    def packet(self, p: Packet | Datagram) -> None:
        self.record(p.ts, frame(p, self.linktype))


def write_pcap(path: Path, packets: Iterable[Packet | Datagram], **options: object) -> None:
    """Writes packets in time order (a capture is always time ordered)."""
    with open(path, "wb") as f:
        w = PcapWriter(f, **options)  # type: ignore[arg-type]
        for p in sorted(packets, key=lambda q: q.ts):
            w.packet(p)


@dataclass
class Conversation:
    """Builds the packets of one TCP connection with consistent sequence numbers.

    Offsets are counted in payload bytes from the start of each side's data, so a
    test speaks of "bytes 0..1447 of the response" instead of raw sequence numbers.
    """

    client: str
    cport: int
    server: str
    sport: int
    client_isn: int = 1000
    server_isn: int = 5000

    def syn(self, ts: float, ecn: bool = False) -> Packet:
        """`ecn`: an ECN-setup SYN (ECE and CWR, RFC 3168 §6.1.1)."""
        return Packet(ts, self.client, self.server, self.cport, self.sport, self.client_isn, 0,
                      SYN | (ECE | CWR if ecn else 0))

    def synack(self, ts: float, ecn: bool = False) -> Packet:
        """`ecn`: an ECN-setup SYN-ACK (ECE without CWR)."""
        return Packet(ts, self.server, self.client, self.sport, self.cport, self.server_isn,
                      self.client_isn + 1, SYN | ACK | (ECE if ecn else 0))

    def from_client(self, ts: float, offset: int, length: int, ipid: int = 0, flags: int = ACK,
                    acked: int = 0) -> Packet:
        """Client data (or a pure ACK with length 0) acknowledging `acked` response bytes."""
        return Packet(ts, self.client, self.server, self.cport, self.sport,
                      (self.client_isn + 1 + offset) & 0xFFFFFFFF, (self.server_isn + 1 + acked) & 0xFFFFFFFF,
                      flags, length, ipid)

    def from_server(self, ts: float, offset: int, length: int, ipid: int = 0, flags: int = ACK,
                    tos: int = 0) -> Packet:
        return Packet(ts, self.server, self.client, self.sport, self.cport,
                      (self.server_isn + 1 + offset) & 0xFFFFFFFF, self.client_isn + 1, flags, length, ipid,
                      tos=tos)


@dataclass
class DumbbellCaptures:
    """Places packets at a run's three capture points.

    Downstream packets are given at their time at the bottleneck input (cap-bneck-in);
    unless dropped by the queue they leave it `queue_s` later (cap-bneck-out) and
    reach the client `down_s` after that (cap-client). Upstream packets are given at
    their time at the client and reach both router taps `up_s` later.
    """

    queue_s: float = 0.001
    down_s: float = 0.010
    up_s: float = 0.010

    def __post_init__(self) -> None:
        self.client: list[Packet] = []
        self.bneck_in: list[Packet] = []
        self.bneck_out: list[Packet] = []

    def downstream(self, p: Packet, dropped: bool = False, marked: bool = False, waits_s: float = 0.0) -> None:
        """`marked`: the queue sets Congestion Experienced on it (an AQM with ECN); `waits_s`:
        it queues this much longer than the fixed queue_s (a standing queue)."""
        self.bneck_in.append(p)
        if not dropped:
            out = replace(p, ts=p.ts + self.queue_s + waits_s, tos=(p.tos | CE) if marked else p.tos)
            self.bneck_out.append(out)
            self.client.append(replace(out, ts=out.ts + self.down_s))

    def upstream(self, p: Packet) -> None:
        self.client.append(p)
        self.bneck_out.append(replace(p, ts=p.ts + self.up_s))
        self.bneck_in.append(replace(p, ts=p.ts + self.up_s + 0.000001))

    def client_time(self, bneck_in_ts: float) -> float:
        """When a downstream packet entering the queue at `bneck_in_ts` reaches the client."""
        return bneck_in_ts + self.queue_s + self.down_s

    def write(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_pcap(run_dir / "cap-client.pcap", self.client)
        write_pcap(run_dir / "cap-bneck-in.pcap", self.bneck_in)
        write_pcap(run_dir / "cap-bneck-out.pcap", self.bneck_out)
