"""Per-run metrics of the competing-flows workload (Blitzstart paper, §4).

A run directory holds three captures:
  cap-client.pcap     at the client: what was delivered, and when;
  cap-bneck-in.pcap   downstream packets before the bottleneck queue: what the
                      server sent, including every retransmission;
  cap-bneck-out.pcap  the same packets after the queue: what the queue let through.
The difference between the two bottleneck captures is exactly the set of packets
the queue dropped, so losses are counted, not inferred.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from analysis import flows, quickstart
from analysis.packets import Capture, load
from machine.errors import UserError

CAPTURES = ("cap-client.pcap", "cap-bneck-in.pcap", "cap-bneck-out.pcap")
# The throughput series starts this long before the short flow's SYN, so a plot
# shows the long flow alone first, and ends one window after its last byte.
LEAD_S = 1.0
STEP_S = 0.005
MAX_SAMPLES = 5000
# The time-sequence series keeps at most this many data segments (evenly strided, every
# retransmission kept): enough to draw Scharf's Figs. 9-10, small enough for metrics.json.
MAX_SEQ_POINTS = 1500


def _flow(cap: Capture, port: int) -> tuple[int, int] | None:
    """(connection, direction from the server) of the largest connection on `port`."""
    conn = flows.largest(cap.conns, flows.by_server_port(cap.conns, port))
    if conn is None:
        return None
    return conn, flows.direction_from_port(cap.conns, conn, port)


def _at_bottleneck(client: Capture, conn: int, port: int, bneck_in: Capture, bneck_out: Capture) -> dict:
    """Retransmissions, losses and sent volume of a flow, from the two bottleneck captures."""
    j = flows.same_connection(client.conns, bneck_in.conns, conn)
    if j is None:
        raise UserError(f"{bneck_in.path}: the flow on port {port} seen at the client is missing here")
    dj = flows.direction_from_port(bneck_in.conns, j, port)
    k = flows.same_connection(client.conns, bneck_out.conns, conn)
    dk = flows.direction_from_port(bneck_out.conns, k, port) if k is not None else 0
    return {
        "retx_pkts": flows.retransmitted_segments(bneck_in.conns, j, dj),
        "lost_pkts": flows.segments_missing(bneck_in.packets, j, dj, bneck_out.packets, k, dk),
        "sent_bytes": flows.sent_bytes(bneck_in.conns, j, dj),
        "sent_unique_bytes": flows.delivered_bytes(bneck_in.conns, j, dj),
    }


def _throughput(client: Capture, short: tuple[int, int], long: tuple[int, int] | None,
                syn: float, end: float, rtt_s: float) -> dict:
    first = float(client.packets["ts"][0]) if len(client.packets) else syn
    t0 = max(first, syn - LEAD_S)
    t1 = end + rtt_s
    step = max(STEP_S, (t1 - t0) / MAX_SAMPLES)
    at = np.arange(t0, t1 + step / 2, step)
    pk = client.packets
    short_mbps = flows.flow_rolling_mbps(pk, short[0], short[1], rtt_s, at)
    long_mbps = flows.flow_rolling_mbps(pk, long[0] if long else None, long[1] if long else 0, rtt_s, at)
    return {
        "t": np.round(at - syn, 6).tolist(),
        "short_mbps": np.round(short_mbps, 3).tolist(),
        "long_mbps": np.round(long_mbps, 3).tolist(),
        "window_s": rtt_s,
    }


def _time_sequence(client: Capture, conn: int, port: int, bneck_in: Capture, syn: float) -> dict:
    """Server → client data segments of the flow before the bottleneck queue (what the
    sender sent, when — retransmissions included): time since the SYN and the segment's
    last byte relative to the first data byte, decimated to MAX_SEQ_POINTS."""
    j = flows.same_connection(client.conns, bneck_in.conns, conn)
    if j is None:
        return {"t": [], "seq": [], "retx": [], "stride": 1}
    d = flows.direction_from_port(bneck_in.conns, j, port)
    pk = bneck_in.packets
    data = flows.flow_mask(pk, j, d) & (pk["payload"] > 0)
    ts, seq = pk["ts"][data], pk["seq"][data].astype(np.int64)
    retx = pk["retx"][data].astype(bool)
    if ts.size == 0:
        return {"t": [], "seq": [], "retx": [], "stride": 1}
    end = (seq - int(seq[0])) % 2 ** 32 + pk["payload"][data]
    stride = max(1, -(-ts.size // MAX_SEQ_POINTS))
    keep = np.zeros(ts.size, dtype=bool)
    keep[::stride] = True
    keep[-1] = True
    keep |= retx
    return {"t": np.round(ts[keep] - syn, 6).tolist(), "seq": end[keep].astype(int).tolist(),
            "retx": retx[keep].astype(int).tolist(), "stride": stride}


def _quickstart(run_dir: Path, port: int, client: Capture, conn: int, bneck_in: Capture,
                bneck_out: Capture) -> dict:
    """Quick-Start of the flow under test: requested (the SYN-ACK leaving the server, at
    bneck-in), what arrived and was echoed (at the client), the sender's verdict by RFC
    4782's checks, and — if approved — the Quick-Start phase: the data segments sent
    before the first ACK of data came back, and how many of them the queue dropped (a
    Quick-Start failure when any)."""
    sent = quickstart.handshake_options(run_dir / "cap-bneck-in.pcap", port)
    seen = quickstart.handshake_options(run_dir / "cap-client.pcap", port)
    if sent is None or sent.request is None:
        return {"requested": False}
    out = {"requested": True, "requested_code": sent.request.rate_code,
           "requested_bps": sent.request.rate_bps,
           "arrived_code": seen.request.rate_code if seen and seen.request else None,
           "echoed": bool(seen and seen.echo)}
    if not (seen and seen.echo):
        out.update(verdict="no-echo", approved=False)
        return out
    remembered = quickstart.SentRequest(sent.request.rate_code,
                                        quickstart.ttl_diff(sent.synack_ttl, sent.request.qs_ttl),
                                        sent.request.nonce)
    verdict = quickstart.validate_response(remembered, seen.echo)
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
    phase_in = _subset(pk, phase)
    lost = flows.segments_missing(phase_in, j, d, bneck_out.packets, k, dk)
    out.update(qs_pkts=int(phase.sum()), qs_bytes=int(pk["payload"][phase].sum()), qs_lost_pkts=lost,
               qs_failure=lost > 0)
    return out


def _subset(pk, mask: np.ndarray):
    """The packets of `pk` selected by `mask`, as something flows.* functions accept."""
    return {name: pk[name][mask] for name in ("conn", "dir", "payload", "seq", "ipid")}


def _counts(caps: dict[str, Capture]) -> dict:
    keys = ("tcp_packets", "connections", "skipped_not_tcp", "skipped_short", "truncated_records")
    return {name: {k: cap.packets.meta[k] for k in keys} for name, cap in caps.items()}


def run_metrics(run_dir: Path, spec: dict) -> dict:
    """Metrics of one run; `spec` = {"short": {"server_port", "size_bytes"},
    "long": {"server_port"} or None, "rtt_s", "rate_bps"}. JSON-able result."""
    run_dir = Path(run_dir)
    for name in CAPTURES:
        if not (run_dir / name).is_file():
            raise UserError(f"capture missing: {run_dir / name}")
    client, bneck_in, bneck_out = (load(run_dir / name) for name in CAPTURES)
    rtt_s = float(spec["rtt_s"])

    short_port = int(spec["short"]["server_port"])
    short = _flow(client, short_port)
    if short is None:
        raise UserError(f"{client.path}: no connection to server port {short_port} (the short flow)")
    sc, sd = short
    syn = flows.syn_time(client.conns, sc)
    if math.isnan(syn):
        raise UserError(f"{client.path}: the short flow's SYN was not captured; cannot measure its FCT")
    end = flows.last_new_data_time(client.packets, sc, sd)
    if math.isnan(end):
        raise UserError(f"{client.path}: the short flow on port {short_port} delivered no data")
    delivered = flows.delivered_bytes(client.conns, sc, sd)
    at_b = _at_bottleneck(client, sc, short_port, bneck_in, bneck_out)
    short_out = {
        "fct_s": end - syn,
        "bytes": delivered,
        "complete": delivered >= int(spec["short"]["size_bytes"]),
        "lost_pkts": at_b["lost_pkts"],
        "retx_pkts": at_b["retx_pkts"],
        "inflation": at_b["sent_bytes"] / at_b["sent_unique_bytes"] if at_b["sent_unique_bytes"] else None,
        "syn_ts": syn,
        "end_ts": end,
    }

    long = None
    long_out = None
    fairness = None
    if spec.get("long"):
        long_port = int(spec["long"]["server_port"])
        long = _flow(client, long_port)
        if long is None:
            raise UserError(f"{client.path}: no connection to server port {long_port} (the long flow)")
        lc, ld = long
        lb = _at_bottleneck(client, lc, long_port, bneck_in, bneck_out)
        long_out = {
            "bytes": flows.delivered_bytes(client.conns, lc, ld),
            "retx_pkts": lb["retx_pkts"],
            "lost_pkts": lb["lost_pkts"],
        }
        long_in_window = flows.bytes_in_window(client.packets, lc, ld, syn, end)
        short_in_window = flows.bytes_in_window(client.packets, sc, sd, syn, end)
        fairness = short_in_window / long_in_window if long_in_window else None

    throughput = _throughput(client, short, long, syn, end, rtt_s)
    throughput["rate_mbps"] = float(spec["rate_bps"]) / 1e6
    return {
        "short": short_out,
        "long": long_out,
        "fairness_ratio": fairness,
        "throughput": throughput,
        "counts": _counts({"client": client, "bneck_in": bneck_in, "bneck_out": bneck_out}),
        "quickstart": _quickstart(run_dir, short_port, client, sc, bneck_in, bneck_out),
        "time_sequence": _time_sequence(client, sc, short_port, bneck_in, syn),
    }
