"""TCP segments with their options and payload, read record by record from a classic pcap.

The columnar extractor (analysis/pcapcols) keeps headers only. What it drops — IP and TCP
options (Quick-Start requests and echoes), the first payload bytes (HTTP request lines) —
is read here, from small filtered captures or from the first records of a full one: the
reader streams, so a caller that stops early reads only what it used.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from machine.errors import UserError

LITTLE = (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
BIG = (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
NANO = (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


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
        f = open(path, "rb")
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror}") from None
    with f:
        head = f.read(24)
        if len(head) < 24:
            raise UserError(f"{path}: not a pcap file (too short)")
        if head[:4] not in LITTLE + BIG:
            raise UserError(f"{path}: not a classic pcap file")
        header = struct.Struct(("<" if head[:4] in LITTLE else ">") + "IIII")
        scale = 1e-9 if head[:4] in NANO else 1e-6
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, caplen, _ = header.unpack(rec)
            frame = f.read(caplen)
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
            yield Segment(sec + frac * scale, src, dst, sport, dport, seq, tcp[13], frame[22],
                          bytes(frame[34:14 + ihl]), bytes(tcp[20:thl]), bytes(tcp[thl:thl + payload_len]))
