"""Analysis of the bulk workload: each flow's goodput and Jain's fairness index.

Goodput is counted at the clients' uplink over the window every flow was sending: from
the last flow's first data byte plus `omit_s` (slow start left out) to the first flow's last
byte. Jain's index J = (Σx)² ÷ (n·Σx²) over the flows' goodputs: 1 when all are equal,
1/n when one flow has everything. Losses and retransmissions come from the two captures
around the bottleneck queue, as for every workload.
"""
from __future__ import annotations

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
from results.schema import CAPTURE_FILES
from wire.tcpip import ETH_HEADER, TCPIP_HEADERS, run_mss


def jain(xs: list[float]) -> Optional[float]:
    """Jain's fairness index of non-negative values (None without any positive one)."""
    total, squares = sum(xs), sum(x * x for x in xs)
    return total * total / (len(xs) * squares) if squares > 0 else None


def run_metrics(run_dir: Path, spec: dict, mss: int) -> dict:
    caps = {k: load(Path(run_dir) / CAPTURE_FILES[k]) for k in ("client", "bneck-in", "bneck-out")}
    client, b_in, b_out = caps["client"], caps["bneck-in"], caps["bneck-out"]
    found = {}
    for f in spec["flows"]:
        conn = flows.largest(client.conns, flows.by_server_port(client.conns, f["server_port"]))
        if conn is None:
            raise UserError(f"{client.path}: no connection to server port {f['server_port']} ({f['name']})")
        d = flows.direction_from_port(client.conns, conn, f["server_port"])
        data = flows.flow_mask(client.packets, conn, d) & (client.packets["newbytes"] > 0)
        if not data.any():
            raise UserError(f"{client.path}: {f['name']} delivered no data")
        found[f["name"]] = (f["server_port"], conn, d, float(client.packets["ts"][data].min()),
                            float(client.packets["ts"][data].max()))
    t0 = max(v[3] for v in found.values()) + float(spec["omit_s"])
    t1 = min(v[4] for v in found.values())
    if t1 <= t0:
        raise UserError(f"{run_dir}: the flows never all sent at once after omit_s {spec['omit_s']} s")
    per_flow = {}
    for name, (port, conn, d, _, _) in found.items():
        j = flows.same_connection(client.conns, b_in.conns, conn)
        k = flows.same_connection(client.conns, b_out.conns, conn)
        dj = flows.direction_from_port(b_in.conns, j, port)
        dk = flows.direction_from_port(b_out.conns, k, port) if k is not None else 0
        per_flow[name] = {
            "goodput_mbps": flows.bytes_in_window(client.packets, conn, d, t0, t1) * 8 / (t1 - t0) / 1e6,
            "bytes": flows.delivered_bytes(client.conns, conn, d),
            "retx_pkts": flows.retransmitted_segments(b_in.conns, j, dj),
            "lost_pkts": flows.segments_missing(b_in.packets, j, dj, b_out.packets, k, dk),
            "first_flight": flows.first_flight(b_in.packets, j, dj, mss),
        }
    goodputs = [f["goodput_mbps"] for f in per_flow.values()]
    ideal = float(spec["rate_bps"]) * mss / (mss + TCPIP_HEADERS + ETH_HEADER) / 1e6
    return {"flows": per_flow, "window_s": t1 - t0, "jain": jain(goodputs),
            "goodput_total_mbps": sum(goodputs), "goodput_min_mbps": min(goodputs),
            "link_share": sum(goodputs) / ideal,
            "retx_pkts": sum(f["retx_pkts"] for f in per_flow.values()),
            "lost_pkts": sum(f["lost_pkts"] for f in per_flow.values())}


JAIN = Compared(column="jain", name="jain", label="Jain's index", unit="", get=lambda r: r.metrics["jain"],
                higher_is_better=True)
GOODPUT = Compared(column="goodput", name="goodput_total_mbps", label="goodput", unit="mbps",
                   get=lambda r: r.metrics["goodput_total_mbps"], higher_is_better=True)
