"""Analysis of the bursty workload (TCP Fast Start §4, Figs. 2-5 and the flash crowd).

Constant and changed load: the completion time of the second burst — from the server's
first data byte of that burst (capture next to the servers) to its last new byte at the
clients' uplink — which is the y-axis of the paper's Figs. 2-4; the first burst's too; the
restart window (the second burst's data sent before its first ACK came back); the packets
the bottleneck queue dropped of the bursty connection and of the bulk transfers (the two
captures around the queue), during the whole run and during the second burst; and the
sequence trace of the busiest bulk transfer from 1 s before to 3 s after the second burst
started (Fig. 5). Flash crowd: every new connection's download time (its SYN to its last
byte), for the half on the variant's server and the half on the other server.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure

from analysis import flows, plots, stats, summary
from analysis.packets import Capture, load
from analysis.workloads.base import (Compared, Plot, Row, WorkloadAnalysis, compare_metric,
                                     describe_metric)
from machine.errors import UserError
from results.campaign import RunRecord
from results.schema import CAPTURE_FILES
from wire.tcpip import run_mss

TRACE_BEFORE_S, TRACE_AFTER_S = 1.0, 3.0
MAX_TRACE_POINTS = 1500


def _direction(cap: Capture, conn: int, port: int) -> int:
    return flows.direction_from_port(cap.conns, conn, port)


def _lost(b_in: Capture, b_out: Capture, conn: int, port: int, after: float = float("-inf")) -> int:
    k = flows.same_connection(b_in.conns, b_out.conns, conn)
    d = _direction(b_in, conn, port)
    dk = _direction(b_out, k, port) if k is not None else 0
    pk = b_in.packets
    mask = flows.flow_mask(pk, conn, d) & (pk["ts"] >= after)
    return flows.segments_missing(pk, conn, d, b_out.packets, k, dk, within=mask)


def _burst_times(client: Capture, b_in: Capture, conn_c: int, conn_i: int, port: int, t_from: float,
                 t_to: float) -> Optional[tuple[float, float]]:
    """(first data byte leaving the server, last new byte at the client) of the data the
    connection carried between two times."""
    pi, pc = b_in.packets, client.packets
    di, dc = _direction(b_in, conn_i, port), _direction(client, conn_c, port)
    sent = flows.flow_mask(pi, conn_i, di) & (pi["payload"] > 0) & (pi["ts"] >= t_from) & (pi["ts"] < t_to)
    got = flows.flow_mask(pc, conn_c, dc) & (pc["newbytes"] > 0) & (pc["ts"] >= t_from) & (pc["ts"] < t_to)
    if not sent.any() or not got.any():
        return None
    return float(pi["ts"][sent].min()), float(pc["ts"][got].max())


def _bulk_trace(b_in: Capture, conns: np.ndarray, port: int, t0: float) -> dict:
    """Sequence trace of the busiest bulk transfer around t0 (what its server sent)."""
    if len(conns) == 0:
        return {"t": [], "seq": [], "retx": []}
    conn = flows.largest(b_in.conns, conns)
    d = _direction(b_in, conn, port)
    pk = b_in.packets
    m = flows.flow_mask(pk, conn, d) & (pk["payload"] > 0) & (pk["ts"] >= t0 - TRACE_BEFORE_S) & \
        (pk["ts"] <= t0 + TRACE_AFTER_S)
    ts, seq, retx = pk["ts"][m], pk["seq"][m].astype(np.int64), pk["retx"][m].astype(bool)
    if ts.size == 0:
        return {"t": [], "seq": [], "retx": []}
    rel = (seq - int(seq[0])) % 2 ** 32
    keep = np.zeros(ts.size, dtype=bool)
    keep[::max(1, -(-ts.size // MAX_TRACE_POINTS))] = True
    keep |= retx
    return {"t": np.round(ts[keep] - t0, 6).tolist(), "seq": rel[keep].astype(int).tolist(),
            "retx": retx[keep].astype(int).tolist()}


def burst_metrics(run_dir: Path, spec: dict, mss: int) -> dict:
    caps = {k: load(Path(run_dir) / CAPTURE_FILES[k]) for k in ("client", "bneck-in", "bneck-out")}
    client, b_in, b_out = caps["client"], caps["bneck-in"], caps["bneck-out"]
    port = int(spec["server_port"])
    bc = flows.opened_in_capture(client.conns, flows.between(client.conns, spec["bursty"]["client_ip"],
                                                  spec["bursty"]["server_ip"], port))
    bi = flows.opened_in_capture(b_in.conns, flows.between(b_in.conns, spec["bursty"]["client_ip"],
                                                spec["bursty"]["server_ip"], port))
    if len(bc) != 1 or len(bi) != 1:
        raise UserError(f"{run_dir}: expected one bursty connection in the captures, found {len(bc)} and {len(bi)}")
    conn_c, conn_i = int(bc[0]), int(bi[0])
    req = spec["requests"]
    t2 = float(req[1]["sent"])
    first = _burst_times(client, b_in, conn_c, conn_i, port, float(req[0]["sent"]), t2)
    second = _burst_times(client, b_in, conn_c, conn_i, port, t2, math.inf)
    if first is None or second is None:
        raise UserError(f"{run_dir}: a burst of the bursty connection is missing from the captures")
    di = _direction(b_in, conn_i, port)
    restart = flows.first_flight(b_in.packets, conn_i, di, mss, after=t2)
    bulk_i = flows.opened_in_capture(b_in.conns, flows.between(b_in.conns, spec["bulk"]["client_ip"],
                                                               spec["bulk"]["server_ip"], port))
    return {
        "burst1_s": first[1] - first[0], "burst2_s": second[1] - second[0],
        "burst2_request_s": second[1] - t2, "burst2_start": second[0],
        "restart_window_segments": restart["segments"],
        "bursty_lost_pkts": _lost(b_in, b_out, conn_i, port),
        "bursty_lost_burst2_pkts": _lost(b_in, b_out, conn_i, port, after=t2),
        "bursty_retx_pkts": flows.retransmitted_segments(b_in.conns, conn_i, di),
        "bulk_connections": int(len(bulk_i)),
        "bulk_lost_pkts": int(sum(_lost(b_in, b_out, int(c), port) for c in bulk_i)),
        "bulk_max_in_flight_bytes": max((flows.max_in_flight(b_in.packets, int(c), _direction(b_in, int(c), port))
                                         for c in bulk_i), default=0),
        "bulk_lost_burst2_pkts": int(sum(_lost(b_in, b_out, int(c), port, after=second[0]) for c in bulk_i)),
        "bulk_trace": _bulk_trace(b_in, bulk_i, port, second[0]),
        "flows": {"bursty": {"first_flight": flows.first_flight(b_in.packets, conn_i, di, mss)},
                  "bulk": {"first_flights": [flows.first_flight(b_in.packets, int(c), _direction(b_in, int(c), port),
                                                                mss) for c in bulk_i]}},
    }


def crowd_metrics(run_dir: Path, spec: dict, mss: int) -> dict:
    caps = {k: load(Path(run_dir) / CAPTURE_FILES[k]) for k in ("client", "bneck-in", "bneck-out")}
    client, b_in, b_out = caps["client"], caps["bneck-in"], caps["bneck-out"]
    port = int(spec["server_port"])
    fetches, flights = [], {"variant": [], "other": []}
    for f in spec["fetches"]:
        c = flows.with_endpoint(client.conns, f["client_ip"], int(f["local_port"]))
        if c is None:
            raise UserError(f"{run_dir}: {f['client']}'s {f['phase']} connection is missing from the capture")
        dc = _direction(client, c, port)
        syn = flows.syn_time(client.conns, c)
        end = flows.last_new_data_time(client.packets, c, dc)
        i = flows.same_connection(client.conns, b_in.conns, c)
        lost = _lost(b_in, b_out, i, port) if i is not None else None
        fetches.append({"client": f["client"], "phase": f["phase"], "half": f["half"], "fct_s": end - syn,
                        "lost_pkts": lost})
        if i is not None and f["phase"] == "first":
            flights[f["half"]].append(flows.first_flight(b_in.packets, i, _direction(b_in, i, port), mss))
    crowd = {h: [x["fct_s"] for x in fetches if x["phase"] == "crowd" and x["half"] == h] for h in ("variant", "other")}
    lost = {h: sum(x["lost_pkts"] or 0 for x in fetches if x["phase"] == "crowd" and x["half"] == h)
            for h in ("variant", "other")}
    return {"fetches": fetches, "crowd_variant_s": float(np.mean(crowd["variant"])),
            "crowd_other_s": float(np.mean(crowd["other"])), "crowd_variant_lost_pkts": lost["variant"],
            "crowd_other_lost_pkts": lost["other"],
            "flows": {"crowd": {"first_flights": flights["variant"]}, "others": {"first_flights": flights["other"]}}}


def measured(r: RunRecord) -> float:
    """The figure the paper plots: second-burst completion, or the crowd's variant half."""
    m = r.metrics
    return m["crowd_variant_s"] if "crowd_variant_s" in m else m["burst2_s"]


