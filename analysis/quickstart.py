"""Quick-Start in the captures and in the summary: what a connection requested, what came
back, whether the sender accepted it, and its Quick-Start phase; per cell the approval and
failure ratios of the Allman/Floyd/Sarolahti paper. The codec is wire/quickstart.py."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analysis import flows, stats
from analysis.packets import SYN, Capture, synacks
from wire.pcap import tcp_packets as segments
from wire.quickstart import QsRequest, QsResponse, SentRequest, code_to_bps, find_request, find_response, \
    ttl_diff, validate_response


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
    if Path(pcap_path).stat().st_size < 24:
        return None                        # nothing captured yet
    synack = None
    for seg in itertools.islice(segments(pcap_path), max_records):
        if synack is None:
            if seg.sport == server_port and synacks(seg.flags):
                synack = (seg.ttl, find_request(seg.ip_options), seg.dport)
            continue
        if seg.dport == server_port and seg.sport == synack[2] and not seg.flags & SYN:
            return HandshakeOptions(synack[0], synack[1], find_response(seg.tcp_options))
    return None


def server_request(server_counters: dict | None) -> int | None:
    """The rate code the flow's Quick-Start server requested, from its counters (one
    Quick-Start connection per server in a competing run), or None when it sent none."""
    sent = [c for c in (server_counters or {}).values() if (c or {}).get("requests_sent")]
    return int(sent[0]["last_rate_code"]) if sent else None


def flow_quickstart(run_dir: Path, port: int, client: Capture, conn: int, bneck_in: Capture,
                    bneck_out: Capture, server_counters: dict | None = None) -> dict:
    """Quick-Start of one flow: requested (the SYN-ACK leaving the server, at bneck-in), what
    arrived and was echoed (at the client), the sender's verdict by RFC 4782's checks, and —
    if approved — the Quick-Start phase: the data segments sent before the first ACK of data
    came back, and how many of them the queue dropped (a Quick-Start failure when any).
    A router that rejects a request may delete it (RFC 4782 §3.3) before the bottleneck's
    capture: the request is then the server's counters' (`server_counters`), unseen on the
    path (`seen_on_path` false), unechoed and not approved."""
    sent = handshake_options(run_dir / "cap-bneck-in.pcap", port)
    seen = handshake_options(run_dir / "cap-client.pcap", port)
    if sent is None or sent.request is None:
        code = server_request(server_counters)
        if code is None:
            return {"requested": False}
        return {"requested": True, "requested_code": code, "requested_bps": code_to_bps(code),
                "seen_on_path": False, "arrived_code": None, "echoed": False, "verdict": "no-echo",
                "approved": False}
    out = {"requested": True, "requested_code": sent.request.rate_code, "seen_on_path": True,
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
    lost = flows.segments_missing(pk, j, d, bneck_out.packets, k, dk, within=phase)
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
QS_NOTE = ("requested: share of runs whose server sent a Quick-Start request on its SYN-ACK (seen at the "
           "bottleneck, or in the server's counters where a rejecting router deleted it); approved: share of the "
           "requests the sender accepted (echo with the right TTL diff and nonce, rate > 0); failures: share "
           "of approved runs that lost a packet sent in the Quick-Start phase; QS bytes: data sent in that "
           "phase, mean over the approved runs.")