COLUMNS = ["flows", *(m.col(k) for m in (JAIN, GOODPUT) for k in ("mean", "median", "ci_low", "ci_high")),
           "goodput_min_mean_mbps", "link_share_mean", "loss_mean_pkts", "retx_mean_pkts",
           *(m.col(k) for m in (JAIN, GOODPUT) for k in ("diff", "diff_ci_low", "diff_ci_high", "ratio", "significant")),
           "anova_jain_p", "rtt_s", "rate_bps", "sweep_param", "sweep_value"]


class BulkAnalysis(WorkloadAnalysis):
    name = "bulk"
    columns = COLUMNS
    compared = (JAIN, GOODPUT)
    display_headers = ["profile", "variant", "runs", "flows", "Jain mean", "Jain 95% CI", "goodput total",
                       "slowest flow", "link share", "loss", "ΔJain vs baseline"]

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        return run_metrics(run_dir, meta["spec"], run_mss(meta))

    def describe(self, runs: list[RunRecord]) -> Row:
        return {"flows": len(runs[0].metrics["flows"]), **describe_metric(JAIN, runs), **describe_metric(GOODPUT, runs),
                "goodput_min_mean_mbps": stats.mean([r.metrics["goodput_min_mbps"] for r in runs]),
                "link_share_mean": stats.mean([r.metrics["link_share"] for r in runs]),
                "loss_mean_pkts": stats.mean([r.metrics["lost_pkts"] for r in runs]),
                "retx_mean_pkts": stats.mean([r.metrics["retx_pkts"] for r in runs])}

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        return {**compare_metric(JAIN, runs, base), **compare_metric(GOODPUT, runs, base)}

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text, interval_text
        ci = interval_text(row["jain_ci_low"], row["jain_ci_high"], row["runs"], lambda v: f"{v:.3f}")
        return [cell_label(row), row["variant"], str(row["runs"]), str(row["flows"]), f"{row['jain_mean']:.3f}", ci,
                f"{row['goodput_mean_mbps']:.2f} Mbit/s", f"{row['goodput_min_mean_mbps']:.2f} Mbit/s",
                f"{row['link_share_mean']:.1%}", f"{row['loss_mean_pkts']:.1f}", change_text(row, JAIN)]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        result = []
        for profile in dict.fromkeys(p for p, _ in summary.ordered_cells(campaign, records)):
            mine = [r for r in records if r.profile == profile]
            path = out / f"bulk_{plots.file_stem(profile)}.png"
            plots.save(_figure(profile, mine, colours), path)
            result.append(Plot("bulk", profile, None, path, "Left: CDF of Jain's fairness index over the runs; "
                               "right: every flow's goodput in every run, per variant."))
        return result


def _figure(profile: str, runs: list[RunRecord], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    present = [v for v in colours if any(r.variant == v for r in runs)]
    for v in present:
        xs = np.sort([r.metrics["jain"] for r in runs if r.variant == v and r.metrics["jain"] is not None])
        if xs.size:
            left.step(np.concatenate([[xs[0]], xs]), np.arange(xs.size + 1) / xs.size, where="post",
                      color=colours[v], label=v)
    left.set_xlabel("Jain's fairness index")
    left.set_ylabel("CDF of runs")
    left.set_title(f"{profile}: fairness between the flows", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    for i, v in enumerate(present):
        ys = [f["goodput_mbps"] for r in runs if r.variant == v for f in r.metrics["flows"].values()]
        right.scatter(np.full(len(ys), i + 1) + np.linspace(-0.15, 0.15, len(ys)), ys, s=10, color=colours[v])
    right.set_xticks(range(1, len(present) + 1), present, rotation=20, ha="right")
    right.set_ylabel("goodput per flow (Mbit/s)")
    right.set_title(f"{profile}: goodput of every flow", fontsize=10)
    right.grid(axis="y", alpha=0.3)
    return fig


ANALYSIS = BulkAnalysis()
