"""Figures of the web workload (Scharf Figs. 12-14).

- per profile and users: CDFs of the object download time, one panel per model and HTTP
  mode, one line per variant;
- without a users sweep: Fig. 12's bar chart (mean download time with its 95 % interval
  per HTTP mode and model, slow start and Quick-Start side by side) and, page by page,
  Quick-Start minus slow start with the same congestion control (paired: both variants
  loaded the same pages);
- with a sweep: per model the mean download time against the swept parameter (users:
  Fig. 13; slow start and Quick-Start each averaged over their variants and the HTTP
  modes, as the paper averages its six experiments, and every variant on its own), the
  relative benefit of Quick-Start next to its approval ratio, and the link's utilisation
  and drop rate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure

from analysis import plots, stats
from analysis.workloads.base import Plot
from results.campaign import RunRecord
from wire.httperf_log import HTTP_MODES, WEB_MODELS


def _key(model: str, mode: str) -> str:
    return f"{model}.{mode}"


def _kind(r: RunRecord) -> tuple[str, Optional[str]]:
    server = ((r.meta.get("variant_definition") or {}).get("roles") or {}).get("server") or {}
    if server.get("impl") == "quickstart":
        return "QS", server.get("base_cc")
    return "SS", server.get("cc")


def page_times(runs: list[RunRecord], key: str) -> np.ndarray:
    return np.array([x for r in runs for x in (r.metrics.get("combos", {}).get(key) or {}).get("download_s", [])],
                    dtype=float)


def present_combos(records: list[RunRecord]) -> list[tuple[str, str]]:
    have = {k for r in records for k in r.metrics.get("combos", {})}
    return [(m, h) for m in WEB_MODELS for h in HTTP_MODES if _key(m, h) in have]


def paired_differences(qs_runs: list[RunRecord], ss_runs: list[RunRecord], key: str) -> np.ndarray:
    """QS − SS download time of the same page (same repetition's sessions, same user and page)."""
    def by_page(runs: list[RunRecord]) -> dict[tuple, float]:
        out = {}
        for r in runs:
            b = (r.metrics.get("combos", {}).get(key)) or {}
            seed = r.meta.get("spec", {}).get("session_seed")
            for u, p, t in zip(b.get("page_user", []), b.get("page_index", []), b.get("download_s", [])):
                out[(seed, u, p)] = t
        return out
    a, b = by_page(qs_runs), by_page(ss_runs)
    return np.array([a[k] - b[k] for k in a.keys() & b.keys()], dtype=float)


def pages_at(runs: list[RunRecord], x, keys: list[str]) -> np.ndarray:
    """The download times of the runs' pages at sweep point x, over the given model.mode keys."""
    return np.concatenate([page_times([r for r in runs if r.sweep_value == x], k) for k in keys])


def benefit_by_variant(runs: list[RunRecord], keys: list[str], points: list) -> dict[str, np.ndarray]:
    """Per Quick-Start variant, 1 − T_QS/T_SS at each sweep point against slow start of the same TCP.

    Why per variant: a campaign may compare Quick-Start variants that differ in the router
    (Fig. 14: qs_thresh 0.9 against 0.5); pooled, their benefits would blur into one line."""
    def mean_time(rs: list[RunRecord], x) -> float:
        return _mean_ci(pages_at(rs, x, keys))[0]
    out = {}
    for v in dict.fromkeys(r.variant for r in runs if _kind(r)[0] == "QS"):
        vr = [r for r in runs if r.variant == v]
        ss = [r for r in runs if _kind(r) == ("SS", _kind(vr[0])[1])]
        if ss:
            out[v] = np.array([1 - mean_time(vr, x) / mean_time(ss, x) for x in points])
    return out


def _mean_ci(xs: np.ndarray) -> tuple[float, float, float]:
    if not len(xs):
        return np.nan, np.nan, np.nan
    ci = stats.mean_ci(xs)
    m = float(np.mean(xs))
    return (m, m - ci[0], ci[1] - m) if ci else (m, 0.0, 0.0)


def all_plots(out: Path, campaign: dict[str, Any], records: list[RunRecord], colours: dict[str, str]) -> list[Plot]:
    result = []
    variants = [v for v in colours if any(r.variant == v for r in records)]
    sweep = campaign.get("sweep") or None
    for profile in dict.fromkeys(r.profile for r in records):
        mine = [r for r in records if r.profile == profile]
        stem = plots.file_stem(profile)
        points = sorted({r.sweep_value for r in mine}, key=lambda x: (x is None, x))
        for point in points:
            at = [r for r in mine if r.sweep_value == point]
            label = "" if point is None else f"_{sweep['param']}{point:g}"
            path = out / f"web_cdf_{stem}{label}.png"
            plots.save(cdf_figure(profile, point, sweep, at, variants, colours), path)
            result.append(Plot("web_cdf", profile, None, path, "CDF of the object download time over the pages of "
                               "all runs, per model and HTTP mode."))
        if sweep is None:
            path = out / f"web_bars_{stem}.png"
            plots.save(bars_figure(profile, mine, variants, colours), path)
            result.append(Plot("web_bars", profile, None, path, "Mean object download time with its 95 % interval "
                               "over pages per HTTP mode and model (Scharf Fig. 12); hatched: Quick-Start."))
            path = out / f"web_paired_{stem}.png"
            if plots_paired(profile, mine, path):
                result.append(Plot("web_paired", profile, None, path, "Quick-Start minus slow start with the same "
                                   "congestion control, page by page (both loaded the same pages): mean with its "
                                   "95 % interval; below zero Quick-Start was faster."))
        else:
            path = out / f"web_sweep_{stem}.png"
            plots.save(sweep_figure(profile, sweep["param"], mine, variants, colours), path)
            result.append(Plot("web_sweep", profile, None, path, f"Against {sweep['param']} (Scharf Figs. 13-14): "
                               "mean object download time with 95 % intervals (thick: slow start and Quick-Start "
                               "each over their variants and HTTP modes); Quick-Start's relative benefit "
                               "1 − T_QS/T_SS and approval ratio; the bottleneck's utilisation and drop rate."))
    return result


def cdf_figure(profile: str, point, sweep, runs: list[RunRecord], variants: list[str],
               colours: dict[str, str]) -> Figure:
    combos = present_combos(runs)
    models = [m for m in WEB_MODELS if any(c[0] == m for c in combos)]
    modes = [h for h in HTTP_MODES if any(c[1] == h for c in combos)]
    fig = Figure(figsize=(4.2 * len(modes), 3.3 * len(models)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(models), len(modes), squeeze=False))
    for i, m in enumerate(models):
        for j, h in enumerate(modes):
            ax = axes[i, j]
            for v in variants:
                xs = np.sort(page_times([r for r in runs if r.variant == v], _key(m, h)))
                if xs.size:
                    ax.step(np.concatenate([[xs[0]], xs]), np.arange(xs.size + 1) / xs.size, where="post",
                            color=colours[v], label=f"{v} ({xs.size})")
            ax.set_xscale("log")
            ax.set_title(f"{m}, {h}" + ("" if point is None else f" ({sweep['param']} {point:g})"), fontsize=9)
            ax.set_xlabel("object download time (s)")
            ax.set_ylabel("CDF of pages")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"{profile}: object download time", fontsize=10)
    return fig


