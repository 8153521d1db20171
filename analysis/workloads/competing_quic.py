"""Per-run metrics of the competing workload when both flows are QUIC (transport: quic).

The same metrics as over TCP (analysis/workloads/competing.py), from what QUIC leaves
visible: the flow under test's FCT from its client's JSON report (connection start to the
last object byte); its losses at the bottleneck from the datagrams seen before the queue
and missing after it (matched by hash: flows.datagrams_lost); its retransmissions and
transfer inflation from its server's counters (the wire cannot tell resent data apart);
fairness and the rolling throughput from the datagrams arriving at the clients' switch.
Where the endpoints and the wire count the same thing they are cross-checked: the
datagrams a server sent (its counter) against those the capture before the queue saw.

Each flow also carries what its endpoints reported about its start (the controller the
server ran, its start window, the hint the client sent and the server received) next to
the first flight measured on the wire, for the run's checks (analysis/flow_checks.py);
and, where the run wrote the servers' qlogs, its sender's slow-start exit and cwnd over
time (analysis/quic_sender.py), times from the short flow's first datagram.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analysis import flows, quic_flows, quic_sender
from analysis.flows import FourTuple
from analysis.packets import Capture, load
from analysis.workloads import series
from machine.errors import UserError
from results.schema import CAPTURE_FILES
from wire.quic_report import established_connections, last_json_object, udp_payload


def client_report(path: Path) -> dict:
    """The client's JSON object (the last JSON line of its log)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        raise UserError(f"QUIC client report missing: {path}") from None
    report = last_json_object(text)
    if report is None:
        raise UserError(f"{path}: no JSON report of the QUIC client")
    return report


def server_connection(path: Path, after: float | None = None) -> dict:
    """The server's line of the run's connection: the established one that sent the most
    (of those that began after `after`, unix seconds: a fetch that followed an earlier one)."""
    conns = established_connections(path)
    if conns is None:
        raise UserError(f"QUIC server report missing: {path}")
    if after is not None:
        conns = [c for c in conns if (c.get("start_unix_s") or 0) >= after]
    if not conns:
        raise UserError(f"{path}: the QUIC server reported no established connection"
                        + (" after the first fetch" if after is not None else ""))
    return max(conns, key=lambda c: c.get("sent_bytes") or 0)


def inflation(server: dict) -> Optional[float]:
    """Bytes the server sent ÷ the bytes it would have sent had nothing been declared lost
    (QUIC resends the frames of lost packets in new ones)."""
    sent, lost = server.get("sent_bytes"), server.get("lost_bytes")
    if not sent or lost is None or sent <= lost:
        return None
    return sent / (sent - lost)


def _flow(caps: dict[str, Capture], port: int, what: str, after: float | None = None) -> FourTuple:
    t = quic_flows.from_port(caps["client"].datagrams, port, after)
    if t is None:
        raise UserError(f"{caps['client'].path}: no QUIC datagram from server port {port} (the {what} flow)")
    if not quic_flows.tuple_mask(caps["bneck_in"].datagrams, t).any():
        raise UserError(f"{caps['bneck_in'].path}: the {what} flow seen at the client is missing here")
    return t


def flow_figures(caps: dict[str, Capture], t: FourTuple, server: dict, client: dict, rtt_s: float,
                 size: int) -> tuple[dict, dict]:
    """(bottleneck and endpoint figures, first-flight block) of one QUIC flow."""
    before, after = caps["bneck_in"].datagrams, caps["bneck_out"].datagrams
    loss = flows.datagrams_lost(before, after).get(t)
    wire = quic_flows.sent(before, t)
    # The path's minimum RTT bounds when the flight's first acknowledgement can come back; the
    # handshake's RTT may be a full queue's, which drains while the flight is out (measured:
    # handshake 100 ms, first acknowledgement 69 ms after the flight began, on dsl-fast).
    min_rtt = min(rtt_s, (server.get("handshake_rtt_ms") or float("inf")) / 1e3)
    sender = server.get("start_flight") or {}
    flight = quic_flows.first_flight(before, t, min_rtt, size, int(server.get("lost_bytes") or 0), sender)
    # A probe waits on the sender's RTT estimate, which starts from the handshake's.
    why = quic_flows.disturbed(flight, max(rtt_s, (server.get("handshake_rtt_ms") or 0) / 1e3), sender)
    if why:
        flight["disturbed"] = why
    cwnd = server.get("cwnd_start_bytes")
    # A flight the first acknowledgement ended is checked against what the server sent by
    # then (and that against its window), not against the whole window.
    cut_short = sender.get("ended_by") in quic_flows.SENDER_ENDS
    figures = {
        "lost_pkts": loss.count if loss else 0,
        "retx_pkts": int(server.get("retransmitted_packets") or 0),
        "inflation": inflation(server),
        "wire_sent_datagrams": wire["datagrams"],
        "wire_sent_bytes": wire["bytes"],
        "endpoint": {k: server.get(k) for k in (
            "cc", "sender", "sent_datagrams", "sent_bytes", "lost_packets", "lost_bytes", "retransmitted_packets",
            "congestion_events", "handshake_rtt_ms", "hint_kbps", "hint_tech", "hint_applied",
            "cwnd_start_bytes", "ssthresh_start_bytes", "start_flight", "cc_reductions", "hystart_exit",
            "datagram_pacer", "careful_resume")},
    }
    block = {"first_flight": flight,
             "reported_segments": math.ceil(cwnd / size) if cwnd else None,
             "reported_flight_segments": math.ceil(sender["bytes"] / size) if cut_short else None,
             "hint_sent_kbps": client.get("hint_kbps"), "hint_received_kbps": server.get("hint_kbps"),
             "sent_datagrams_wire": wire["datagrams"], "sent_datagrams_endpoint": server.get("sent_datagrams"),
             "sent_bytes_wire": wire["bytes"], "sent_bytes_endpoint": server.get("sent_bytes")}
    return figures, block


