"""The nightly history page: <root>/index.html, self-contained like a campaign's report.

Per scenario: the latest night's regressions (red, as the report colours a significant
deterioration), a figure per scenario with one panel per (profile, size[, sweep point]) and
one line per variant — the mean of the primary figure (FCT for the competing workload)
night by night with its 95 % interval as error bars, regressed nights marked with a red
cross — and the list of nights. Images are embedded as data URIs, as in report.html, so
the page can be mailed or archived alone; the PNGs also stay beside each scenario's nights.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Optional

from matplotlib.figure import Figure

from analysis.history import ScenarioHistory, Series
from analysis.plots import save, variant_colours
from analysis.report import CSS, VERDICTS, format_value, size_text
from analysis.tables import html_table
from results.nightly import INDEX_HTML
from results.store import write_atomically

FIGURE_FILE = "history.png"
PANELS_PER_ROW = 3
REGRESSED = VERDICTS["worse"]


def _panel_title(series: Series) -> str:
    parts = [series.profile, size_text(series.size_bytes)] + ([series.sweep] if series.sweep else [])
    return ", ".join(parts)


def history_figure(history: ScenarioHistory) -> Figure:
    """Each cell's figure over the nights: mean ± 95 % interval per variant, one panel per
    (profile, size, sweep point), regressed nights crossed in the report's red."""
    panels: dict[tuple, list[Series]] = {}
    for s in history.series:
        panels.setdefault((s.profile, s.size_bytes, s.sweep), []).append(s)
    columns = min(PANELS_PER_ROW, max(1, len(panels)))
    rows = max(1, -(-len(panels) // columns))
    width = max(4.5, min(12.0, 0.55 * len(history.nights) + 3.0))
    fig = Figure(figsize=(width * columns, 3.6 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    colours = variant_colours(history.variants)
    position = {night: i for i, night in enumerate(history.nights)}
    unit = f" ({history.metric_unit})" if history.metric_unit else ""
    for ax, (_, cell) in zip(axes, panels.items()):
        for s in cell:
            xs = [position[p.night] for p in s.points]
            ys = [p.mean for p in s.points]
            low = [p.mean - p.ci_low if p.ci_low is not None else 0.0 for p in s.points]
            high = [p.ci_high - p.mean if p.ci_high is not None else 0.0 for p in s.points]
            ax.errorbar(xs, ys, yerr=[low, high], marker="o", ms=4, capsize=3, lw=1.3,
                        color=colours[s.variant], label=s.variant)
            bad = [(position[p.night], p.mean) for p in s.points if p.regressed]
            for x, _ in bad:             # a band as well: a variant's own colour may be red too
                ax.axvspan(x - 0.3, x + 0.3, color=REGRESSED.colour, alpha=0.12, lw=0)
            if bad:
                ax.scatter([x for x, _ in bad], [y for _, y in bad], marker="X", s=110, zorder=4,
                           color=REGRESSED.colour, edgecolor="black", linewidths=0.6)
        ax.set_title(_panel_title(cell[0]), fontsize=10)
        ax.set_xticks(range(len(history.nights)), history.nights, rotation=35, ha="right", fontsize=7)
        ax.set_xlim(-0.5, len(history.nights) - 0.5)
        ax.set_ylabel(f"{history.metric_label} mean{unit}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig


def _regression_rows(regressions: list[dict[str, Any]]) -> list[list[str]]:
    def figures(side: dict[str, Any], unit: str) -> str:
        text = format_value(side["mean"], unit)
        if side["ci_low"] is not None:
            text += f" [{format_value(side['ci_low'], unit)}, {format_value(side['ci_high'], unit)}]"
        return f"{text} (n={side['runs']})"

    return [[r["profile"], size_text(r["size_bytes"]), f"{r['variant']} {r['sweep'] or ''}".strip(), r["label"],
             figures(r["previous"], r["unit"]), figures(r["current"], r["unit"]),
             format_value(r["diff"], r["unit"], signed=True)] for r in regressions]


def _scenario_section(history: ScenarioHistory, figure: Optional[Path]) -> str:
    e = html.escape
    out = [f"<h2 id='{e(history.name)}'>{e(history.name)}</h2>"]
    latest = history.latest
    if latest is None:
        out.append(f"<p class='note'>Latest night {e(history.nights[-1])}: no nightly verdict stored "
                   "(a campaign not run by <code>run.py nightly</code>).</p>")
    elif latest["previous"] is None or latest.get("note"):
        out.append(f"<p class='note'>Latest night {e(latest['night'])}: {e(latest.get('note') or '')}</p>")
    elif latest["regressions"]:
        out.append(f"<p><span class='badge' style='background:{REGRESSED.colour}'>{REGRESSED.arrow} "
                   f"{len(latest['regressions'])} regressed</span> night {e(latest['night'])} against "
                   f"{e(latest['previous'])}:</p>")
        out.append(html_table(["profile", "size", "variant", "figure", "previous mean [95 % CI]",
                               "current mean [95 % CI]", "change"], _regression_rows(latest["regressions"])))
    else:
        out.append(f"<p>Night {e(latest['night'])} against {e(latest['previous'])}: "
                   f"{len(latest['rows'])} cells compared, none regressed.</p>")
    if figure is not None:
        data = base64.b64encode(figure.read_bytes()).decode()
        out.append(f"<img alt='{e(history.name)}: {e(history.metric_label)} over the nights' "
                   f"src='data:image/png;base64,{data}'>")
    out.append(f"<p class='note'>Nights: {e(', '.join(history.nights))}. Points: mean {e(history.metric_label)} "
               "of a cell's runs that night; bars: its 95 % Student-t interval (none with a single run); "
               f"<span style='color:{REGRESSED.colour}'>✖</span> on a red band: a night where that cell "
               "regressed against the night before.</p>")
    return "\n".join(out)


def write_index(root: Path, histories: list[ScenarioHistory], generated: str,
                unfit: list[dict] | None = None) -> Path:
    """Draw each scenario's figure beside its nights and write <root>/index.html; `unfit`
    lists the nights the host check refused (nothing ran: neither failures nor regressions)."""
    e = html.escape
    parts = ["<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
             "<title>startlab nightly history</title>"
             f"<style>{CSS}\n.badge {{ color: white; padding: 0.1em 0.6em; border-radius: 3px; }}</style>"
             "</head><body>", "<h1>startlab nightly history</h1>",
             f"<p class='note'>Written {e(generated)}. A cell regressed when <code>run.py compare</code> finds "
             "its figure significantly worse than the night before (95 % Welch interval of the difference "
             "excludes 0) by more than its noise floor (one RTT for durations). The same cells are listed "
             "in regressions.json.</p>"]
    if not histories:
        parts.append("<p>No finished nights yet.</p>")
    else:
        overview = [[h.name, h.nights[-1], str(len(h.nights)),
                     "–" if not h.latest or h.latest["previous"] is None else str(len(h.latest["regressions"]))]
                    for h in histories]
        parts.append(html_table(["scenario", "latest night", "nights shown", "regressions in the latest"], overview, name_columns=2))
    if unfit:
        rows = [[u.get("night", "?"), ", ".join(u.get("scenarios") or []), u.get("reason", "")] for u in unfit[-30:]]
        parts.append("<h2>Nights the host was unfit</h2><p class='note'>The host calibration before these "
                     "nights found this machine unable to emulate the scenarios' profiles within the fidelity "
                     "tolerances; nothing ran, so nothing regressed or failed.</p>")
        parts.append(html_table(["night", "scenarios", "host check"], rows, name_columns=2))
    for history in histories:
        figure = None
        if history.series:
            figure = root / history.name / FIGURE_FILE
            save(history_figure(history), figure)
        parts.append(_scenario_section(history, figure))
    parts.append("</body></html>")
    path = root / INDEX_HTML
    write_atomically(path, "\n".join(parts) + "\n")
    return path