def bars_figure(profile: str, runs: list[RunRecord], variants: list[str], colours: dict[str, str]) -> Figure:
    combos = present_combos(runs)
    models = [m for m in WEB_MODELS if any(c[0] == m for c in combos)]
    fig = Figure(figsize=(5.5 * len(models), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(models), squeeze=False)[0])
    width = 0.8 / max(1, len(variants))
    for ax, m in zip(axes, models):
        modes = [h for h in HTTP_MODES if (m, h) in combos]
        for k, v in enumerate(variants):
            vr = [r for r in runs if r.variant == v]
            if not vr:
                continue
            figs = [_mean_ci(page_times(vr, _key(m, h))) for h in modes]
            xs = np.arange(len(modes)) + (k - (len(variants) - 1) / 2) * width
            ax.bar(xs, [f[0] for f in figs], width, yerr=[[f[1] for f in figs], [f[2] for f in figs]],
                   color=colours[v], hatch="//" if _kind(vr[0])[0] == "QS" else None, edgecolor="black",
                   linewidth=0.5, capsize=3, label=v)
        ax.set_xticks(range(len(modes)), modes)
        ax.set_ylabel("mean object download time (s)")
        ax.set_title(f"{profile}: {m}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def plots_paired(profile: str, runs: list[RunRecord], path: Path) -> bool:
    """Write the paired QS − SS figure; False if no variant pair (same congestion control) ran."""
    kinds = {v: _kind(next(r for r in runs if r.variant == v)) for v in dict.fromkeys(r.variant for r in runs)}
    pairs = [(q, s) for q, (kq, cq) in kinds.items() if kq == "QS" for s, (ks, cs) in kinds.items()
             if ks == "SS" and cs == cq]
    combos = present_combos(runs)
    models = [m for m in WEB_MODELS if any(c[0] == m for c in combos)]
    if not pairs or not models:
        return False
    fig = Figure(figsize=(5.5 * len(models), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(models), squeeze=False)[0])
    width = 0.8 / len(pairs)
    for ax, m in zip(axes, models):
        modes = [h for h in HTTP_MODES if (m, h) in combos]
        for k, (q, s) in enumerate(pairs):
            figs = [_mean_ci(paired_differences([r for r in runs if r.variant == q],
                                                [r for r in runs if r.variant == s], _key(m, h))) for h in modes]
            xs = np.arange(len(modes)) + (k - (len(pairs) - 1) / 2) * width
            ax.bar(xs, [f[0] for f in figs], width, yerr=[[f[1] for f in figs], [f[2] for f in figs]],
                   capsize=3, label=f"{q} − {s}", color=plots.PALETTE[k % len(plots.PALETTE)])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(modes)), modes)
        ax.set_ylabel("QS − SS download time of the same page (s)")
        ax.set_title(f"{profile}: {m}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    plots.save(fig, path)
    return True


def sweep_figure(profile: str, param: str, runs: list[RunRecord], variants: list[str],
                 colours: dict[str, str]) -> Figure:
    combos = present_combos(runs)
    models = [m for m in WEB_MODELS if any(c[0] == m for c in combos)]
    points = sorted({r.sweep_value for r in runs if r.sweep_value is not None})
    fig = Figure(figsize=(15, 3.8 * len(models)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(models), 3, squeeze=False))
    for i, m in enumerate(models):
        keys = [_key(m, h) for h in HTTP_MODES if (m, h) in combos]
        dl, gain, use = axes[i]
        for v in variants:
            vr = [r for r in runs if r.variant == v]
            figs = [_mean_ci(pages_at(vr, x, keys)) for x in points]
            dl.errorbar(points, [f[0] for f in figs], yerr=[[f[1] for f in figs], [f[2] for f in figs]],
                        color=colours[v], alpha=0.5, linewidth=1, capsize=2, label=v)
            if vr and _kind(vr[0])[0] == "QS":
                ratio = []
                for x in points:
                    blocks = [r.metrics["combos"][k] for r in vr if r.sweep_value == x for k in keys
                              if k in r.metrics.get("combos", {})]
                    req = sum(b["qs_requested"] for b in blocks)
                    ratio.append(sum(b["qs_approved"] for b in blocks) / req if req else np.nan)
                gain.plot(points, ratio, "--", color=colours[v], marker="s", label=f"{v}: approval ratio")
            u = [stats.mean(x) if (x := [r.metrics["combos"][k]["utilisation"] for r in vr if r.sweep_value == p
                                        for k in keys if k in r.metrics.get("combos", {})
                                        and r.metrics["combos"][k].get("utilisation") is not None]) else np.nan
                 for p in points]
            use.plot(points, u, color=colours[v], marker="o", label=f"{v}")
        by_kind = {}
        for kind, style in (("SS", "-"), ("QS", "--")):
            kr = [r for r in runs if _kind(r)[0] == kind]
            if not kr:
                continue
            figs = [_mean_ci(pages_at(kr, x, keys)) for x in points]
            by_kind[kind] = np.array([f[0] for f in figs])
            dl.errorbar(points, by_kind[kind], yerr=[[f[1] for f in figs], [f[2] for f in figs]], color="black",
                        linestyle=style, linewidth=2.2, capsize=3, label=f"{kind}, all its variants and modes")
        for v, b in benefit_by_variant(runs, keys, points).items():
            gain.plot(points, b, "-", color=colours[v], marker="o", linewidth=1.2, label=f"{v}: benefit")
        if "SS" in by_kind and "QS" in by_kind:
            gain.plot(points, 1 - by_kind["QS"] / by_kind["SS"], "-", color="black", marker="o", linewidth=2,
                      label="benefit 1 − T_QS/T_SS, all variants pooled")
        dl.set_xlabel(param)
        dl.set_ylabel("mean object download time (s)")
        dl.set_title(f"{profile}: {m}", fontsize=10)
        gain.set_xlabel(param)
        gain.set_ylabel("share")
        gain.set_ylim(-0.2, 1.05)
        gain.axhline(0, color="grey", linewidth=0.6)
        gain.set_title("Quick-Start: benefit and approval ratio", fontsize=10)
        use.set_xlabel(param)
        use.set_ylabel("bottleneck utilisation")
        use.set_ylim(0, 1.05)
        use.set_title("utilisation of the bottleneck", fontsize=10)
        for ax in (dl, gain, use):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    return fig
