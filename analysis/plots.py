"""Figure builders for campaign reports, after the Blitzstart paper's Figs. 2-4 and the
Quick-Start papers' figures. Which figures a campaign gets is the workload analysis's
choice (analysis/workloads/); these functions draw them:

- per profile: CDFs of FCT, fairness ratio and lost packets per variant, one row per
  transfer size (Figs. 2 and 4);
- per (profile, size): rolling-average throughput of the short and the long flow in
  the median-FCT run of each variant (Fig. 3);
- per profile: FCT box plots with the individual runs on top, one panel per size;
- for campaigns whose flows requested Quick-Start: per profile the speedup T_baseline ÷
  T_variant vs transfer size (the Linux paper's Fig. 11) and, where the flow ran alone,
  the relative improvement next to Equation 2 of the Allman/Floyd/Sarolahti paper (its
  Figs. 2-3); per (profile, size) the time-sequence trace of each variant's median-FCT
  run (the Linux paper's Figs. 9-10);
- for campaigns with a swept workload parameter (the offered load), instead of the above
  (which would mix the sweep's points): per (profile, size) the Quick-Start approval and
  failure ratios, link utilisation, drop rate and mean FCT vs that parameter, one line per
  variant (the Quick-Start paper's Figs. 4, 5 and 8).

A variant keeps its colour in every figure (assigned once from the campaign's variant
order), so figures can be read side by side. Figures are built on matplotlib's
object API with the Agg canvas, so no display or pyplot global state is involved.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import scheme_events, stats
from analysis.transfer_model import relative_improvement
from config.sizes import size_label
from results.campaign import RunRecord
from results.store import write_atomically
from wire.quic_report import udp_payload
from wire.quickstart import qs_window_segments
from wire.tcpip import TCPIP_HEADERS, tcp_mss

Row = dict[str, Any]

LONG_FLOW_COLOUR = "#555555"
QUEUE_COLOUR = "#9a9a9a"
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
DPI = 110


def variant_colours(variants: list[str]) -> dict[str, str]:
    """Colour per variant in the given order (baseline first keeps it blue everywhere)."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def server_iw(rec: RunRecord) -> Optional[int]:
    """The initial window the variant configured on its server (None: the end-host default)."""
    server = ((rec.meta.get("variant_definition") or {}).get("roles") or {}).get("server") or {}
    iw = server.get("iw")
    return int(iw) if iw else None


def speedups(rows: list[tuple[int, list[RunRecord]]], variant: str, baseline: str) -> list[tuple[int, float]]:
    """(size, mean FCT of the baseline ÷ mean FCT of `variant`) where both ran."""
    out = []
    for size, runs in rows:
        base = [r.metrics["short"]["fct_s"] for r in runs if r.variant == baseline]
        mine = [r.metrics["short"]["fct_s"] for r in runs if r.variant == variant]
        if base and mine:
            out.append((size, stats.mean(base) / stats.mean(mine)))
    return out


def model_windows(runs: list[RunRecord], variant: str, baseline: str) -> Optional[tuple[float, float]]:
    """Equation 2's two windows in packets for `variant` against the slow-start baseline:
    the Quick-Start window of the median approved rate (Equation 1) and the baseline's
    initial window (the kernel's 10 when the variant left it alone). None when no run of
    `variant` was approved."""
    approved = [r for r in runs if r.variant == variant and (r.metrics.get("quickstart") or {}).get("approved")]
    base = [r for r in runs if r.variant == baseline]
    if not approved or not base:
        return None
    rec = approved[0]
    rate = stats.median([r.metrics["quickstart"]["approved_bps"] for r in approved])
    mss = tcp_mss(rec.mtu)
    return qs_window_segments(rate, rec.rtt_s, mss, TCPIP_HEADERS), float(server_iw(base[0]) or 10)


