"""Analysis of the arrivals workload: connection duration and aggregate drop rate per
direction (the Jump Start slides' pair of plots against the flows' inter-arrival time).

Per flow, found in the capture next to its requester by the client's local port (so the
captures and the client's log match one to one, which is checked): its duration from the
requester's SYN to the last new data byte arriving there (the SYN is included, as ns-2
counts a connection); its bytes; its data segments that reached the bottleneck queue of
its direction and those that did not leave it (the two captures around that queue). The
aggregate drop rate of a direction is the sum of the lost over the sum of the arrived
segments of its flows; the link's utilisation is the wire bits of those flows' data that
left the queue over rate × the time from the first arrival to the last flow's end. How late
each connection opened against its schedule is kept too (the client's clock, and the SYN
in the capture), which the open-loop benchmark reads.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure

from analysis import flows, plots, stats, summary
from analysis.packets import load
from analysis.workloads.base import (Compared, Plot, Row, WorkloadAnalysis, compare_metric,
                                     describe_metric)
from machine.errors import UserError
from results.campaign import RunRecord
from results.schema import CAPTURE_FILES, UPSTREAM_CAPTURE_FILES
from wire.tcpip import ETH_HEADER, TCPIP_HEADERS, run_mss

# Per direction: the capture next to the requesters, before and after the direction's queue.
POINTS = {"down": (CAPTURE_FILES["client"], CAPTURE_FILES["bneck-in"], CAPTURE_FILES["bneck-out"]),
          "up": (UPSTREAM_CAPTURE_FILES["server"], UPSTREAM_CAPTURE_FILES["bneck-up-in"],
                 UPSTREAM_CAPTURE_FILES["bneck-up-out"])}


def _pct(xs: list[float], q: float) -> Optional[float]:
    return float(np.percentile(xs, q)) if xs else None


def direction_metrics(run_dir: Path, d: str, spec: dict, mss: int) -> dict[str, Any]:
    near, b_in, b_out = (load(Path(run_dir) / f) for f in POINTS[d])
    port = int(spec["server_port"])
    ds = spec["directions"][d]
    conns, durations, lost_total, arrived_total, out_bits = [], [], 0, 0, 0
    flights, late_app, late_syn, starts, ends = [], [], [], [], []
    near_ix, in_ix, out_ix = (flows.ConnIndex(x.conns) for x in (near, b_in, b_out))
    req = int(ipaddress.IPv4Address(ds["requester_ip"]))
    for f in ds["fetches"]:
        lport = int(f["local_port"])
        c = near_ix.find(req, lport, float(f["started"]))
        if c is None:
            raise UserError(f"{run_dir}: {d} fetch {f['index']} (port {f['local_port']}) is not in {POINTS[d][0]}")
        dc = flows.direction_from_port(near.conns, c, port)
        syn = flows.syn_time(near.conns, c)
        end = flows.last_new_data_time(near.packets, c, dc)
        got = flows.delivered_bytes(near.conns, c, dc)
        i = in_ix.find(req, lport, syn)
        if i is None:
            raise UserError(f"{run_dir}: {d} fetch {f['index']} is missing before the {d} queue")
        di = flows.direction_from_port(b_in.conns, i, port)
        k = out_ix.find(req, lport, syn)
        dk = flows.direction_from_port(b_out.conns, k, port) if k is not None else 0
        sent = flows.flow_mask(b_in.packets, i, di) & (b_in.packets["payload"] > 0)
        lost = flows.segments_missing(b_in.packets, i, di, b_out.packets, k, dk)
        if k is not None:
            left = flows.flow_mask(b_out.packets, k, dk) & (b_out.packets["payload"] > 0)
            out_bits += int((b_out.packets["payload"][left] + TCPIP_HEADERS + ETH_HEADER).sum()) * 8
        arrived_total += int(sent.sum())
        lost_total += lost
        durations.append(end - syn)
        starts.append(syn)
        ends.append(end)
        late_app.append((float(f["started"]) - float(f["scheduled"])) * 1e3)
        late_syn.append((syn - float(f["scheduled"])) * 1e3)
        flight = flows.first_flight(b_in.packets, i, di, mss)
        disturbed = flows.first_flight_disturbed(b_in.packets, i, di, b_out.packets, k, dk)
        flights.append({**flight, "disturbed": disturbed} if disturbed else flight)
        conns.append({"index": f["index"], "duration_s": end - syn, "bytes": got,
                      "logged_bytes": int(f["bytes"]) + int(f.get("head_bytes", 0)),
                      "lost_pkts": lost, "data_pkts": int(sent.sum())})
    # The capture sees the response's status line and headers too; the client logged both.
    short = [x for x in conns if x["bytes"] != x["logged_bytes"]]
    if short:
        raise UserError(f"{run_dir}: {len(short)} {d} connections delivered other bytes in the capture than the "
                        f"client logged, e.g. {short[0]}")
    span = max(ends) - min(starts)
    rate = float(spec["rate_bps"][d])
    return {"connections": conns, "count": len(conns),
            "duration_mean_s": stats.mean(durations), "duration_median_s": stats.median(durations),
            "lost_pkts": lost_total, "arrived_pkts": arrived_total,
            "drop_rate": lost_total / arrived_total if arrived_total else 0.0,
            "utilisation": out_bits / (rate * span) if span > 0 else None, "span_s": span,
            "lateness_app_ms": {"p50": _pct(late_app, 50), "p99": _pct(late_app, 99), "max": max(late_app)},
            "lateness_syn_ms": {"p50": _pct(late_syn, 50), "p99": _pct(late_syn, 99), "max": max(late_syn)},
            "first_flights": flights}


def run_metrics(run_dir: Path, spec: dict, mss: int) -> dict[str, Any]:
    per = {d: direction_metrics(run_dir, d, spec, mss) for d in spec["directions"]}
    durations = [c["duration_s"] for m in per.values() for c in m["connections"]]
    lost = sum(m["lost_pkts"] for m in per.values())
    arrived = sum(m["arrived_pkts"] for m in per.values())
    return {"directions": {d: {k: v for k, v in m.items() if k != "first_flights"} for d, m in per.items()},
            "duration_mean_s": stats.mean(durations), "duration_median_s": stats.median(durations),
            "drop_rate": lost / arrived if arrived else 0.0, "lost_pkts": lost, "arrived_pkts": arrived,
            "flows": {d: {"first_flights": m["first_flights"]} for d, m in per.items()}}


DURATION = Compared(column="duration", name="duration_mean_s", label="connection duration", unit="s",
                    get=lambda r: r.metrics["duration_mean_s"], rtt_floor=True)
DROPS = Compared(column="drop_rate", name="drop_rate", label="aggregate drop rate", unit="",
                 get=lambda r: r.metrics["drop_rate"])
COLUMNS = [*(m.col(k) for m in (DURATION, DROPS) for k in ("mean", "median", "ci_low", "ci_high")),
           "duration_down_mean_s", "duration_up_mean_s", "drop_rate_down_mean", "drop_rate_up_mean",
           "utilisation_down_mean", "utilisation_up_mean", "lateness_syn_p99_max_ms",
           *(m.col(k) for m in (DURATION, DROPS) for k in ("diff", "diff_ci_low", "diff_ci_high", "ratio",
                                                           "significant")),
           "duration_within_one_rtt", "anova_duration_p", "rtt_s", "rate_bps", "sweep_param", "sweep_value"]


def _dir_mean(runs: list[RunRecord], d: str, key: str) -> Optional[float]:
    xs = [r.metrics["directions"][d][key] for r in runs if d in r.metrics["directions"]
          and r.metrics["directions"][d][key] is not None]
    return stats.mean(xs) if xs else None


class ArrivalsAnalysis(WorkloadAnalysis):
    name = "arrivals"
    columns = COLUMNS
    compared = (DURATION, DROPS)
    display_headers = ["profile", "variant", "runs", "inter-arrival", "duration mean", "95% CI", "down / up",
                       "drop rate", "down / up", "utilisation down", "Δ duration vs baseline"]

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        return run_metrics(run_dir, meta["spec"], run_mss(meta))

    def describe(self, runs: list[RunRecord]) -> Row:
        late = [r.metrics["directions"][d]["lateness_syn_ms"]["p99"] for r in runs for d in r.metrics["directions"]]
        return {**describe_metric(DURATION, runs), **describe_metric(DROPS, runs),
                **{f"duration_{d}_mean_s": _dir_mean(runs, d, "duration_mean_s") for d in ("down", "up")},
                **{f"drop_rate_{d}_mean": _dir_mean(runs, d, "drop_rate") for d in ("down", "up")},
                **{f"utilisation_{d}_mean": _dir_mean(runs, d, "utilisation") for d in ("down", "up")},
                "lateness_syn_p99_max_ms": max(late) if late else None}

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        return {**compare_metric(DURATION, runs, base), **compare_metric(DROPS, runs, base)}

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text, interval_text

        def s(x: Optional[float], fmt: str) -> str:
            return "–" if x is None else format(x, fmt)
        ci = interval_text(row["duration_ci_low_s"], row["duration_ci_high_s"], row["runs"], lambda v: f"{v:.2f}")
        return [cell_label(row), row["variant"], str(row["runs"]), s(row.get("sweep_value"), "g") + " s",
                f"{row['duration_mean_s']:.2f} s", ci,
                f"{s(row['duration_down_mean_s'], '.2f')} / {s(row['duration_up_mean_s'], '.2f')} s",
                f"{row['drop_rate_mean']:.2%}",
                f"{s(row['drop_rate_down_mean'], '.2%')} / {s(row['drop_rate_up_mean'], '.2%')}",
                s(row["utilisation_down_mean"], ".1%"), change_text(row, DURATION)]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        result = []
        for profile in dict.fromkeys(p for p, _ in summary.ordered_cells(campaign, records)):
            mine = [r for r in records if r.profile == profile]
            if not any(r.sweep_value is not None for r in mine):
                continue
            path = out / f"arrivals_{plots.file_stem(profile)}.png"
            plots.save(_sweep_figure(profile, mine, colours), path)
            result.append(Plot("arrivals", profile, None, path,
                               "Against the flows' inter-arrival time (Jump Start slides, light load on the right): "
                               "left the mean connection duration, right the aggregate drop rate, both directions "
                               "pooled; mean over the runs with its 95 % interval."))
        return result


def _sweep_figure(profile: str, runs: list[RunRecord], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for v in [v for v in colours if any(r.variant == v for r in runs)]:
        plots.sweep_line(left, runs, v, colours[v], lambda r: r.metrics["duration_mean_s"])
        plots.sweep_line(right, runs, v, colours[v], lambda r: r.metrics["drop_rate"], scale=100.0)
    left.set_ylabel("mean connection duration (s)")
    left.set_yscale("log")                       # heavy load is 10-50 × light load: both visible
    right.set_ylabel("aggregate drop rate (%)")
    for ax, title in ((left, "connection duration"), (right, "aggregate drop rate")):
        ax.set_xlabel("flow inter-arrival time (s)")
        ax.set_title(f"{profile}: {title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


ANALYSIS = ArrivalsAnalysis()