def _throughput(dg, short: FourTuple, long: Optional[FourTuple], syn: float, end: float, rtt_s: float) -> dict:
    at = series.sample_times(float(np.min(dg["ts"])) if len(dg) else syn, syn, end, rtt_s)
    long_start = None
    if long is not None:
        long_start = flows.startup(quic_flows.first_time(dg, long),
                                   lambda t: quic_flows.rolling_mbps(dg, long, rtt_s, t), series.STEP_S)
    return series.block(at, syn, quic_flows.rolling_mbps(dg, short, rtt_s, at),
                        quic_flows.rolling_mbps(dg, long, rtt_s, at), rtt_s, long_start)


def run_metrics(run_dir: Path, spec: dict[str, Any], mtu: int) -> dict[str, Any]:
    """Metrics of one QUIC run, shaped as the TCP ones (short, long, fairness_ratio,
    throughput, counts, flows) so summary, report and compare need no second path."""
    run_dir = Path(run_dir)
    for name in CAPTURE_FILES.values():
        if not (run_dir / name).is_file():
            raise UserError(f"capture missing: {run_dir / name}")
    caps = {k.replace("-", "_"): load(run_dir / f) for k, f in CAPTURE_FILES.items()}
    rtt_s, size = float(spec["rtt_s"]), udp_payload(mtu)

    s = spec["short"]
    client = client_report(run_dir / s["client_log"])
    after = s.get("after_unix_s")
    server = server_connection(run_dir / s["server_log"], after)
    if client.get("fct_s") is None:
        raise UserError(f"{run_dir / s['client_log']}: the fetch did not complete (no FCT)")
    short = _flow(caps, int(s["server_port"]), "short", after)
    syn = quic_flows.first_time(caps["client"].datagrams, quic_flows.reverse(short))
    if math.isnan(syn):
        raise UserError(f"{caps['client'].path}: the short flow's first client datagram was not captured")
    end = syn + float(client["fct_s"])
    figures, block = flow_figures(caps, short, server, client, rtt_s, size)
    short_out = {"fct_s": float(client["fct_s"]), "bytes": int(client["bytes"]),
                 "complete": bool(client.get("complete")) and int(client["bytes"]) >= int(s["size_bytes"]),
                 "syn_ts": syn, "end_ts": end, **figures}
    blocks = {"short": block}

    long = long_out = fairness = lserver = None
    if spec.get("long"):
        lspec = spec["long"]
        long = _flow(caps, int(lspec["server_port"]), "long")
        lclient = client_report(run_dir / lspec["client_log"])
        lserver = server_connection(run_dir / lspec["server_log"])
        lfig, blocks["long"] = flow_figures(caps, long, lserver, lclient, rtt_s, size)
        dg = caps["client"].datagrams
        long_in = quic_flows.bytes_in_window(dg, long, syn, end)
        before = quic_flows.bytes_in_window(dg, long, syn - series.LEAD_S, syn)
        long_out = {"bytes": int(lclient.get("bytes") or 0), **lfig, **series.long_dip(before, long_in, syn, end)}
        fairness = quic_flows.bytes_in_window(dg, short, syn, end) / long_in if long_in else None

    for which, line in (("short", server), ("long", lserver)):
        qlog_dir = (spec.get(which) or {}).get("qlog_dir")
        if qlog_dir and line and line.get("qlog"):
            # The server named the file where the run was written; it is in the run's qlog_dir.
            path = run_dir / qlog_dir / Path(line["qlog"]).name
            if not path.is_file():
                raise UserError(f"qlog missing: {path}")
            blocks[which]["sender"] = quic_sender.sender_trace(path, line["start_unix_s"], syn,
                                                               quic_sender.slow_start_end(line))
    throughput = _throughput(caps["client"].datagrams, short, long, syn, end, rtt_s)
    throughput["rate_mbps"] = float(spec["rate_bps"]) / 1e6
    counts = {name: {k: cap.packets.meta.get(k) for k in ("tcp_packets", "udp_datagrams", "truncated_records")}
              for name, cap in caps.items()}
    return {"transport": "quic", "short": short_out, "long": long_out, "fairness_ratio": fairness,
            "throughput": throughput, "counts": counts, "quickstart": None,
            "time_sequence": {"t": [], "seq": [], "retx": [], "stride": 1}, "flows": blocks}