FCT = Compared(column="fct", name="fct_s", label="completion", unit="s", get=measured, rtt_floor=True)
OTHER = Compared(column="other_half", name="other_half_s", label="other half", unit="s",
                 get=lambda r: r.metrics.get("crowd_other_s", float("nan")))
COLUMNS = ["fct_mean_s", "fct_median_s", "fct_ci_low_s", "fct_ci_high_s", "loss_mean_pkts", "retx_mean_pkts",
           "fairness_median", "fct_se_s", "burst1_mean_s", "burst2_request_mean_s", "restart_window_mean_segs",
           "bursty_lost_burst2_mean_pkts", "bulk_lost_mean_pkts", "bulk_lost_burst2_mean_pkts",
           "other_half_mean_s", "other_half_ci_low_s", "other_half_ci_high_s",
           "fct_diff_s", "fct_diff_ci_low_s", "fct_diff_ci_high_s", "fct_ratio", "fct_significant",
           "fct_within_one_rtt", "other_half_diff_s", "other_half_ratio", "other_half_significant",
           "anova_fct_p", "rtt_s", "rate_bps", "sweep_param", "sweep_value"]


class BurstyAnalysis(WorkloadAnalysis):
    name = "bursty"
    columns = COLUMNS
    compared = (FCT,)
    described = (OTHER,)
    display_headers = ["profile", "variant", "runs", "completion mean", "± s.e.", "restart window",
                       "bursty lost", "bulk lost", "other half", "Δ vs baseline"]

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        mss = run_mss(meta)
        spec = meta["spec"]
        return crowd_metrics(run_dir, spec, mss) if spec["mode"] == "flashcrowd" else burst_metrics(run_dir, spec, mss)

    def describe(self, runs: list[RunRecord]) -> Row:
        xs = [measured(r) for r in runs]
        crowd = "crowd_variant_s" in runs[0].metrics

        def mean_of(key: str) -> Optional[float]:
            vals = [r.metrics[key] for r in runs if r.metrics.get(key) is not None]
            return stats.mean(vals) if vals else None
        row = {**describe_metric(FCT, runs),
               "fct_se_s": float(np.std(xs, ddof=1) / math.sqrt(len(xs))) if len(xs) > 1 else None,
               "loss_mean_pkts": mean_of("crowd_variant_lost_pkts" if crowd else "bursty_lost_pkts"),
               "retx_mean_pkts": mean_of("bursty_retx_pkts"),
               "burst1_mean_s": mean_of("burst1_s"), "burst2_request_mean_s": mean_of("burst2_request_s"),
               "restart_window_mean_segs": mean_of("restart_window_segments"),
               "bursty_lost_burst2_mean_pkts": mean_of("bursty_lost_burst2_pkts"),
               "bulk_lost_mean_pkts": mean_of("bulk_lost_pkts"),
               "bulk_lost_burst2_mean_pkts": mean_of("bulk_lost_burst2_pkts")}
        if crowd:
            row.update(describe_metric(OTHER, runs))
        return row

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        out = compare_metric(FCT, runs, base)
        if "crowd_other_s" in runs[0].metrics and "crowd_other_s" in base[0].metrics:
            out.update(compare_metric(OTHER, runs, base))
        return out

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text, format_seconds

        def num(key: str, fmt: str) -> str:
            return "" if row.get(key) is None else format(row[key], fmt)
        return [cell_label(row), row["variant"], str(row["runs"]), format_seconds(row["fct_mean_s"]),
                "" if row["fct_se_s"] is None else format_seconds(row["fct_se_s"]),
                num("restart_window_mean_segs", ".1f"), num("loss_mean_pkts", ".1f"), num("bulk_lost_mean_pkts", ".1f"),
                "" if row.get("other_half_mean_s") is None else format_seconds(row["other_half_mean_s"]),
                change_text(row, FCT)]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        result = []
        for profile in dict.fromkeys(p for p, _ in summary.ordered_cells(campaign, records)):
            mine = [r for r in rows if r["profile"] == profile]
            stem = plots.file_stem(profile)
            path = out / f"bursty_{stem}.png"
            plots.save(_completion_figure(profile, mine, colours), path)
            result.append(Plot("bursty", profile, None, path,
                               "Completion time of the measured burst (mean ± standard error over the runs) "
                               "against the swept parameter, as the paper's Figs. 2-4."))
            runs = [r for r in records if r.profile == profile and r.metrics.get("bulk_trace", {}).get("t")]
            if runs:
                path = out / f"bulk_trace_{stem}.png"
                plots.save(_trace_figure(profile, runs, colours), path)
                result.append(Plot("bulk_trace", profile, None, path,
                                   "Sequence trace of a bulk transfer around the second burst's start (t = 0) in "
                                   "the run with the most bulk losses of each variant, as the paper's Fig. 5."))
        return result


