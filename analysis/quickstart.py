"""Quick-Start in the captures and in the summary: what a connection requested, what came
back, whether the sender accepted it, and its Quick-Start phase; per cell the approval and
failure ratios of the Allman/Floyd/Sarolahti paper. The codec is wire/quickstart.py."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analysis import flows, stats
from analysis.packets import Capture
from wire.quickstart import QsRequest, QsResponse, SentRequest, find_request, find_response, ttl_diff, \
    validate_response


@dataclass(frozen=True)
class HandshakeOptions:
    """The Quick-Start options of one connection's handshake, as one capture point saw them."""
    synack_ttl: int
    request: QsRequest | None       # on the SYN-ACK
    echo: QsResponse | None         # on the client's first ACK after it


def handshake_options(pcap_path, server_port: int, max_records: int = 5000) -> HandshakeOptions | None:
    """Read a classic pcap (Ethernet, IPv4) only as far as the first SYN-ACK from
    `server_port` and the client's next packet: the options live in the handshake, so
    this never walks the whole capture (the columnar extractor does not keep options)."""
    with open(pcap_path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return None
        endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        synack = None
        for _ in range(max_records):
            rec = f.read(16)
            if len(rec) < 16:
                return None
            caplen = struct.unpack(endian + "I", rec[8:12])[0]
            frame = f.read(caplen)
            if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
                continue
            ihl = (frame[14] & 0x0F) * 4
            tcp = frame[14 + ihl:]
            if len(tcp) < 20:
                continue
            sport, dport = struct.unpack("!HH", tcp[:4])
            flags, thl = tcp[13], (tcp[12] >> 4) * 4
            if synack is None:
                if sport == server_port and flags & 0x12 == 0x12:
                    synack = (frame[22], find_request(bytes(frame[34:14 + ihl])), dport)
                continue
            if dport == server_port and sport == synack[2] and not flags & 0x02:
                return HandshakeOptions(synack[0], synack[1], find_response(bytes(tcp[20:thl])))
    return None


def flow_quickstart(run_dir: Path, port: int, client: Capture, conn: int, bneck_in: Capture,
                    bneck_out: Capture) -> dict:
    """Quick-Start of one flow: requested (the SYN-ACK leaving the server, at bneck-in), what
    arrived and was echoed (at the client), the sender's verdict by RFC 4782's checks, and —
    if approved — the Quick-Start phase: the data segments sent before the first ACK of data
    came back, and how many of them the queue dropped (a Quick-Start failure when any)."""
    sent = handshake_options(run_dir / "cap-bneck-in.pcap", port)
    seen = handshake_options(run_dir / "cap-client.pcap", port)
    if sent is None or sent.request is None:
        return {"requested": False}
    out = {"requested": True, "requested_code": sent.request.rate_code,
           "requested_bps": sent.request.rate_bps,
           "arrived_code": seen.request.rate_code if seen and seen.request else None,
           "echoed": bool(seen and seen.echo)}
    if not (seen and seen.echo):
        out.update(verdict="no-echo", approved=False)
        return out
    remembered = SentRequest(sent.request.rate_code, ttl_diff(sent.synack_ttl, sent.request.qs_ttl),
                             sent.request.nonce)
    verdict = validate_response(remembered, seen.echo)
    out.update(verdict=verdict, approved=verdict == "approved",
               approved_bps=seen.echo.rate_bps if verdict == "approved" else 0)
    if verdict != "approved":
        return out
    j = flows.same_connection(client.conns, bneck_in.conns, conn)
    d = flows.direction_from_port(bneck_in.conns, j, port)
    pk = bneck_in.packets
    data = flows.flow_mask(pk, j, d) & (pk["payload"] > 0)
    t0 = float(pk["ts"][data][0]) if data.any() else 0.0
    acks = (pk["conn"] == j) & (pk["dir"] != d) & (pk["ts"] > t0)
    t_end = float(pk["ts"][acks][0]) if acks.any() else float("inf")
    phase = data & (pk["ts"] < t_end)
    k = flows.same_connection(client.conns, bneck_out.conns, conn)
    dk = flows.direction_from_port(bneck_out.conns, k, port) if k is not None else 0
    lost = flows.segments_missing(flows.subset(pk, phase), j, d, bneck_out.packets, k, dk)
    out.update(qs_pkts=int(phase.sum()), qs_bytes=int(pk["payload"][phase].sum()), qs_lost_pkts=lost,
               qs_failure=lost > 0)
    return out


def quickstart_figures(blocks: list[Optional[dict[str, Any]]]) -> dict[str, Any]:
    """The paper's per-scenario Quick-Start figures over the runs' Quick-Start blocks.

    requested ratio = runs whose SYN-ACK carried a request ÷ runs with a Quick-Start block;
    approval ratio = approved ÷ requested; failure ratio = approved runs that lost a
    Quick-Start packet ÷ approved; bytes mean = data sent in the Quick-Start phase, mean
    over the approved runs. A ratio without a denominator is None, as are all four when no
    run carries the block (campaigns analysed before Quick-Start existed).
    """
    blocks = [b for b in blocks if b is not None]
    requested = [b for b in blocks if b.get("requested")]
    approved = [b for b in requested if b.get("approved")]
    return {
        "qs_requested_ratio": len(requested) / len(blocks) if blocks else None,
        "qs_approval_ratio": len(approved) / len(requested) if requested else None,
        "qs_failure_ratio": (sum(1 for b in approved if b.get("qs_failure")) / len(approved)
                             if approved else None),
        "qs_bytes_mean": stats.mean([b.get("qs_bytes", 0) for b in approved]) if approved else None,
    }


QS_HEADERS = ["profile", "size", "variant", "runs", "requested", "approved", "failures", "QS bytes mean"]
QS_NOTE = ("requested: share of runs whose SYN-ACK carried a Quick-Start request; approved: share of the "
           "requests the sender accepted (echo with the right TTL diff and nonce, rate > 0); failures: share "
           "of approved runs that lost a packet sent in the Quick-Start phase; QS bytes: data sent in that "
           "phase, mean over the approved runs.")
