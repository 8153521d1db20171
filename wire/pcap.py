"""Classic pcap files, record by record: the one Python reader of captures (the columnar
extractor, analysis/pcapcols, is the fast path for headers; this reads what it drops:
options, payload bytes, UDP datagrams).

Streams, so a caller that stops early reads only what it used. Either byte order,
micro- or nanosecond timestamps; Ethernet (one VLAN tag allowed) and Linux cooked
captures. IPv4 only, as every startlab path is.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from machine.errors import UserError

# magic → (byte order, seconds per timestamp fraction)
MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
         b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
ETHERNET, LINUX_COOKED = 1, 113
IPV4, VLAN = 0x0800, 0x8100
TCP, UDP = 6, 17


@dataclass(frozen=True)
class Record:
    """One captured frame: its time, its bytes and where its IPv4 header starts (-1: not IPv4)."""
    ts: float
    frame: bytes
    ip: int


def records(path: Path | str) -> Iterator[Record]:
    """Every record of a classic pcap file, in file order."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror}") from None
    with f:
        head = f.read(24)
        if len(head) < 24:
            raise UserError(f"{path}: not a pcap file (too short)")
        if head[:4] not in MAGIC:
            raise UserError(f"{path}: not a classic pcap file")
        order, unit = MAGIC[head[:4]]
        linktype = struct.unpack(order + "I", head[20:24])[0]
        if linktype not in (ETHERNET, LINUX_COOKED):
            raise UserError(f"{path}: link type {linktype} not supported (Ethernet or Linux cooked)")
        header = struct.Struct(order + "IIII")
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, caplen, _ = header.unpack(rec)
            frame = f.read(caplen)
            yield Record(sec + frac * unit, frame, _ipv4_offset(frame, linktype))


def _ipv4_offset(frame: bytes, linktype: int) -> int:
    if linktype == ETHERNET:
        if len(frame) < 14:
            return -1
        ethertype, ip = struct.unpack_from("!H", frame, 12)[0], 14
        if ethertype == VLAN and len(frame) >= 18:
            ethertype, ip = struct.unpack_from("!H", frame, 16)[0], 18
    else:
        if len(frame) < 16:
            return -1
        ethertype, ip = struct.unpack_from("!H", frame, 14)[0], 16
    return ip if ethertype == IPV4 and len(frame) >= ip + 20 else -1


@dataclass(frozen=True)
class TcpPacket:
    """An IPv4 TCP packet as captured, options and (snapped) payload kept."""
    ts: float
    src: int                 # IPv4 address as a big-endian integer (as the columns hold it)
    dst: int
    ttl: int
    ip_header: bytes         # options included
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    win: int
    tcp_options: bytes
    payload_len: int         # from the IP total length (the wire's, not the snap's)
    payload: bytes           # as far as the snap length kept it

    @property
    def ip_options(self) -> bytes:
        return self.ip_header[20:]


def tcp_packets(path: Path | str) -> Iterator[TcpPacket]:
    """The IPv4 TCP packets of a capture."""
    for r in records(path):
        if r.ip < 0 or r.frame[r.ip + 9] != TCP:
            continue
        f, ip = r.frame, r.ip
        ihl = (f[ip] & 0x0F) * 4
        tcp = ip + ihl
        if len(f) < tcp + 20:
            continue
        total = struct.unpack_from("!H", f, ip + 2)[0]
        src, dst = struct.unpack_from("!II", f, ip + 12)
        sport, dport, seq, ack, off_flags, win = struct.unpack_from("!HHIIHH", f, tcp)
        thl = (off_flags >> 12) * 4
        length = max(0, total - ihl - thl)
        yield TcpPacket(r.ts, src, dst, f[ip + 8], bytes(f[ip:tcp]), sport, dport, seq, ack, off_flags & 0xFF, win,
                        bytes(f[tcp + 20:tcp + thl]), length, bytes(f[tcp + thl:tcp + thl + length]))


@dataclass(frozen=True)
class UdpDatagram:
    """An IPv4 UDP datagram as captured: its size and the first payload byte (QUIC's header form)."""
    ts: float
    src: int
    dst: int
    sport: int
    dport: int
    length: int              # UDP payload bytes
    first_byte: int          # 0 when the snap kept none


def udp_datagrams(path: Path | str) -> Iterator[UdpDatagram]:
    """The IPv4 UDP datagrams of a capture."""
    for r in records(path):
        if r.ip < 0 or r.frame[r.ip + 9] != UDP:
            continue
        f, ip = r.frame, r.ip
        udp = ip + (f[ip] & 0x0F) * 4
        if len(f) < udp + 8:
            continue
        src, dst = struct.unpack_from("!II", f, ip + 12)
        sport, dport, ulen = struct.unpack_from("!HHH", f, udp)
        yield UdpDatagram(r.ts, src, dst, sport, dport, ulen - 8, f[udp + 8] if len(f) > udp + 8 else 0)


def dotted(addr: int) -> str:
    """An address as the columns hold it, in dotted quad."""
    return ".".join(str((addr >> s) & 0xFF) for s in (24, 16, 8, 0))