def speedup_figure(profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
                   colours: dict[str, str], baseline: str) -> Figure:
    """Left: T_baseline ÷ T_variant vs size, one line per variant (Scharf Fig. 11). Right,
    when every flow ran alone: the relative improvement 1 − T_variant ÷ T_baseline of the
    approved Quick-Start variants, with Equation 2's model dashed in the same colour."""
    runs_all = [r for _, runs in rows for r in runs]
    alone = all(r.metrics.get("long") is None for r in runs_all)
    fig = Figure(figsize=(12 if alone else 6.5, 4.3), layout="constrained")
    axes = fig.subplots(1, 2 if alone else 1, squeeze=False)[0]
    ax = axes[0]
    for variant in variants:
        if variant == baseline:
            continue
        points = speedups(rows, variant, baseline)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colours[variant],
                    label=variant)
    ax.axhline(1.0, color="#999999", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("transfer size (bytes)")
    ax.set_ylabel(f"speedup T({baseline}) ÷ T(variant)")
    ax.set_title(f"{profile}: speedup over {baseline} (mean FCT)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if alone:
        _improvement_axes(axes[1], profile, rows, variants, colours, baseline)
    return fig


def _improvement_axes(ax: Axes, profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
                      colours: dict[str, str], baseline: str) -> None:
    runs_all = [r for _, runs in rows for r in runs]
    sizes = [size for size, _ in rows]
    grid = np.geomspace(min(sizes), max(sizes), 60) if len(sizes) > 1 else np.asarray(sizes, dtype=float)
    drawn = False
    for variant in variants:
        windows = None if variant == baseline else model_windows(runs_all, variant, baseline)
        if windows is None:
            continue
        rec = runs_all[0]
        points = speedups(rows, variant, baseline)
        ax.plot([p[0] for p in points], [1 - 1 / p[1] for p in points], marker="o", color=colours[variant],
                label=f"{variant} measured")
        model = [relative_improvement(int(x), tcp_mss(rec.mtu), rec.mtu, rec.rate_bps, rec.rtt_s,
                                      *windows) for x in grid]
        ax.plot(grid, model, ls="--", color=colours[variant],
                label=f"Equation 2 (W {windows[0]:.0f} vs {windows[1]:.0f} pkts)")
        drawn = True
    if not drawn:
        _no_data(ax, "no approved Quick-Start request")
    ax.set_xscale("log")
    ax.set_xlabel("transfer size (bytes)")
    ax.set_ylabel("relative improvement 1 − T(QS) ÷ T(SS)")
    ax.set_title(f"{profile}: relative improvement vs Equation 2", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def time_sequence_figure(profile: str, size: int, runs: list[RunRecord], variants: list[str],
                         colours: dict[str, str]) -> Figure:
    """Sequence number vs time of the server's data in each variant's median-FCT run,
    overlaid as in Scharf's Figs. 9-10; retransmissions marked ×."""
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    drawn = False
    for variant in variants:
        mine = [r for r in runs if r.variant == variant]
        if not mine:
            continue
        run = median_fct_run(mine)
        series = run.metrics.get("time_sequence")
        if not series or not series["t"]:
            continue
        t, seq = np.asarray(series["t"]), np.asarray(series["seq"]) / 1000
        ax.plot(t, seq, ".", ms=2.5, color=colours[variant], label=f"{variant} (run {run.run_id})")
        retx = np.asarray(series["retx"], dtype=bool)
        if retx.any():
            ax.plot(t[retx], seq[retx], "x", ms=5, color=colours[variant])
        drawn = True
    if not drawn:
        _no_data(ax, "no time-sequence series in these runs")
    ax.set_xlabel("time since the SYN (s)")
    ax.set_ylabel("sequence number (KB, relative)")
    ax.set_title(f"{profile}, {size_label(size)}: time-sequence of the median-FCT run", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def cdf_figure(profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
               colours: dict[str, str], baseline: Optional[str]) -> Figure:
    """FCT, fairness-ratio and lost-packet CDFs per variant, and CE-mark ones where a queue
    marked the short flow (ECN); one row per transfer size."""
    columns = [
        ("flow completion time (s)", lambda r: r.metrics["short"]["fct_s"]),
        ("fairness ratio (short ÷ long bytes)", lambda r: r.metrics.get("fairness_ratio")),
        ("lost packets of the short flow", lambda r: r.metrics["short"]["lost_pkts"]),
    ]
    if any(r.metrics["short"].get("ce_pkts") for _, runs in rows for r in runs):
        columns.append(("CE-marked packets of the short flow", lambda r: r.metrics["short"].get("ce_pkts")))
    fig = Figure(figsize=(13 * len(columns) / 3, 3.3 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), len(columns), squeeze=False)
    for (size, runs), ax_row in zip(rows, axes):
        for (label, value), ax in zip(columns, ax_row):
            drawn = False
            for variant in variants:
                xs = [value(r) for r in runs if r.variant == variant and value(r) is not None]
                if xs:
                    name = f"{variant} (baseline)" if variant == baseline else variant
                    _cdf(ax, xs, name, colours[variant], dashed=variant == baseline)
                    drawn = True
            if not drawn:
                _no_data(ax, "no competing flow" if "fairness" in label else "no data")
            elif "fairness" in label:
                ax.axvline(1.0, color="#999999", lw=0.8, ls=":")  # equal share
            ax.set_title(f"{profile}, {size_label(size)}: {label.split(' (')[0]}", fontsize=10)
            ax.set_xlabel(label)
            ax.set_ylabel("CDF of runs")
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    return fig


def throughput_figure(profile: str, size: int, runs: list[RunRecord], variants: list[str],
                      colours: dict[str, str]) -> Figure:
    """Both flows' rolling-average throughput in each variant's median-FCT run."""
    present = [v for v in variants if any(r.variant == v for r in runs)]
    fig = Figure(figsize=(10, 2.6 * len(present)), layout="constrained")
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for variant, ax in zip(present, axes):
        run = median_fct_run([r for r in runs if r.variant == variant])
        tp = run.metrics["throughput"]
        if tp["t"]:
            ax.plot(tp["t"], tp["short_mbps"], color=colours[variant], lw=1.4,
                    label=f"short flow ({variant})")
            if any(tp["long_mbps"]):
                ax.plot(tp["t"], tp["long_mbps"], color=LONG_FLOW_COLOUR, lw=1.2, label="long flow")
        else:
            _no_data(ax, "no throughput series")
        ax.axhline(run.rate_bps / 1e6, color="#999999", lw=0.8, ls=":", label="bottleneck rate")
        _median_run_panel(ax, profile, size, run, colours[variant], "throughput (Mbit/s)", "upper right")
        _scheme_timeline(ax, run, colours[variant])
        _queue_delay(ax, tp)
    axes[-1].set_xlabel("time since the short flow's SYN (s)")
    return fig


def _queue_delay(ax: Axes, tp: dict) -> None:
    """The bottleneck's queueing delay on a right-hand axis of a throughput panel, where the
    run's analysis read it (grey: the queue, not a flow)."""
    series = tp.get("queue_ms") or []
    if not any(x is not None for x in series):
        return
    right = ax.twinx()
    right.plot(tp["t"], [np.nan if x is None else x for x in series], color=QUEUE_COLOUR, lw=0.8, alpha=0.8)
    right.set_ylabel("queueing delay (ms)", color=QUEUE_COLOUR)
    right.set_ylim(bottom=0)
    right.tick_params(axis="y", colors=QUEUE_COLOUR, labelsize=8)


def _scheme_timeline(ax: Axes, run: RunRecord, colour: str, most: int = 12) -> None:
    """The scheme's own decisions for the short flow (its phases, exits, round choices), as
    logged by its server part, marked where they fell: the timeline beside the throughput."""
    short = run.metrics.get("short") or {}
    if short.get("syn_ts") is None or short.get("end_ts") is None:
        return
    for t, text in scheme_events.connection_events(run.meta, run.metrics, short["syn_ts"], short["end_ts"])[:most]:
        ax.axvline(t, color=colour, lw=0.7, ls=":", alpha=0.8)
        ax.annotate(text, (t, 0.98), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                    va="top", ha="right", color=colour)


def _median_run_panel(ax: Axes, profile: str, size: int, run: RunRecord, colour: str, ylabel: str,
                      legend: str) -> None:
    """A variant's median-FCT run panel: its FCT marked, titled by cell and run."""
    fct = run.metrics["short"]["fct_s"]
    ax.axvline(fct, color=colour, lw=0.8, ls="--", label=f"FCT {fct:.3g} s")
    ax.set_title(f"{profile}, {size_label(size)}: {run.variant}, run {run.run_id} (median FCT)", fontsize=10)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc=legend)


def startup_figure(profile: str, size: int, run: RunRecord, colour: str) -> Figure:
    """After the Blitzstart paper's Fig. 1: the long flow's first second on the idle link
    (top), then both flows once the short one starts (bottom), rolling over one RTT (thin)
    and over 1 s (thick, as the paper's darker lines)."""
    tp, fct = run.metrics["throughput"], run.metrics["short"]["fct_s"]
    rate = run.rate_bps / 1e6
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    start = tp.get("long_start")
    if start:
        top.plot(start["t"], start["mbps"], color=LONG_FLOW_COLOUR, lw=1.4, label="long flow")
    else:
        _no_data(top, "no series of the long flow's start")
    top.set_title(f"{profile}: the long flow alone on the idle link, from its first packet "
                  f"(run {run.run_id})", fontsize=10)
    top.set_xlabel("time since the long flow's first packet (s)")
    bottom.set_title(f"{profile}, {size_label(size)}: {run.variant} enters (median-FCT run)", fontsize=10)
    t = np.asarray(tp["t"])
    if len(t) > 1:
        # The mean over the trailing second, from the first full second of samples on.
        n = max(1, int(round(1.0 / float(np.median(np.diff(t))))))
        for key, c, label in (("short_mbps", colour, f"short flow ({run.variant})"),
                              ("long_mbps", LONG_FLOW_COLOUR, "long flow")):
            series = np.asarray(tp[key])
            bottom.plot(t, series, color=c, lw=0.6, alpha=0.45)
            if len(series) >= n:
                bottom.plot(t[n - 1:], np.convolve(series, np.ones(n) / n, mode="valid"), color=c, lw=2.0,
                            label=f"{label}, 1 s average")
    else:
        _no_data(bottom, "no throughput series")
    bottom.axvline(fct, color=colour, lw=0.8, ls="--", label=f"FCT {fct:.3g} s")
    bottom.set_xlabel("time since the short flow's SYN (s)")
    for ax in (top, bottom):
        ax.axhline(rate, color="#999999", lw=0.8, ls=":", label="bottleneck rate")
        ax.set_ylabel(f"throughput (Mbit/s, over {tp.get('window_s', 0) * 1e3:.0f} ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    return fig


def cwnd_figure(profile: str, size: int, runs: list[RunRecord], variants: list[str],
                colours: dict[str, str]) -> Figure:
    """Both senders' congestion windows from their qlogs in each variant's median-FCT run,
    with where each left slow start (runs that recorded them: the workload's `qlog`; a stack
    that writes none, s2n-quic, gets no panel)."""
    present = [v for v in variants if any(r.variant == v for r in runs)
               and not all((r.metrics.get("flows") or {}).get("short", {}).get("stack_without_qlog")
                           for r in runs if r.variant == v)]
    fig = Figure(figsize=(10, 2.6 * len(present)), layout="constrained")
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for variant, ax in zip(present, axes):
        run = median_fct_run([r for r in runs if r.variant == variant])
        flows = run.metrics.get("flows") or {}
        drawn = False
        for name, colour, label in (("short", colours[variant], f"short flow ({variant})"),
                                    ("long", LONG_FLOW_COLOUR, "long flow")):
            trace = (flows.get(name) or {}).get("sender")
            if not trace:
                continue
            # The windows count datagrams: a stack's own size, else those of the path's MTU.
            mss = trace.get("datagram_bytes") or udp_payload(run.mtu)
            ax.plot(trace["cwnd"]["t"], np.asarray(trace["cwnd"]["bytes"]) / mss, color=colour, lw=1.2,
                    drawstyle="steps-post", label=label)
            end = trace.get("exit")
            if end and end["by"] != "hint" and end["cwnd_bytes"] is not None:
                ax.plot([end["t_s"]], [end["cwnd_bytes"] / mss], marker="o", color=colour, ls="none",
                        label=f"slow start ends ({end['by']}, {end['lost_before']} lost before)")
            drawn = True
        if not drawn:
            _no_data(ax, "no qlog in this run")
        _median_run_panel(ax, profile, size, run, colours[variant], "cwnd (datagrams)", "best")
    axes[-1].set_xlabel("time since the short flow's first datagram (s)")
    return fig


def fct_box_figure(profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
                   colours: dict[str, str], value=lambda r: r.metrics["short"]["fct_s"]) -> Figure:
    """FCT (or `value`) distribution per variant: box plot with every run drawn as a point."""
    fig = Figure(figsize=(max(4.5 * len(rows), 6), 4.2), layout="constrained")
    axes = fig.subplots(1, len(rows), squeeze=False)[0]
    jitter = np.random.default_rng(0)  # fixed, so re-analysis redraws the same figure
    for (size, runs), ax in zip(rows, axes):
        present = [v for v in variants if any(r.variant == v for r in runs)]
        samples = [[value(r) for r in runs if r.variant == v] for v in present]
        positions = np.arange(1, len(present) + 1)
        boxes = ax.boxplot(samples, positions=positions, widths=0.55, patch_artist=True,
                           showfliers=False, medianprops={"color": "black"})
        for box, variant in zip(boxes["boxes"], present):
            box.set(facecolor=colours[variant], alpha=0.35, edgecolor=colours[variant])
        for pos, xs, variant in zip(positions, samples, present):
            ax.scatter(pos + jitter.uniform(-0.15, 0.15, len(xs)), xs, s=12,
                       color=colours[variant], zorder=3)
        ax.set_xticks(positions, present, rotation=20, ha="right")
        ax.set_title(f"{profile}, {size_label(size)}: FCT per variant", fontsize=10)
        ax.set_ylabel("flow completion time (s)")
        ax.grid(axis="y", alpha=0.3)
    return fig


LOAD_PANELS = (("qs_approval_ratio", "Quick-Start approval ratio"),
               ("qs_failure_ratio", "Quick-Start failure ratio"),
               ("utilisation_mean", "link utilisation"),
               ("drop_rate_mean", "drop rate at the bottleneck"),
               ("fct_mean_s", "mean FCT (s)"))


def load_figure(profile: str, size: int, rows: list[Row], variants: list[str], colours: dict[str, str]) -> Figure:
    """Summary figures vs the swept parameter, one line per variant, one panel per figure."""
    fig = Figure(figsize=(4.2 * len(LOAD_PANELS), 3.8), layout="constrained")
    axes = fig.subplots(1, len(LOAD_PANELS), squeeze=False)[0]
    param = next((r["sweep_param"] for r in rows if r["sweep_param"]), "sweep")
    for (column, label), ax in zip(LOAD_PANELS, axes):
        drawn = False
        for variant in variants:
            points = sorted((r["sweep_value"], r[column]) for r in rows
                            if r["variant"] == variant and r[column] is not None and r["sweep_value"] is not None)
            if points:
                ax.plot([x for x, _ in points], [y for _, y in points], marker="o", color=colours[variant],
                        label=variant)
                drawn = True
        if not drawn:
            _no_data(ax, "no data")
        ax.set_xlabel(param)
        ax.set_ylabel(label)
        ax.set_title(f"{profile}, {size_label(size)}: {label}", fontsize=9)
        ax.grid(alpha=0.3)
        if column != "fct_mean_s":
            ax.set_ylim(bottom=0)
    axes[-1].legend(fontsize=8)           # every variant has an FCT; the baseline no approvals
    return fig


def sweep_line(ax: Axes, runs: list[RunRecord], variant: str, colour: str, get: Callable[[RunRecord], Optional[float]],
               scale: float = 1.0, label: Optional[str] = None, **style: Any) -> None:
    """One variant's per-run figure against the swept parameter: the mean over the runs at
    each sweep value with its 95 % interval (runs where `get` gives None are left out)."""
    points = sorted({r.sweep_value for r in runs if r.sweep_value is not None})
    means, lows, highs = [], [], []
    for x in points:
        xs = [v * scale for r in runs if r.variant == variant and r.sweep_value == x
              for v in [get(r)] if v is not None]
        ci = stats.mean_ci(xs) if xs else None
        m = stats.mean(xs) if xs else float("nan")
        means.append(m)
        lows.append(m - ci[0] if ci else 0.0)
        highs.append(ci[1] - m if ci else 0.0)
    if all(np.isnan(means)):
        return                                  # nothing to draw for this variant (e.g. no Quick-Start)
    ax.errorbar(points, means, yerr=[lows, highs], marker="o", capsize=3, color=colour, label=label or variant,
                **style)


def median_fct_run(runs: list[RunRecord]) -> RunRecord:
    """The run at the median FCT (the lower middle one for an even count), as in Fig. 3."""
    ordered = sorted(runs, key=lambda r: (r.metrics["short"]["fct_s"], r.run_id))
    return ordered[(len(ordered) - 1) // 2]


def _cdf(ax: Axes, values: list[float], label: str, colour: str, dashed: bool) -> None:
    xs = np.sort(np.asarray(values, dtype=float))
    ys = np.arange(1, xs.size + 1) / xs.size
    ax.step(np.concatenate([[xs[0]], xs]), np.concatenate([[0.0], ys]), where="post",
            color=colour, lw=1.6 if dashed else 1.3, ls="-." if dashed else "-", label=label)


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777")
    ax.set_xticks([])


def save(fig: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    write_atomically(path, buffer.getvalue())


def file_stem(name: str) -> str:
    """A profile name made safe for a file name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
