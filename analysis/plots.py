"""Campaign figures as PNG files, after the Blitzstart paper's Figs. 2-4.

- per profile: CDFs of FCT, fairness ratio and lost packets per variant, one row per
  transfer size (Figs. 2 and 4);
- per (profile, size): rolling-average throughput of the short and the long flow in
  the median-FCT run of each variant (Fig. 3);
- per profile: FCT box plots with the individual runs on top, one panel per size.

A variant keeps its colour in every figure (assigned once from the campaign's variant
order), so figures can be read side by side. Figures are built on matplotlib's
object API with the Agg canvas, so no display or pyplot global state is involved.
"""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.records import RunRecord, size_label
from analysis.summary import ordered_cells, ordered_variants, write_atomically

LONG_FLOW_COLOUR = "#555555"
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
DPI = 110


@dataclass(frozen=True)
class Plot:
    """A written figure and what it shows; size is None for per-profile figures."""

    kind: str  # "cdf", "throughput" or "fct_box"
    profile: str
    size_bytes: Optional[int]
    path: Path


def variant_colours(variants: list[str]) -> dict[str, str]:
    """Colour per variant in the given order (baseline first keeps it blue everywhere)."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def write_plots(campaign_dir: Path | str, campaign: dict[str, Any],
                records: list[RunRecord]) -> list[Plot]:
    """Draw every figure of the campaign into <campaign_dir>/plots/ and list them."""
    out = Path(campaign_dir) / "plots"
    variants = ordered_variants(campaign, records)
    colours = variant_colours(variants)
    baseline = campaign.get("baseline")
    by_cell: dict[tuple[str, int], list[RunRecord]] = defaultdict(list)
    for rec in records:
        by_cell[(rec["profile"], rec["size_bytes"])].append(rec)
    cells = ordered_cells(campaign, records)
    profiles = list(dict.fromkeys(p for p, _ in cells))

    plots: list[Plot] = []
    for profile in profiles:
        sizes = [s for p, s in cells if p == profile]
        rows = [(s, by_cell[(profile, s)]) for s in sizes]
        stem = _file_stem(profile)
        for kind, fig in (("cdf", cdf_figure(profile, rows, variants, colours, baseline)),
                          ("fct_box", fct_box_figure(profile, rows, variants, colours))):
            path = out / f"{kind}_{stem}.png"
            _save(fig, path)
            plots.append(Plot(kind, profile, None, path))
        for size, runs in rows:
            path = out / f"throughput_{stem}_{size_label(size)}.png"
            _save(throughput_figure(profile, size, runs, variants, colours), path)
            plots.append(Plot("throughput", profile, size, path))
    return plots


def cdf_figure(profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
               colours: dict[str, str], baseline: Optional[str]) -> Figure:
    """FCT, fairness-ratio and lost-packet CDFs per variant; one row per transfer size."""
    fig = Figure(figsize=(13, 3.3 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 3, squeeze=False)
    columns = [
        ("flow completion time (s)", lambda r: r["short"]["fct_s"]),
        ("fairness ratio (short ÷ long bytes)", lambda r: r["fairness_ratio"]),
        ("lost packets of the short flow", lambda r: r["short"]["lost_pkts"]),
    ]
    for (size, runs), ax_row in zip(rows, axes):
        for (label, value), ax in zip(columns, ax_row):
            drawn = False
            for variant in variants:
                xs = [value(r) for r in runs if r["variant"] == variant and value(r) is not None]
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
    present = [v for v in variants if any(r["variant"] == v for r in runs)]
    fig = Figure(figsize=(10, 2.6 * len(present)), layout="constrained")
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for variant, ax in zip(present, axes):
        run = median_fct_run([r for r in runs if r["variant"] == variant])
        tp, fct = run["throughput"], run["short"]["fct_s"]
        if tp["t"]:
            ax.plot(tp["t"], tp["short_mbps"], color=colours[variant], lw=1.4,
                    label=f"short flow ({variant})")
            if any(tp["long_mbps"]):
                ax.plot(tp["t"], tp["long_mbps"], color=LONG_FLOW_COLOUR, lw=1.2, label="long flow")
        else:
            _no_data(ax, "no throughput series")
        ax.axhline(run["rate_bps"] / 1e6, color="#999999", lw=0.8, ls=":", label="bottleneck rate")
        ax.axvline(fct, color=colours[variant], lw=0.8, ls="--", label=f"FCT {fct:.3g} s")
        ax.set_title(f"{profile}, {size_label(size)}: {variant}, run {run['run_id']} (median FCT)",
                     fontsize=10)
        ax.set_ylabel("throughput (Mbit/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("time since the short flow's SYN (s)")
    return fig


def fct_box_figure(profile: str, rows: list[tuple[int, list[RunRecord]]], variants: list[str],
                   colours: dict[str, str]) -> Figure:
    """FCT distribution per variant: box plot with every run drawn as a point."""
    fig = Figure(figsize=(max(4.5 * len(rows), 6), 4.2), layout="constrained")
    axes = fig.subplots(1, len(rows), squeeze=False)[0]
    jitter = np.random.default_rng(0)  # fixed, so re-analysis redraws the same figure
    for (size, runs), ax in zip(rows, axes):
        present = [v for v in variants if any(r["variant"] == v for r in runs)]
        samples = [[r["short"]["fct_s"] for r in runs if r["variant"] == v] for v in present]
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


def median_fct_run(runs: list[RunRecord]) -> RunRecord:
    """The run at the median FCT (the lower middle one for an even count), as in Fig. 3."""
    ordered = sorted(runs, key=lambda r: (r["short"]["fct_s"], r["run_id"]))
    return ordered[(len(ordered) - 1) // 2]


def _cdf(ax: Axes, values: list[float], label: str, colour: str, dashed: bool) -> None:
    xs = np.sort(np.asarray(values, dtype=float))
    ys = np.arange(1, xs.size + 1) / xs.size
    ax.step(np.concatenate([[xs[0]], xs]), np.concatenate([[0.0], ys]), where="post",
            color=colour, lw=1.6 if dashed else 1.3, ls="-." if dashed else "-", label=label)


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777")
    ax.set_xticks([])


def _save(fig: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    write_atomically(path, buffer.getvalue())


def _file_stem(name: str) -> str:
    """A profile name made safe for a file name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
