"""Analysis of the competing-flows workload (Blitzstart §4, Table 1, Figs. 2-4).

(A run over QUIC — spec "transport": "quic" — gets the same metrics from the datagrams
and the endpoints' reports: analysis/workloads/competing_quic.py; everything per cell
below is shared.)

A run directory holds three captures:
  cap-client.pcap     at the clients' uplink: what was delivered, and when;
  cap-bneck-in.pcap   downstream packets before the bottleneck queue: what the
                      servers sent, including every retransmission;
  cap-bneck-out.pcap  the same packets after the queue: what the queue let through.
The difference between the two bottleneck captures is exactly the set of packets the
queue dropped, so losses are counted, not inferred.

Per run: the short flow's FCT (client's first SYN to its last new data byte at the
clients' switch), unique bytes, lost and retransmitted packets, transfer inflation; the
long flow's bytes and losses; the fairness ratio (short ÷ long bytes while the short flow
is active); the rolling one-RTT throughput of both; the time-sequence trace and Quick-Start
block of the flow under test; each flow's first flight. Per cell: the Table-1 comparison
with the baseline (FCT and loss), and the Quick-Start paper's ratios where requested.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analysis import flows, plots, quickstart, stats, summary
from analysis.packets import Capture, load
from analysis.workloads import competing_quic, series
from analysis.workloads.base import Compared, Plot, Row, Section, WorkloadAnalysis
from config.sizes import size_label
from machine.errors import UserError
from results.campaign import RunRecord
from results.schema import CAPTURE_FILES
from wire.tcpip import tcp_mss

# The time-sequence series keeps at most this many data segments (evenly strided, every
# retransmission kept): enough to draw Scharf's Figs. 9-10, small enough for metrics.json.
MAX_SEQ_POINTS = 1500


# ---------------------------------------------------------------- per run, from the captures

def _flow(cap: Capture, port: int, after: float | None = None) -> tuple[int, int] | None:
    """(connection, direction from the server) of the largest connection on `port` (of those
    whose SYN came after `after`, unix seconds: a fetch that followed an earlier one)."""
    candidates = flows.by_server_port(cap.conns, port)
    if after is not None:
        candidates = candidates[cap.conns["syn_ts"][candidates] >= after]
    conn = flows.largest(cap.conns, candidates)
    if conn is None:
        return None
    return conn, flows.direction_from_port(cap.conns, conn, port)


def _at_bottleneck(client: Capture, conn: int, port: int, bneck_in: Capture, bneck_out: Capture,
                   mss: int) -> dict:
    """Retransmissions, losses, sent volume and first flight of a flow, from the two
    bottleneck captures (bneck-in is next to the servers: the senders' side)."""
    j = flows.same_connection(client.conns, bneck_in.conns, conn)
    if j is None:
        raise UserError(f"{bneck_in.path}: the flow on port {port} seen at the client is missing here")
    dj = flows.direction_from_port(bneck_in.conns, j, port)
    k = flows.same_connection(client.conns, bneck_out.conns, conn)
    dk = flows.direction_from_port(bneck_out.conns, k, port) if k is not None else 0
    return {
        "retx_pkts": flows.retransmitted_segments(bneck_in.conns, j, dj),
        "lost_pkts": flows.segments_missing(bneck_in.packets, j, dj, bneck_out.packets, k, dk),
        # What the queue signalled by marking instead of dropping, and whether the flow could
        # take a mark at all (its handshake set up ECN).
        "ce_pkts": flows.ce_marked(bneck_out.packets, k, dk),
        "lost_ect_pkts": flows.segments_missing(bneck_in.packets, j, dj, bneck_out.packets, k, dk, ecn_capable=True),
        "ecn": flows.ecn_negotiated(bneck_in.packets, j),
        "sent_bytes": flows.sent_bytes(bneck_in.conns, j, dj),
        "sent_unique_bytes": flows.delivered_bytes(bneck_in.conns, j, dj),
        "first_flight": _first_flight(bneck_in, j, dj, bneck_out, k, dk, mss),
    }


def _first_flight(bneck_in: Capture, j: int, dj: int, bneck_out: Capture, k: int | None, dk: int, mss: int) -> dict:
    """The flow's first flight, marked when a loss or a timeout disturbed it
    (flows.first_flight_disturbed: its check then counts it instead). On a trace link an
    outage delays the first ACK past the tail loss probe, or the SYN-ACK past its timeout."""
    flight = flows.first_flight(bneck_in.packets, j, dj, mss)
    why = flows.first_flight_disturbed(bneck_in.packets, j, dj, bneck_out.packets, k, dk)
    return {**flight, "disturbed": why} if why else flight


def _throughput(client: Capture, short: tuple[int, int], long: tuple[int, int] | None,
                syn: float, end: float, rtt_s: float) -> dict:
    pk = client.packets
    at = series.sample_times(float(pk["ts"][0]) if len(pk) else syn, syn, end, rtt_s)
    long_mbps, long_start = series.long_tcp(pk, long, rtt_s, at)
    return series.block(at, syn, flows.flow_rolling_mbps(pk, short[0], short[1], rtt_s, at), long_mbps, rtt_s,
                        long_start)


def long_tcp_figures(client: Capture, long: tuple[int, int], lb: dict, syn: float, end: float) -> tuple[dict, int]:
    """The long TCP flow's figures (`lb`: its own at the bottleneck) and the bytes it
    delivered while the flow under test ran, `syn` to `end`."""
    lc, ld = long
    during = flows.bytes_in_window(client.packets, lc, ld, syn, end)
    before = flows.bytes_in_window(client.packets, lc, ld, syn - series.LEAD_S, syn)
    return ({"bytes": flows.delivered_bytes(client.conns, lc, ld), "retx_pkts": lb["retx_pkts"],
             "lost_pkts": lb["lost_pkts"], "ce_pkts": lb["ce_pkts"], "lost_ect_pkts": lb["lost_ect_pkts"],
             **series.long_dip(before, during, syn, end)}, during)


def _queue(bneck_in: Capture, bneck_out: Capture, syn: float, end: float, at_rel: list[float]) -> dict:
    """The queueing delay the servers' segments met at the bottleneck, from the two captures
    around it (flows.queue_transits): its percentiles while the short flow ran (SYN to its
    last byte) and its largest value in each step of the throughput series, so a plot shows
    the queue beside both flows' rates. Read from the wire, so the same for every queue
    discipline, the kernel's or the delay line's."""
    t, transit = flows.queue_transits(bneck_in.packets, bneck_out.packets)
    if not len(t):
        return {"samples": 0, "series_ms": []}
    delay_ms = (transit - transit.min()) * 1e3
    during = delay_ms[(t >= syn) & (t <= end)]
    out: dict = {"samples": int(len(during)), "base_transit_ms": round(float(transit.min()) * 1e3, 3)}
    if len(during):
        out.update({f"p{q}_ms": round(float(np.percentile(during, q)), 3) for q in (50, 99)},
                   max_ms=round(float(during.max()), 3))
    at = syn + np.asarray(at_rel, dtype=float)
    most = np.full(len(at), -np.inf)
    if len(at) > 1:                    # step i holds the segments that arrived in (at[i] - step, at[i]]
        inside = (t > at[0] - (at[1] - at[0])) & (t <= at[-1])
        np.maximum.at(most, np.searchsorted(at, t[inside], side="left"), delay_ms[inside])
    out["series_ms"] = [None if not np.isfinite(x) else round(float(x), 3) for x in most]
    return out


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


def _counts(caps: dict[str, Capture]) -> dict:
    keys = ("tcp_packets", "connections", "skipped_not_tcp", "skipped_short", "truncated_records")
    return {name: {k: cap.packets.meta[k] for k in keys} for name, cap in caps.items()}


def run_metrics(run_dir: Path, spec: dict, mss: int, server_counters: dict | None = None) -> dict:
    """Metrics of one run; `spec` = {"short": {"server_port", "size_bytes"},
    "long": {"server_port"} or None, "rtt_s", "rate_bps"}; `server_counters`: the run's
    (a Quick-Start request a router deleted is only there). JSON-able result."""
    run_dir = Path(run_dir)
    for name in CAPTURE_FILES.values():
        if not (run_dir / name).is_file():
            raise UserError(f"capture missing: {run_dir / name}")
    client, bneck_in, bneck_out = (load(run_dir / CAPTURE_FILES[k]) for k in ("client", "bneck-in", "bneck-out"))
    rtt_s = float(spec["rtt_s"])

    short_port = int(spec["short"]["server_port"])
    short = _flow(client, short_port, spec["short"].get("after_unix_s"))
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
    at_b = _at_bottleneck(client, sc, short_port, bneck_in, bneck_out, mss)
    short_out = {
        "fct_s": end - syn,
        "bytes": delivered,
        "complete": delivered >= int(spec["short"]["size_bytes"]),
        "lost_pkts": at_b["lost_pkts"],
        "ce_pkts": at_b["ce_pkts"],
        "lost_ect_pkts": at_b["lost_ect_pkts"],
        "retx_pkts": at_b["retx_pkts"],
        "inflation": at_b["sent_bytes"] / at_b["sent_unique_bytes"] if at_b["sent_unique_bytes"] else None,
        "syn_ts": syn,
        "end_ts": end,
        # SYN to the first data byte (the handshake and the request's round trip): papers
        # that time a transfer from its first data (or the sender's first ACK of data) are
        # compared on fct_s - first_data_s
        "first_data_s": flows.first_data_time(client.packets, sc, sd) - syn,
    }
    first_flights = {"short": at_b["first_flight"]}
    ecn = {"short": at_b["ecn"]}

    long = None
    long_out = None
    fairness = None
    if spec.get("long"):
        long_port = int(spec["long"]["server_port"])
        long = _flow(client, long_port)
        if long is None:
            raise UserError(f"{client.path}: no connection to server port {long_port} (the long flow)")
        lb = _at_bottleneck(client, long[0], long_port, bneck_in, bneck_out, mss)
        long_out, long_in_window = long_tcp_figures(client, long, lb, syn, end)
        first_flights["long"] = lb["first_flight"]
        ecn["long"] = lb["ecn"]
        short_in_window = flows.bytes_in_window(client.packets, sc, sd, syn, end)
        fairness = short_in_window / long_in_window if long_in_window else None

    throughput = _throughput(client, short, long, syn, end, rtt_s)
    throughput["rate_mbps"] = float(spec["rate_bps"]) / 1e6
    queue = _queue(bneck_in, bneck_out, syn, end, throughput["t"])
    throughput["queue_ms"] = queue.pop("series_ms")
    return {
        "queue": queue,
        "short": short_out,
        "long": long_out,
        "fairness_ratio": fairness,
        "throughput": throughput,
        "counts": _counts({"client": client, "bneck_in": bneck_in, "bneck_out": bneck_out}),
        "quickstart": quickstart.flow_quickstart(run_dir, short_port, client, sc, bneck_in, bneck_out,
                                                 server_counters),
        "time_sequence": _time_sequence(client, sc, short_port, bneck_in, syn),
        "flows": {name: {"first_flight": ff, "ecn": ecn[name]} for name, ff in first_flights.items()},
    }


# ---------------------------------------------------------------- per cell, for the summary

def fct(r: RunRecord) -> float:
    return r.metrics["short"]["fct_s"]


def lost(r: RunRecord) -> float:
    return r.metrics["short"]["lost_pkts"]


def marked(r: RunRecord) -> Optional[float]:
    """The short flow's CE marks (None in a run analysed before startlab read them)."""
    return r.metrics["short"].get("ce_pkts")


def ecn_share(runs: list[RunRecord]) -> Optional[float]:
    """The share of runs whose short flow set up ECN (None where no run records it)."""
    known = [(r.metrics.get("flows") or {}).get("short", {}).get("ecn") for r in runs]
    known = [k for k in known if k is not None]
    return sum(known) / len(known) if known else None


def queue_p99s(runs: list[RunRecord]) -> list[float]:
    """Each run's 99th-percentile queueing delay while its short flow ran (runs analysed
    before startlab read it have none)."""
    return [r.metrics["queue"]["p99_ms"] for r in runs if (r.metrics.get("queue") or {}).get("p99_ms") is not None]


def long_dips(runs: list[RunRecord]) -> list[float]:
    """The long flow's throughput dip in each run that had one (a faster start that takes
    the other flow's rate is not free); empty without a long flow."""
    return [r.metrics["long"]["dip"] for r in runs
            if (r.metrics.get("long") or {}).get("dip") is not None]


FCT = Compared(column="fct", name="fct_s", label="FCT", unit="s", get=fct, rtt_floor=True)
LOSS = Compared(column="loss", name="lost_pkts", label="loss", unit="pkts", get=lost)

COLUMNS = [
    "fct_mean_s", "fct_median_s", "fct_ci_low_s", "fct_ci_high_s",
    "loss_mean_pkts", "retx_mean_pkts", "fairness_median",
    "loss_median_pkts", "inflation_mean",
    # ECN: the short flow's CE marks (a queue's signal where it did not drop) and the share
    # of runs whose short flow set up ECN in its handshake
    "marks_mean_pkts", "marks_median_pkts", "ecn_ratio",
    # the bottleneck's queueing delay while the short flow ran, from the captures around it:
    # each run's 99th percentile, averaged
    "queue_p99_mean_ms",
    # the long flow's throughput while the object loads against the LEAD_S before it: 1 − during/before
    "long_dip_mean",
    # comparison with the baseline at the same (profile, size); empty for the baseline
    "fct_diff_s", "fct_diff_ci_low_s", "fct_diff_ci_high_s", "fct_ratio",
    "fct_significant", "fct_within_one_rtt",
    "loss_diff_pkts", "loss_ratio", "loss_significant",
    "long_dip_diff", "long_dip_significant",
    "anova_fct_p",
    # the profile's configured figures, for reading the above
    "rtt_s", "rate_bps",
    # Quick-Start of the flow under test (empty where no run carries a Quick-Start block)
    "qs_requested_ratio", "qs_approval_ratio", "qs_failure_ratio", "qs_bytes_mean",
    # the swept workload parameter and its value (empty without a sweep); then the
    # bottleneck over the fetch: sent bytes ÷ capacity × time, drops ÷ arrivals
    "sweep_param", "sweep_value", "utilisation_mean", "drop_rate_mean",
    # a third-party QUIC stack's flow under test (transport stack; empty elsewhere): its first
    # flight on the wire, when its server's qlog says it left slow start, and its first
    # loss at the bottleneck, both from its client's first datagram
    "first_flight_median_datagrams", "ss_exit_qlog_median_s", "first_loss_median_s",
]

HEADERS = ["profile", "size", "variant", "runs", "FCT mean", "FCT 95% CI", "FCT median",
           "loss mean", "loss median", "retx mean", "fairness median", "inflation", "long-flow dip",
           "queue p99", "ΔFCT vs baseline", "ANOVA p"]

ECN_HEADERS = ["profile", "size", "variant", "runs", "ECN set up", "CE marks mean", "CE marks median", "loss mean"]
ECN_NOTE = ("The short flow's packets that left the bottleneck marked Congestion Experienced (RFC 3168), "
            "beside those it lost there; \"ECN set up\": the share of runs whose handshake on the wire "
            "negotiated ECN (a flow without it is dropped where it would be marked).")

STACK_HEADERS = ["profile", "size", "variant", "runs", "FCT mean", "FCT 95% CI", "first flight (datagrams)",
                 "slow-start exit (its qlog)", "first loss (wire)", "loss mean"]
STACK_NOTE = ("Third-party QUIC stacks (transport stack): the first flight at the bottleneck's input, when the "
              "server's own qlog says it left slow start (a congestion state other than slow start, or a first "
              "finite threshold) and the flow's first datagram lost at the bottleneck, medians over the runs, both "
              "from the client's first datagram.")

CAPTIONS = {
    "cdf": "CDFs over the runs: FCT, fairness ratio (bytes of the short flow ÷ bytes of the long flow while "
           "the short flow is active), lost packets, and CE-marked packets where a queue marked (ECN).",
    "fct_box": "FCT per variant; each point is one run.",
    "throughput": "Rolling-average throughput of both flows in the median-FCT run of each variant, and (grey, "
                  "right axis) the largest queueing delay the servers' segments met at the bottleneck in each step, "
                  "from the captures before and after it.",
    "cwnd": "The QUIC senders' congestion windows from their qlogs (startlab's endpoints with the workload "
            "parameter qlog; a third-party stack's server always) in the median-FCT run of each variant, and "
            "where each left slow start.",
    "startup": "After the Blitzstart paper's Fig. 1: top, the long flow's first second on the idle link; "
               "bottom, the baseline's median-FCT run at the largest size, both flows over one RTT (thin) "
               "and over 1 s (thick).",
    "speedup": "Speedup of each variant over the baseline (mean FCT) vs transfer size; where the flow ran "
               "alone, the relative improvement next to Equation 2 of the Quick-Start paper (dashed).",
    "time_sequence": "Sequence number vs time of the server's data (before the bottleneck queue) in the "
                     "median-FCT run of each variant.",
    "load": "Quick-Start approval and failure ratios, link utilisation and drop rate over the fetch, and "
            "mean FCT vs the swept workload parameter.",
}


class CompetingAnalysis(WorkloadAnalysis):
    name = "competing"
    columns = COLUMNS
    compared = (FCT, LOSS)
    display_headers = HEADERS

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        mtu = int(meta["profile_params"].get("mtu") or 1500)
        if meta["spec"].get("transport") == "stack":
            from analysis.workloads import competing_stack      # it builds on this module's helpers
            return competing_stack.run_metrics(run_dir, meta["spec"], meta.get("app") or {}, tcp_mss(mtu))
        if meta["spec"].get("transport") == "quic":
            return competing_quic.run_metrics(run_dir, meta["spec"], mtu)
        return run_metrics(run_dir, meta["spec"], tcp_mss(mtu), meta.get("server_counters"))

    def describe(self, runs: list[RunRecord]) -> Row:
        f = [fct(r) for r in runs]
        loss = [lost(r) for r in runs]
        fairness = [r.metrics["fairness_ratio"] for r in runs if r.metrics.get("fairness_ratio") is not None]
        # inflation is undefined for a run whose short flow sent nothing at the bottleneck capture
        inflation = [r.metrics["short"]["inflation"] for r in runs if r.metrics["short"].get("inflation") is not None]
        marks = [m for m in map(marked, runs) if m is not None]
        retx = [r.metrics["short"]["retx_pkts"] for r in runs if r.metrics["short"].get("retx_pkts") is not None]
        queue_p99 = queue_p99s(runs)
        ci = stats.mean_ci(f)
        dips = long_dips(runs)
        use = [r.meta["link_use"] for r in runs
               if r.meta.get("link_use") and r.meta["link_use"].get("utilisation") is not None]
        return {
            "fct_mean_s": stats.mean(f), "fct_median_s": stats.median(f),
            "fct_ci_low_s": ci[0] if ci else None, "fct_ci_high_s": ci[1] if ci else None,
            "loss_mean_pkts": stats.mean(loss),
            # A stack's resends cannot be told apart on the wire: none counted (empty).
            "retx_mean_pkts": stats.mean(retx) if retx else None,
            "fairness_median": stats.median(fairness) if fairness else None,
            "loss_median_pkts": stats.median(loss),
            "marks_mean_pkts": stats.mean(marks) if marks else None,
            "marks_median_pkts": stats.median(marks) if marks else None,
            "ecn_ratio": ecn_share(runs),
            "queue_p99_mean_ms": stats.mean(queue_p99) if queue_p99 else None,
            "inflation_mean": stats.mean(inflation) if inflation else None,
            "long_dip_mean": stats.mean(dips) if dips else None,
            **quickstart.quickstart_figures([r.metrics.get("quickstart") for r in runs]),
            "utilisation_mean": stats.mean([u["utilisation"] for u in use]) if use else None,
            "drop_rate_mean": stats.mean([u["drop_rate"] for u in use]) if use else None,
            **stack_figures(runs),
        }

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        d_fct = stats.welch_difference([fct(r) for r in runs], [fct(r) for r in base])
        d_loss = stats.welch_difference([lost(r) for r in runs], [lost(r) for r in base])
        dips, base_dips = long_dips(runs), long_dips(base)
        d_dip = stats.welch_difference(dips, base_dips) if dips and base_dips else None
        return {
            "fct_diff_s": d_fct.diff,
            "fct_diff_ci_low_s": d_fct.ci[0] if d_fct.ci else None,
            "fct_diff_ci_high_s": d_fct.ci[1] if d_fct.ci else None,
            "fct_ratio": stats.ratio_of_means([fct(r) for r in runs], [fct(r) for r in base]),
            "fct_significant": d_fct.significant,
            "fct_within_one_rtt": stats.within_one_rtt(d_fct.diff, runs[0].rtt_s),
            "loss_diff_pkts": d_loss.diff,
            "loss_ratio": stats.ratio_of_means([lost(r) for r in runs], [lost(r) for r in base]),
            "loss_significant": d_loss.significant,
            "long_dip_diff": d_dip.diff if d_dip else None,
            "long_dip_significant": d_dip.significant if d_dip else None,
        }

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text, format_packets, format_seconds, interval_text
        ci = interval_text(row["fct_ci_low_s"], row["fct_ci_high_s"], row["runs"], format_seconds)
        return [
            cell_label(row), size_label(row["size_bytes"]), row["variant"], str(row["runs"]),
            format_seconds(row["fct_mean_s"]), ci, format_seconds(row["fct_median_s"]),
            format_packets(row["loss_mean_pkts"]), format_packets(row["loss_median_pkts"]),
            "" if row["retx_mean_pkts"] is None else format_packets(row["retx_mean_pkts"]),
            "" if row["fairness_median"] is None else f"{row['fairness_median']:.2f}",
            "" if row["inflation_mean"] is None else f"{row['inflation_mean']:.3f}", dip_text(row),
            "" if row["queue_p99_mean_ms"] is None else f"{row['queue_p99_mean_ms']:.1f} ms",
            change_text(row, FCT),
            "" if row["anova_fct_p"] is None else f"{row['anova_fct_p']:.3g}",
        ]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        return competing_plots(out, campaign, records, rows, colours)

    def sections(self, rows: list[Row]) -> list[Section]:
        from analysis.report import cell_label, format_packets, format_seconds, interval_text

        def share(x: Optional[float]) -> str:
            return "–" if x is None else f"{x:.0%}"

        def seconds(x: Optional[float]) -> str:
            return "–" if x is None else format_seconds(x)
        qs_rows = [[cell_label(r), size_label(r["size_bytes"]), r["variant"], str(r["runs"]),
                    share(r["qs_requested_ratio"]), share(r["qs_approval_ratio"]), share(r["qs_failure_ratio"]),
                    "–" if r["qs_bytes_mean"] is None else f"{r['qs_bytes_mean'] / 1000:.1f} KB"]
                   for r in rows if r.get("qs_requested_ratio") is not None]
        ecn_rows = [[cell_label(r), size_label(r["size_bytes"]), r["variant"], str(r["runs"]),
                     share(r["ecn_ratio"]), format_packets(r["marks_mean_pkts"]),
                     format_packets(r["marks_median_pkts"]), format_packets(r["loss_mean_pkts"])]
                    for r in rows if r.get("ecn_ratio") or r.get("marks_mean_pkts")]
        out = [Section("Quick-Start", quickstart.QS_HEADERS, qs_rows, quickstart.QS_NOTE)] if qs_rows else []
        if ecn_rows:
            out.append(Section("ECN", ECN_HEADERS, ecn_rows, ECN_NOTE))
        stack_rows = [[cell_label(r), size_label(r["size_bytes"]), r["variant"], str(r["runs"]),
                       format_seconds(r["fct_mean_s"]),
                       interval_text(r["fct_ci_low_s"], r["fct_ci_high_s"], r["runs"], format_seconds),
                       "–" if r["first_flight_median_datagrams"] is None else f"{r['first_flight_median_datagrams']:g}",
                       seconds(r["ss_exit_qlog_median_s"]), seconds(r["first_loss_median_s"]),
                       format_packets(r["loss_mean_pkts"])]
                      for r in rows if r.get("first_flight_median_datagrams") is not None]
        if stack_rows:
            out.append(Section("QUIC stacks", STACK_HEADERS, stack_rows, STACK_NOTE))
        return out


def stack_figures(runs: list[RunRecord]) -> dict[str, Optional[float]]:
    """Medians of a stack's start over the runs (transport stack; None elsewhere)."""
    def median(values: list) -> Optional[float]:
        values = [v for v in values if v is not None]
        return stats.median(values) if values else None
    stack_runs = [r for r in runs if r.metrics.get("transport") == "stack"]
    return {"first_flight_median_datagrams": median([(r.metrics["flows"]["short"].get("first_flight") or {})
                                                     .get("datagrams") for r in stack_runs]),
            "ss_exit_qlog_median_s": median([r.metrics["short"].get("ss_exit_qlog_s") for r in stack_runs]),
            "first_loss_median_s": median([r.metrics["short"].get("first_loss_s") for r in stack_runs])}


def dip_text(row: Row) -> str:
    """'38 % (+12 pts*)': the long flow's mean dip and its change from the baseline's in
    percentage points (* where the Welch interval excludes 0)."""
    if row.get("long_dip_mean") is None:
        return ""
    text = f"{row['long_dip_mean']:.0%}"
    if row.get("long_dip_diff") is not None:
        text += f" ({100 * row['long_dip_diff']:+.0f} pts{'*' if row.get('long_dip_significant') else ''})"
    return text


# ---------------------------------------------------------------- figures

def short_fct(r: RunRecord) -> float:
    return r.metrics["short"]["fct_s"]


def competing_plots(out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
                    colours: dict[str, str]) -> list[Plot]:
    """Per profile: CDFs (Fig. 2) and FCT boxes; per cell: throughput of the median run
    (Fig. 3); Quick-Start speedup and time-sequence plots where requested; with a sweep,
    the figures vs the swept parameter instead (they would mix the sweep's points)."""
    variants = list(colours)
    baseline = campaign.get("baseline")
    cells = summary.ordered_cells(campaign, records)
    result: list[Plot] = []

    def save(fig, kind: str, profile: str, size: Optional[int]) -> None:
        stem = plots.file_stem(profile)
        name = f"{kind}_{stem}" + ("" if size is None else f"_{size_label(size)}") + ".png"
        plots.save(fig, out / name)
        result.append(Plot(kind, profile, size, out / name, CAPTIONS[kind]))

    if any(r.sweep for r in records):
        for profile, size in cells:
            mine = [r for r in rows if (r["profile"], r["size_bytes"]) == (profile, size)]
            save(plots.load_figure(profile, size, mine, variants, colours), "load", profile, size)
        return result
    by_cell: dict[tuple[str, int], list[RunRecord]] = {}
    for rec in records:
        by_cell.setdefault((rec.profile, rec.size_bytes), []).append(rec)
    for profile in dict.fromkeys(p for p, _ in cells):
        sizes = [(s, by_cell[(profile, s)]) for p, s in cells if p == profile]
        save(plots.cdf_figure(profile, sizes, variants, colours, baseline), "cdf", profile, None)
        save(plots.fct_box_figure(profile, sizes, variants, colours, short_fct), "fct_box", profile, None)
        for size, runs in sizes:
            save(plots.throughput_figure(profile, size, runs, variants, colours), "throughput", profile, size)
            if any((r.metrics.get("flows") or {}).get("short", {}).get("sender") for r in runs):
                save(plots.cwnd_figure(profile, size, runs, variants, colours), "cwnd", profile, size)
        largest, runs = sizes[-1]
        base_runs = [r for r in runs if r.variant == baseline]
        if base_runs and any(r.metrics["throughput"].get("long_start") for r in base_runs):
            save(plots.startup_figure(profile, largest, plots.median_fct_run(base_runs), colours[baseline]),
                 "startup", profile, largest)
        if any((r.metrics.get("quickstart") or {}).get("requested") for _, runs in sizes for r in runs):
            if baseline:
                save(plots.speedup_figure(profile, sizes, variants, colours, baseline), "speedup", profile, None)
            for size, runs in sizes:
                save(plots.time_sequence_figure(profile, size, runs, variants, colours), "time_sequence",
                     profile, size)
    return result


ANALYSIS = CompetingAnalysis()
