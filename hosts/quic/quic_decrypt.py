"""What each QUIC datagram of a capture carried, decrypted by tshark with an endpoint's TLS
key log (`startlab-quic-client --keylog FILE`, or the server's).

Why tshark: QUIC protects everything past its Initial packets, headers included, so
quic_net.read_udp_pcap sees only a datagram's size and first header form. With the
secrets an endpoint logged, tshark removes the header and payload protection and names
each frame; this module turns its JSON into plain records, so that a test can show in
which packet of which datagram the client's request, and the Blitzstart hint in it,
travelled (tests/test_quic_hint_wire.py). Test tooling only: runs log no keys, and the
analysis never decrypts.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

TSHARK = shutil.which("tshark")

# QUIC v1 long-header packet types (RFC 9000, 17.2); short-header packets are "1rtt".
LONG_TYPES = {0: "initial", 1: "0rtt", 2: "handshake", 3: "retry"}
FINISHED = 20                          # TLS handshake message type
STREAM_FRAMES = range(0x08, 0x10)      # STREAM frame types (OFF, LEN, FIN bits)


@dataclass(frozen=True)
class StreamData:
    stream_id: int
    offset: int
    data: bytes
    fin: bool


@dataclass(frozen=True)
class Packet:
    kind: str                           # initial, 0rtt, handshake, retry or 1rtt
    number: Optional[int]               # None when it could not be decrypted
    frame_types: tuple[int, ...]        # empty when it could not be decrypted
    handshake: tuple[int, ...]          # TLS handshake message types in its CRYPTO frames
    streams: tuple[StreamData, ...]

    @property
    def decrypted(self) -> bool:
        return bool(self.frame_types)


@dataclass(frozen=True)
class QuicDatagram:
    number: int                         # frame number in the capture, from 1
    ts: float                           # capture time, Unix seconds
    src: str
    sport: int
    dst: str
    dport: int
    packets: tuple[Packet, ...]         # coalesced packets, in datagram order

    def has_finished(self) -> bool:
        return any(FINISHED in p.handshake for p in self.packets)

    def streams(self) -> list[StreamData]:
        return [s for p in self.packets for s in p.streams]


def decrypt(pcap: Path, keylog: Path) -> list[QuicDatagram]:
    """The capture's QUIC datagrams, decrypted with the secrets in `keylog`."""
    if TSHARK is None:
        raise RuntimeError("tshark is not installed")
    p = subprocess.run([TSHARK, "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}",
                        "-Y", "quic", "-T", "json", "--no-duplicate-keys", "-J", "frame ip udp quic"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tshark on {pcap}: exit {p.returncode}: {p.stderr.strip()}")
    return parse_tshark_json(json.loads(p.stdout or "[]"))


def as_list(value: Any) -> list:
    """tshark's JSON gives one occurrence as a value and several as a list."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def hex_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def parse_tshark_json(doc: list[dict]) -> list[QuicDatagram]:
    """Datagrams from `tshark -T json --no-duplicate-keys -J "frame ip udp quic"`."""
    out = []
    for entry in doc:
        layers = entry["_source"]["layers"]
        frame, ip, udp = layers["frame"], layers["ip"], layers["udp"]
        out.append(QuicDatagram(
            number=int(frame["frame.number"]), ts=float(frame["frame.time_epoch"]),
            src=ip["ip.src"], sport=int(udp["udp.srcport"]),
            dst=ip["ip.dst"], dport=int(udp["udp.dstport"]),
            packets=tuple(parse_packet(q) for q in as_list(layers.get("quic")))))
    return out


def parse_packet(q: dict) -> Packet:
    # A short header's fields sit in their own subtree, a long header's in the packet's.
    header = q.get("quic.short", q)
    if header.get("quic.header_form") == "1":
        kind = LONG_TYPES.get(int(header["quic.long.packet_type"]), "unknown")
    else:
        kind = "1rtt"
    frames = as_list(q.get("quic.frame"))
    number = header.get("quic.packet_number")
    return Packet(
        kind=kind,
        number=int(number) if number is not None and frames else None,
        frame_types=tuple(int(f["quic.frame_type"]) for f in frames),
        handshake=tuple(int(h["tls.handshake.type"])
                        for f in frames for tls in as_list(f.get("tls"))
                        for h in as_list(tls.get("tls.handshake")) if "tls.handshake.type" in h),
        streams=tuple(parse_stream(f) for f in frames if int(f["quic.frame_type"]) in STREAM_FRAMES))


def parse_stream(f: dict) -> StreamData:
    # Without the OFF bit the frame carries no offset field: its data starts at 0.
    data = f.get("quic.stream_data", "")
    return StreamData(stream_id=int(f["quic.stream.stream_id"]),
                      offset=int(f.get("quic.stream.offset", 0)),
                      data=hex_bytes(data) if data else b"",
                      fin=bool(int(f["quic.frame_type"]) & 0x01))