def _completion_figure(profile: str, rows: list[Row], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    param = next((r["sweep_param"] for r in rows if r.get("sweep_param")), None)
    for v in colours:
        mine = sorted((r for r in rows if r["variant"] == v), key=lambda r: r.get("sweep_value") or 0)
        if not mine:
            continue
        xs = [r.get("sweep_value") or 0 for r in mine]
        ax.errorbar(xs, [r["fct_mean_s"] for r in mine], yerr=[r["fct_se_s"] or 0 for r in mine], marker="o",
                    capsize=3, color=colours[v], label=v)
    ax.set_xlabel(param or "(no sweep)")
    ax.set_ylabel("completion time (s)")
    ax.set_title(f"{profile}: completion time of the measured burst", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _trace_figure(profile: str, runs: list[RunRecord], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    for v in colours:
        mine = [r for r in runs if r.variant == v]
        if not mine:
            continue
        run = max(mine, key=lambda r: (r.metrics.get("bulk_lost_burst2_pkts") or 0, r.run_id))
        tr = run.metrics["bulk_trace"]
        t, seq = np.asarray(tr["t"]), np.asarray(tr["seq"]) / 1000
        ax.plot(t, seq, ".", ms=2, color=colours[v], label=f"{v} ({run.run_id})")
        retx = np.asarray(tr["retx"], dtype=bool)
        if retx.any():
            ax.plot(t[retx], seq[retx], "x", ms=5, color=colours[v])
    ax.axvline(0, color="#999999", lw=0.8, ls=":")
    ax.set_xlabel("time since the second burst started (s)")
    ax.set_ylabel("bulk sequence number (KB, relative)")
    ax.set_title(f"{profile}: a bulk transfer around a fast start", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


ANALYSIS = BurstyAnalysis()
