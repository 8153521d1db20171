"""Per-run metrics of the competing workload when the flow under test is a third-party QUIC
stack's and the long flow kernel TCP's (transport: stack).

The same metrics as over TCP (competing.py) and QUIC (competing_quic.py), each from where
it can be read for every stack alike:
- the short flow's FCT: from its first datagram on the wire to its last byte, as its
  client reports it (its start in unix seconds plus its own time to the last byte), or,
  where the stack's client reports none (ngtcp2's example), the time its qlog logs the
  packet carrying the object's FIN; its losses at the bottleneck: datagrams seen before
  the queue and missing after it (flows.datagrams_lost);
- its first flight on the wire (quic_flows.first_flight, in the stack's own datagram size)
  beside the first congestion window of its server's qlog: the stack checked against
  itself (flow_checks' window_ok, within one datagram); a stack that writes no qlog
  against the window its sources give;
- its slow-start exit twice: when its server's qlog says it left slow start, and the wire's
  first loss of the flow at the bottleneck, both in seconds from the client's first
  datagram (the qlog's time 0, its server's first event, is taken as the moment the
  client's first datagram passed the capture next to the servers, half an RTT later);
- the long flow (TCP), fairness, the dip and the throughput series as over TCP.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from analysis import flows, quic_flows, quic_sender
from analysis.packets import load
from analysis.workloads import competing, competing_quic, series
from machine.errors import UserError
from results.schema import CAPTURE_FILES
from wire import qlog_events
from wire.quic_report import last_json_object


def _qlog(run_dir: Path, spec: dict, role: str) -> Optional[qlog_events.Trace]:
    """The run's one qlog of `role` (None where the stack writes none)."""
    d = run_dir / spec["qlog_dir"] / role
    files = sorted(p for p in d.iterdir() if p.suffix in (".qlog", ".sqlog")) if d.is_dir() else []
    if len(files) > 1:
        raise UserError(f"{d}: {len(files)} qlog files, one connection expected")
    return qlog_events.read(files[0]) if files else None


