"""Packet captures as columnar arrays.

The per-packet work (parsing, connection tracking, retransmission detection, UDP
datagram hashing) is done by the native extractor `startlab-pcapcols`, which writes
one .npy file per column; this module runs it, caches its output next to the
capture and loads the arrays. It is the only Python code that knows the on-disk
column format.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from machine.errors import UserError

FORMAT_VERSION = 2
REPO = Path(__file__).resolve().parent.parent
EXTRACTOR = REPO / "target" / "release" / "startlab-pcapcols"

PACKET_COLUMNS = (
    "ts", "src", "dst", "sport", "dport", "seq", "ack", "flags", "win",
    "payload", "ipid", "conn", "dir", "retx", "newbytes", "tos",
)
# Per-datagram columns of the UDP table, stored as udp_<name>.npy.
DATAGRAM_COLUMNS = ("ts", "src", "dst", "sport", "dport", "ulen", "tos", "qlong", "hash")
# Per-connection columns; "_0"/"_1" are the directions (0 = from the initiator).
CONN_COLUMNS = ("src", "dst", "sport", "dport", "first_ts", "last_ts", "syn_ts")
CONN_DIR_COLUMNS = ("pkts", "data_pkts", "total_bytes", "unique_bytes", "retx_pkts")

FIN, SYN, RST, PSH, ACK, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x40, 0x80
SYN_ACK = SYN | ACK


def syns(flags):
    """Which packets (a flags column, or one packet's flags) open a connection: SYN without ACK."""
    return (flags & SYN_ACK) == SYN


def synacks(flags):
    """Which packets answer the opening: SYN with ACK."""
    return (flags & SYN_ACK) == SYN_ACK


@dataclass(frozen=True)
class Packets:
    """Per-packet arrays of every IPv4 TCP packet of a capture, in capture order.

    Columns: ts (s), src, dst, sport, dport, seq, ack, flags, win, payload (TCP
    payload length from the IP header), ipid, conn (index into Connections), dir
    (0 = sent by the connection's initiator), retx (1 = data segment covering bytes
    already sent in that direction), newbytes (payload bytes seen for the first time)
    and tos (the IP TOS byte: DSCP and ECN).
    """

    columns: dict[str, np.ndarray]
    meta: dict

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __len__(self) -> int:
        return len(self.columns["ts"])


@dataclass(frozen=True)
class Datagrams:
    """Per-datagram arrays of every IPv4 UDP datagram of a capture, in capture order.

    Columns: ts (s), src, dst, sport, dport, ulen (the UDP length field, header
    included: the true size even under a short snap length), tos (IP TOS byte), qlong
    (1 = QUIC long header: bit 0x80 of the first payload byte) and hash (uint64 over
    addresses, ports, UDP length and the first 32 payload bytes). The hash leaves out
    what a router rewrites (TTL, IP ID, ECN, checksums), so the same datagram has the
    same hash at every capture point, and QUIC's packet number makes it unique.
    """

    columns: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["ts"])


@dataclass(frozen=True)
class Connections:
    """One row per TCP connection (direction-independent 4-tuple).

    src/sport is the initiator, dst/dport the responder. Per-direction columns are
    2-column arrays indexed [conn, dir]: pkts, data_pkts, total_bytes (payload incl.
    retransmissions), unique_bytes, retx_pkts. syn_ts is NaN when the SYN was not captured.
    """

    columns: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["src"])


@dataclass(frozen=True)
class Capture:
    path: Path
    packets: Packets
    conns: Connections
    datagrams: Datagrams


def cache_dir(pcap: Path) -> Path:
    """Where a capture's columns live: cap-client.pcap -> cap-client.cols/."""
    return pcap.with_suffix(".cols")


def _cache_is_fresh(pcap: Path, cols: Path, extractor: Path) -> bool:
    """Fresh = newer than both the capture and the extractor (a fixed extractor
    re-extracts), and written in the format this module reads."""
    meta = cols / "meta.json"
    if not meta.is_file() or meta.stat().st_mtime < pcap.stat().st_mtime:
        return False
    if extractor.is_file() and meta.stat().st_mtime < extractor.stat().st_mtime:
        return False
    try:
        return json.loads(meta.read_text()).get("format_version") == FORMAT_VERSION
    except (OSError, ValueError):
        return False


def extract(pcap: Path, extractor: Path = EXTRACTOR) -> Path:
    """Runs the extractor unless its cached output is still fresh.

    Writes into a temporary directory renamed into place, so an interrupted run or
    a concurrent analysis never leaves a half-written cache that looks complete.
    """
    pcap = Path(pcap)
    if not pcap.is_file():
        raise UserError(f"capture not found: {pcap}")
    cols = cache_dir(pcap)
    if _cache_is_fresh(pcap, cols, extractor):
        return cols
    if not extractor.is_file():
        raise UserError(
            f"pcap extractor not built: {extractor} is missing; run "
            "`cargo build --release -p startlab-pcapcols` in the repository"
        )
    tmp = cols.with_name(f"{cols.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run([str(extractor), str(pcap), str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        msg = proc.stderr.strip().splitlines()
        raise UserError(msg[-1] if msg else f"startlab-pcapcols failed on {pcap} (exit {proc.returncode})")
    shutil.rmtree(cols, ignore_errors=True)
    os.replace(tmp, cols)
    return cols


def load(pcap: Path) -> Capture:
    """The TCP packets, TCP connections and UDP datagrams of a capture (extracting it if needed)."""
    cols = extract(Path(pcap))
    meta = json.loads((cols / "meta.json").read_text())
    # Memory-mapped and read-only: a metric touches a few columns, and only those
    # pages are ever read from disk.
    packets = {name: np.load(cols / f"{name}.npy", mmap_mode="r") for name in PACKET_COLUMNS}
    conns = {name: np.load(cols / f"conns_{name}.npy") for name in CONN_COLUMNS}
    for name in CONN_DIR_COLUMNS:
        conns[name] = np.stack(
            [np.load(cols / f"conns_{name}_{d}.npy") for d in (0, 1)], axis=1
        ).reshape(-1, 2)
    datagrams = {name: np.load(cols / f"udp_{name}.npy", mmap_mode="r") for name in DATAGRAM_COLUMNS}
    return Capture(Path(pcap), Packets(packets, meta), Connections(conns), Datagrams(datagrams))