def run_metrics(run_dir: Path, spec: dict[str, Any], app: dict[str, Any], mss: int) -> dict[str, Any]:
    """Metrics of one run, shaped as the TCP ones (short, long, fairness_ratio, throughput,
    queue, counts, flows), so summary, report and compare need no other path."""
    run_dir = Path(run_dir)
    for name in CAPTURE_FILES.values():
        if not (run_dir / name).is_file():
            raise UserError(f"capture missing: {run_dir / name}")
    caps = {k.replace("-", "_"): load(run_dir / f) for k, f in CAPTURE_FILES.items()}
    rtt_s, s = float(spec["rtt_s"]), spec["short"]
    got = app.get("stack_client") or {}

    short = competing_quic._flow(caps, int(s["server_port"]), "short")
    syn = quic_flows.first_time(caps["client"].datagrams, quic_flows.reverse(short))
    server_q, client_q = _qlog(run_dir, s, "server"), _qlog(run_dir, s, "client")
    # The client's own report: when it started (unix seconds) and how long after that its
    # last byte came. Timed from that start, an FCT would carry the program's own set-up
    # (measured in the guest: s2n-quic's client took about a second before its first
    # datagram), so it is timed from the flow's first datagram, on the captures' clock.
    report = last_json_object((run_dir / s.get("client_log", "stack-client.log")).read_text(errors="replace")) \
        if (run_dir / s.get("client_log", "stack-client.log")).is_file() else None
    if report and report.get("fct_s") is not None and report.get("start_unix_s") is not None:
        fct, fct_from = float(report["start_unix_s"]) + float(report["fct_s"]) - syn, "client"
    else:
        # ngtcp2's example reports no time: its qlog's packet carrying the object's FIN,
        # counted from the client's connection, created just before its first datagram.
        fin = client_q.fin_received_ms() if client_q else None
        if fin is None:
            raise UserError(f"{run_dir}: {s['stack']}'s client reported no FCT and its qlog no FIN")
        fct, fct_from = fin / 1e3, "client qlog"
    end = syn + fct

    before, after = caps["bneck_in"].datagrams, caps["bneck_out"].datagrams
    loss = flows.datagrams_lost(before, after).get(short)
    lost_at = [float(before["ts"][i]) - syn for i in loss.lost] if loss else []
    flight = quic_flows.first_flight(before, short, rtt_s, int(s["datagram_bytes"]))
    cwnds = server_q.cwnds() if server_q else []
    exit_ms = server_q.slow_start_exit_ms() if server_q else None
    # The server's qlog counts from its first event, when the client's first datagram
    # reached it: that datagram at the capture next to the servers, on the captures' clock.
    qlog_zero = quic_flows.first_time(before, quic_flows.reverse(short))
    wire = quic_flows.sent(before, short)
    short_out = {
        "fct_s": float(fct), "fct_from": fct_from, "bytes": int(got.get("bytes") or 0),
        "complete": int(got.get("bytes") or 0) >= int(s["size_bytes"]), "syn_ts": syn, "end_ts": end,
        "lost_pkts": loss.count if loss else 0, "retx_pkts": None, "inflation": None,
        "wire_sent_datagrams": wire["datagrams"], "wire_sent_bytes": wire["bytes"],
        "first_loss_s": round(min(lost_at), 6) if lost_at else None,
        "ss_exit_qlog_s": round(qlog_zero - syn + exit_ms / 1e3, 6) if exit_ms is not None else None,
        "stack": {k: s.get(k) for k in ("stack", "version", "cc", "datagram_bytes", "iw_bytes")},
    }
    # The window the flight is checked against: the first one the server's qlog gives, or
    # where the stack writes none (s2n-quic), the one its sources give.
    window, window_from = (cwnds[0][1], "qlog") if cwnds else (s.get("iw_bytes"), "sources")
    block = {"first_flight": flight, "window_bytes": window, "window_from": window_from,
             "reported_segments": math.ceil(window / int(s["datagram_bytes"])) if window else None}
    if not server_q:
        block["stack_without_qlog"] = True
    if cwnds:
        block["sender"] = _sender(cwnds, qlog_zero - syn, short_out["ss_exit_qlog_s"], lost_at, int(s["datagram_bytes"]))

    client, bneck_in, bneck_out = caps["client"], caps["bneck_in"], caps["bneck_out"]
    long_out = fairness = long = None
    blocks = {"short": block}
    if spec.get("long"):
        long_port = int(spec["long"]["server_port"])
        long = competing._flow(client, long_port)
        if long is None:
            raise UserError(f"{client.path}: no connection to server port {long_port} (the long flow)")
        lb = competing._at_bottleneck(client, long[0], long_port, bneck_in, bneck_out, mss)
        long_out, long_in = competing.long_tcp_figures(client, long, lb, syn, end)
        blocks["long"] = {"first_flight": lb["first_flight"], "ecn": lb["ecn"]}
        fairness = quic_flows.bytes_in_window(client.datagrams, short, syn, end) / long_in if long_in else None

    throughput = _throughput(caps, short, long, syn, end, rtt_s)
    throughput["rate_mbps"] = float(spec["rate_bps"]) / 1e6
    queue = competing._queue(bneck_in, bneck_out, syn, end, throughput["t"])
    throughput["queue_ms"] = queue.pop("series_ms")
    counts = {name: {k: cap.packets.meta.get(k) for k in ("tcp_packets", "udp_datagrams", "truncated_records")}
              for name, cap in caps.items()}
    return {"transport": "stack", "queue": queue, "short": short_out, "long": long_out, "fairness_ratio": fairness,
            "throughput": throughput, "counts": counts, "quickstart": None,
            "time_sequence": {"t": [], "seq": [], "retx": [], "stride": 1}, "flows": blocks}


def _sender(cwnds: list[tuple[float, int]], shift_s: float, exit_s: Optional[float], lost_at: list[float],
            datagram: int) -> dict:
    """The server qlog's congestion windows for the report's cwnd figure, on the short
    flow's time base (as quic_sender.sender_trace gives startlab's own), and where the qlog
    says slow start ended, with the flow's datagrams the bottleneck had dropped by then."""
    stride = max(1, -(-len(cwnds) // quic_sender.MAX_POINTS))
    kept = cwnds[::stride]
    before = [w for t, w in cwnds if exit_s is not None and shift_s + t / 1e3 <= exit_s + 1e-6]
    at_exit = before[-1] if before else None
    return {"exit": None if exit_s is None else {"t_s": exit_s, "cwnd_bytes": at_exit, "by": "its qlog",
                                                  "lost_before": sum(1 for t in lost_at if t < exit_s)},
            "lost_packets": len(lost_at), "datagram_bytes": datagram,
            "cwnd": {"t": [round(shift_s + t / 1e3, 6) for t, _ in kept], "bytes": [w for _, w in kept],
                     "stride": stride}}


def _throughput(caps: dict, short, long: Optional[tuple[int, int]], syn: float, end: float, rtt_s: float) -> dict:
    """Both flows' rolling rates at the clients' switch: the short flow's datagrams, the
    long flow's TCP segments, on one time base from the short flow's first datagram."""
    dg, pk = caps["client"].datagrams, caps["client"].packets
    first = min([float(x) for x in (dg["ts"].min() if len(dg) else syn, pk["ts"].min() if len(pk) else syn)])
    at = series.sample_times(first, syn, end, rtt_s)
    long_mbps, long_start = series.long_tcp(pk, long, rtt_s, at)
    return series.block(at, syn, quic_flows.rolling_mbps(dg, short, rtt_s, at), long_mbps, rtt_s, long_start)
