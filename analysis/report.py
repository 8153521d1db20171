"""The campaign report: report.html (self-contained), report.md and a plain-text table.

Generic over workloads: the centrepiece follows the Blitzstart paper's Table 1 for every
figure the workload compares with the baseline (for the competing workload: FCT and lost
packets) — per (profile, size) and variant the change of the mean against the baseline
with the factor between the means, coloured by verdict: improvement green, deterioration
red, a change within one RTT orange, not significant grey. Then the workload's figures,
the summary, its further tables, and the runs the emulator or the flow checks flagged.
Images are embedded as data URIs so the HTML file can be mailed or archived alone.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from analysis import flow_checks, paper_figures, queues, stats
from analysis.plots import variant_colours
from analysis.runs import workload_analysis
from analysis.summary import ordered_variants, split_rows, write_split_summary, write_summary
from analysis.tables import html_table, markdown_table, text_table
from analysis.workloads.base import Compared, Plot, Row, Section, WorkloadAnalysis
from config.sizes import size_label
from results import schema
from results.campaign import Campaign, RunRecord
from results.store import read_json_or_none, write_atomically


@dataclass(frozen=True)
class Verdict:
    """How a comparison cell is shown: colour and arrow as in the paper, a short label, a meaning."""

    colour: str
    arrow: str
    label: str
    meaning: str


VERDICTS: dict[str, Verdict] = {  # in the legend's order
    "better": Verdict("#1e8e3e", "▼", "better", "significant improvement"),
    "worse": Verdict("#d93025", "▲", "worse", "significant deterioration"),
    "same_rtt": Verdict("#e8710a", "◆", "within 1 RTT", "change significant but smaller than one RTT"),
    "not_significant": Verdict("#80868b", "●", "not significant",
                               "no significant difference (95 % CI of the difference contains 0)"),
}


def write_report(campaign_dir: Path | str) -> list[Row]:
    """Analyse a campaign directory from its result files: write report.html, report.md,
    summary.csv, figures.csv, summary.json and plots/*.png. Returns the workload's own
    summary rows, which the console table shows (format_table)."""
    campaign = Campaign.open(campaign_dir)
    root, record, records = campaign.path, campaign.record, campaign.records()
    analysis = workload_analysis(record.get("workload", schema.LEGACY_WORKLOAD))
    rows = write_summary(root, record, records, analysis)
    colours = variant_colours(ordered_variants(record, records))
    plots = analysis.plots(root / schema.PLOTS_DIR, record, records, rows, colours) if records else []
    if records:
        tidy = read_json_or_none(root / schema.SUMMARY_JSON) or {}
        plots = paper_figures.plots(root / schema.PLOTS_DIR, record, tidy.get("rows", []), tidy.get("figures", []),
                                    records) + plots
    sections = analysis.sections(rows) + queues.sections(record, records, analysis) + \
        _host_sections(root, record, records, analysis) + _flagged_sections(campaign, records)
    write_atomically(root / schema.REPORT_MD, markdown_report(record, records, rows, plots, sections, analysis, root))
    write_atomically(root / schema.REPORT_HTML, html_report(record, records, rows, plots, sections, analysis, root))
    return rows


# ---------------------------------------------------------------- verdicts and figures

def verdict(row: Row, metric: Compared) -> Optional[str]:
    """Classify a variant's change of `metric` against the baseline; None for the baseline.

    Significance comes first (grey otherwise); a significant change smaller than one RTT
    is orange where the metric has that floor, as in the paper; then the metric's own
    direction decides better or worse.
    """
    diff = row.get(metric.col("diff"))
    if diff is None:
        return None
    if not row.get(metric.col("significant")):
        return "not_significant"
    if metric.rtt_floor and row.get(metric.col("within_one_rtt")):
        return "same_rtt"
    return "better" if metric.better(diff) else "worse"


def format_seconds(s: float, signed: bool = False) -> str:
    """A duration in ms below one second, else in s (the paper's "+19ms", "-1.6s")."""
    sign = "+" if signed else ""
    if abs(s) < 1.0:
        ms = s * 1000
        return f"{ms:{sign}.{1 if abs(ms) < 10 else 0}f} ms"
    return f"{s:{sign}.{2 if abs(s) < 10 else 1}f} s"


def format_packets(n: float, signed: bool = False) -> str:
    """A packet count: whole packets where large, one decimal for small means."""
    sign = "+" if signed else ""
    return f"{n:{sign}.{1 if abs(n) < 10 and n != round(n) else 0}f}"


def format_value(value: float, unit: str, signed: bool = False) -> str:
    if unit == "s":
        return format_seconds(value, signed)
    if unit == "pkts":
        return format_packets(value, signed)
    return f"{value:{'+' if signed else ''}.3g} {unit}".rstrip()


def format_factor(ratio: Optional[float]) -> str:
    """The factor between two means, always >= 1 as in the paper's "x1.4"; direction is in the sign."""
    if ratio is None:
        return "from 0"
    if ratio == 0:
        return "to 0"
    return f"×{max(ratio, 1 / ratio):.1f}"


def _change(row: Row, metric: Compared) -> tuple[str, str]:
    """(difference, factor) texts of a comparison cell."""
    return (format_value(row[metric.col("diff")], metric.unit, signed=True),
            format_factor(row.get(metric.col("ratio"))))


def change_text(row: Row, metric: Compared) -> str:
    """'−1.2 s (×1.9) ▼' for a compared row, '' for the baseline."""
    v = verdict(row, metric)
    if v is None:
        return ""
    diff, factor = _change(row, metric)
    return f"{diff} ({factor}) {VERDICTS[v].arrow}"


def cell_label(row: Row) -> str:
    """A row's profile, with the swept parameter's value where the campaign has a sweep."""
    if row.get("sweep_param") is None:
        return row["profile"]
    return f"{row['profile']}, {row['sweep_param']} {row['sweep_value']:g}"


def interval_text(low: Optional[float], high: Optional[float], runs: int, fmt) -> str:
    """A level's interval for a table: none below stats.MIN_CI_RUNS runs (said so), else
    `fmt(low) – fmt(high)`."""
    if runs < stats.MIN_CI_RUNS:
        return f"n < {stats.MIN_CI_RUNS}"
    return "" if low is None else f"{fmt(low)} – {fmt(high)}"


def size_text(size: Optional[int]) -> str:
    return "–" if size is None else size_label(size)


def format_table(rows: list[Row], analysis: WorkloadAnalysis) -> str:
    """A compact aligned plain-text table of the summary for the command line."""
    text = text_table(analysis.display_headers, [analysis.display(r) for r in rows])
    if rows and analysis.compared and any(verdict(r, analysis.compared[0]) for r in rows):
        text += "\n" + f"Δ{analysis.compared[0].label}: " + ", ".join(f"{v.arrow} {v.label}" for v in VERDICTS.values())
    return text


def _host_sections(root: Path, record: dict[str, Any], records: list[RunRecord],
                   analysis: WorkloadAnalysis) -> list[Section]:
    """Runs from several testbeds (a cluster's nodes): the primary figure per cell and host, and
    summary-by-host.csv with every figure (figures.csv's rows per host), so a host that
    disagrees shows."""
    hosts = sorted({str(r.meta.get("host")) for r in records if r.meta.get("host")})
    if len(hosts) < 2 or not analysis.compared:
        return []
    write_split_summary(root, record, records, analysis, "host")
    primary = analysis.compared[0]
    rows = []
    for row in split_rows(record, records, analysis, "host"):
        mean = row.get(primary.col("mean"))
        rows.append([cell_label(row), size_text(row["size_bytes"]), row["variant"], row["host"], str(row["runs"]),
                     format_value(mean, primary.unit) if mean is not None else "–"])
    return [Section(f"Per host: {primary.label}", ["cell", "size", "variant", "host", "runs", primary.label], rows,
                    f"Every summary figure per host is in summary-by-host.csv ({len(hosts)} hosts).")]


def _flagged_sections(campaign: Campaign, records: list[RunRecord]) -> list[Section]:
    """Runs the emulator flagged, runs whose flows failed their checks, failed runs."""
    out = []
    flagged = [[r.run_id, "; ".join(flow_checks.emulator_flags(r.meta))] for r in records if flow_checks.emulator_flags(r.meta)]
    if flagged:
        out.append(Section("Runs the emulator flagged", ["run", "why"], flagged,
                           f"The delay element dropped frames or released them more than "
                           f"{flow_checks.LATE_P99_US / 1000:g} ms late at the 99th percentile during these "
                           "runs; their figures are kept but deserve a second look."))
    checked = [[r.run_id, "; ".join(flow_checks.problems(r.metrics.get("flow_checks") or []))]
               for r in records if flow_checks.failed_checks(r.metrics)]
    if checked:
        out.append(Section("Runs whose flows differ from their declaration", ["run", "what differs"], checked))
    failed = [[run_id, error] for run_id, error in campaign.failed_runs()]
    if failed:
        out.append(Section("Failed runs", ["run", "error"], failed,
                           "Their files are kept in <run>.failed/ with error.txt; they do not count."))
    return out


# ---------------------------------------------------------------- metadata

def _host_check(root: Path) -> str:
    """The campaign's host calibration (host.json) in one line: its figures and verdict."""
    rec = read_json_or_none(root / "host.json")
    if not rec:
        return "not recorded"
    t = rec.get("calibration", {}).get("timer_wakeup_us", {})
    steal = rec.get("calibration", {}).get("steal_fraction")
    figures = (f"timer wake-ups p50 {t.get('p50')} µs, p99 {t.get('p99')} µs, p99.9 {t.get('p999')} µs"
               + ("" if steal is None else f", steal {100 * steal:.0f} %"))
    unfit = rec.get("unfit_profiles") or []
    if not unfit:
        return f"fit for every profile ({figures})"
    return f"UNFIT for {', '.join(unfit)}, run anyway with --unfit-host ({figures})"


def _metadata(campaign: dict[str, Any], records: list[RunRecord], root: Path) -> list[tuple[str, str]]:
    """(label, value) pairs describing the campaign and where its runs ran."""
    def distinct(key: str) -> str:
        values = sorted({str(r.meta.get(key)) for r in records if r.meta.get(key)})
        return ", ".join(values) + (" (mixed!)" if len(values) > 1 else "") if values else "unknown"

    def listed(key: str) -> str:
        return ", ".join(str(x) for x in campaign.get(key) or []) or "–"

    sizes = campaign.get("sizes") or [None]
    per_profile = campaign.get("profile_sizes") or {}
    sweep = campaign.get("sweep") or {}
    cells = sum(len(per_profile.get(p, sizes)) for p in campaign.get("profiles") or [])
    expected = (cells * len(campaign.get("variants") or [])
                * max(1, len(sweep.get("values") or [])) * int(campaign.get("reps") or 0))
    flagged = sum(1 for r in records if flow_checks.emulator_flags(r.meta))
    return [
        ("scenario", str(campaign.get("scenario", "?"))),
        ("workload", str(campaign.get("workload", schema.LEGACY_WORKLOAD))),
        ("campaign", root.resolve().name),
        ("started", str(campaign.get("started", "?"))),
        ("baseline", str(campaign.get("baseline") or "none")),
        ("variants", listed("variants")),
        ("profiles", listed("profiles")),
        ("sizes", "; ".join(f"{p}: " + ", ".join(size_text(s) for s in per_profile[p]) for p in per_profile)
         or ", ".join(size_text(s) for s in campaign.get("sizes") or []) or "–"),
        ("repetitions", str(campaign.get("reps", "?"))),
        ("finished runs", f"{len(records)} of {expected}" if expected else str(len(records))),
        ("runs the emulator flagged", f"{flagged} of {len(records)}"),
        ("intervals", f"levels: {stats.CI_METHOD}; differences: 95 % Welch t interval"),
        ("host check", _host_check(root)),
        ("seed", str(campaign.get("seed", "?"))),
        ("git revision", distinct("git_rev")),
        ("kernel", distinct("kernel")),
        ("machine", distinct("machine")),
    ]


def _comparison_layout(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row]
                       ) -> tuple[list[tuple[str, list]], list[str], dict[tuple, Row]]:
    """Profiles with their sizes, the non-baseline variants and the rows keyed by cell."""
    by_key = {(cell_label(r), r["size_bytes"], r["variant"]): r for r in rows}
    profiles: dict[str, list] = {}
    for r in rows:
        sizes = profiles.setdefault(cell_label(r), [])
        if r["size_bytes"] not in sizes:
            sizes.append(r["size_bytes"])
    variants = [v for v in ordered_variants(campaign, records) if v != campaign.get("baseline")]
    return list(profiles.items()), variants, by_key


# ---------------------------------------------------------------- HTML

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #202124; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f1f3f4; text-align: center; }
td.name { text-align: left; font-weight: 600; }
table.meta td, table.meta th { text-align: left; }
td.cell { text-align: center; color: white; font-weight: 600; }
td.cell small { display: block; font-weight: normal; }
td.missing { color: #999; text-align: center; }
.legend span { display: inline-block; color: white; padding: 0.1em 0.6em; margin-right: 0.6em; border-radius: 3px; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
p.note { color: #5f6368; font-size: 0.9em; }
"""


def html_report(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row], plots: list[Plot],
                sections: list[Section], analysis: WorkloadAnalysis, root: Path) -> str:
    """The complete report.html text."""
    e = html.escape
    scenario = e(str(campaign.get("scenario", "campaign")))
    parts = [f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
             f"<title>startlab report: {scenario}</title><style>{CSS}</style></head><body>",
             f"<h1>startlab report: {scenario}</h1>", "<table class='meta'>"]
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _metadata(campaign, records, root)]
    parts.append("</table>")
    if not rows:
        parts += [_html_section(s) for s in sections]
        parts.append("<p>No finished runs in this campaign yet.</p></body></html>")
        return "\n".join(parts)

    if analysis.compared:
        parts.append(f"<h2>Variants compared with the baseline “{e(str(campaign.get('baseline')))}”</h2>")
        parts.append(_html_comparison(campaign, records, rows, analysis))
    beside = [p for p in plots if p.kind == "paper"]
    if beside:
        parts.append("<h2>Beside the paper</h2>")
    for plot in beside:
        parts.append(f"<p class='note'>{e(plot.caption)}</p>")
        data = base64.b64encode(plot.path.read_bytes()).decode()
        parts.append(f"<img alt='{e(plot.path.stem)}' src='data:image/png;base64,{data}'>")
    for profile in dict.fromkeys(r["profile"] for r in rows):
        mine = [p for p in plots if p.profile == profile]
        if not mine:
            continue
        parts.append(f"<h2>Profile {e(profile)}</h2>")
        for kind in dict.fromkeys(p.kind for p in mine):
            of_kind = [p for p in mine if p.kind == kind]
            if of_kind[0].caption:
                parts.append(f"<p class='note'>{e(of_kind[0].caption)}</p>")
            for plot in of_kind:
                data = base64.b64encode(plot.path.read_bytes()).decode()
                alt = f"{kind} {profile}" + ("" if plot.size_bytes is None else f" {size_label(plot.size_bytes)}")
                parts.append(f"<img alt='{e(alt)}' src='data:image/png;base64,{data}'>")
    parts.append("<h2>Summary</h2>")
    parts.append(html_table(analysis.display_headers, [analysis.display(r) for r in rows]))
    parts += [_html_section(s) for s in sections]
    parts.append("<p class='note'>The same figures, unrounded and with more columns, are in "
                 "summary.csv and summary.json beside this report.</p></body></html>")
    return "\n".join(parts)


def _html_section(section: Section) -> str:
    out = [f"<h2>{html.escape(section.title)}</h2>", html_table(section.headers, section.rows,
                                                                 name_columns=min(3, len(section.headers) - 1))]
    if section.note:
        out.append(f"<p class='note'>{html.escape(section.note)}</p>")
    return "\n".join(out)


def _html_comparison(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
                     analysis: WorkloadAnalysis) -> str:
    e = html.escape
    metrics = analysis.compared
    profiles, variants, by_key = _comparison_layout(campaign, records, rows)
    baseline = campaign.get("baseline")
    if not variants:
        return "<p>Only the baseline variant ran, so there is nothing to compare.</p>"
    first = {p: by_key.get((p, sizes[0], baseline)) or next(r for r in rows if cell_label(r) == p)
             for p, sizes in profiles}
    head1 = ["<tr><th rowspan='3'>variant</th>"]
    head2, head3 = ["<tr>"], ["<tr>"]
    for profile, sizes in profiles:
        row = first[profile]
        params = f"RTT {row['rtt_s'] * 1000:.0f} ms, {row['rate_bps'] / 1e6:.3g} Mbit/s"
        head1.append(f"<th colspan='{len(metrics) * len(sizes)}'>{e(profile)}<br><small>{e(params)}</small></th>")
        for size in sizes:
            head2.append(f"<th colspan='{len(metrics)}'>{e(size_text(size))}</th>")
            head3.append("".join(f"<th>{e(m.label)}</th>" for m in metrics))
    out = ["<table>", "".join(head1) + "</tr>", "".join(head2) + "</tr>", "".join(head3) + "</tr>"]

    base_cells = [f"<td class='name'>{e(str(baseline))} (means)</td>"]
    for profile, sizes in profiles:
        for size in sizes:
            b = by_key.get((profile, size, baseline))
            for m in metrics:
                mean = None if b is None else b.get(m.col("mean"))
                base_cells.append("<td class='missing'>–</td>" if mean is None else
                                  f"<td>{e(format_value(mean, m.unit))}</td>")
    out.append("<tr>" + "".join(base_cells) + "</tr>")

    for variant in variants:
        cells = [f"<td class='name'>{e(variant)}</td>"]
        for profile, sizes in profiles:
            for size in sizes:
                row = by_key.get((profile, size, variant))
                for metric in metrics:
                    v = None if row is None else verdict(row, metric)
                    if v is None:
                        cells.append("<td class='missing'>–</td>")
                        continue
                    shown = VERDICTS[v]
                    diff, factor = _change(row, metric)
                    cells.append(f"<td class='cell' style='background:{shown.colour}' "
                                 f"title='{e(shown.meaning)}'>{shown.arrow} {e(diff)}"
                                 f"<small>{e(factor)}</small></td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    legend = "".join(f"<span style='background:{v.colour}'>{v.arrow} {e(v.meaning)}</span>"
                     for v in VERDICTS.values())
    out.append(f"<p class='legend'>{legend}</p>")
    out.append("<p class='note'>Each cell: difference of the mean over the runs against the baseline at "
               "the same profile and size (" + ", ".join(f"{m.label}" + (f" in {m.unit}" if m.unit else "")
                                                          for m in metrics) + ") and the "
               "factor between the two means (larger ÷ smaller). Significance: the 95 % Welch confidence "
               "interval of the difference excludes 0; the one-way ANOVA p-value across all variants is "
               "in the summary table. “–”: no runs, or no baseline runs, at that cell.</p>")
    return "\n".join(out)


# ---------------------------------------------------------------- Markdown

def markdown_report(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row], plots: list[Plot],
                    sections: list[Section], analysis: WorkloadAnalysis, root: Path) -> str:
    """report.md: metadata, the comparison as a long table with verdict words, the summary."""
    lines = [f"# startlab report: {campaign.get('scenario', 'campaign')}", ""]
    lines += [f"- **{k}**: {v}" for k, v in _metadata(campaign, records, root)]
    if not rows:
        for s in sections:
            lines += ["", f"## {s.title}", ""] + markdown_table(s.headers, s.rows)
        return "\n".join(lines + ["", "No finished runs in this campaign yet.", ""])

    if analysis.compared:
        lines += ["", f"## Variants compared with the baseline `{campaign.get('baseline')}`", ""]
        profiles, variants, by_key = _comparison_layout(campaign, records, rows)
        primary = analysis.compared[0]
        compared = [by_key[(p, s, v)] for p, sizes in profiles for s in sizes for v in variants
                    if (p, s, v) in by_key and verdict(by_key[(p, s, v)], primary)]
        if compared:
            table = []
            for row in compared:
                cells = [cell_label(row), size_text(row["size_bytes"]), row["variant"]]
                for metric in analysis.compared:
                    diff, factor = _change(row, metric)
                    shown = VERDICTS[verdict(row, metric) or "not_significant"]
                    cells.append(f"{shown.arrow} {diff} ({factor}) {shown.label}")
                table.append(cells)
            lines += markdown_table(["profile", "size", "variant"] + [f"{m.label} change" for m in analysis.compared],
                                    table)
            lines += ["", "Legend: " + "; ".join(f"{v.arrow} {v.label}: {v.meaning}" for v in VERDICTS.values())]
        else:
            lines.append("Only the baseline variant ran (or no cell has baseline runs): nothing to compare.")

    beside = [p for p in plots if p.kind == "paper"]
    if beside:
        lines += ["", "## Beside the paper", ""]
        for plot in beside:
            lines += [plot.caption, "", f"![{plot.path.stem}]({plot.path.relative_to(root).as_posix()})", ""]
    lines += ["", "## Summary", ""]
    lines += markdown_table(analysis.display_headers, [analysis.display(r) for r in rows])
    for s in sections:
        lines += ["", f"## {s.title}", ""] + markdown_table(s.headers, s.rows) + (["", s.note] if s.note else [])
    lines += ["", "## Figures", ""]
    lines += [f"- [{p.kind} {p.profile}{'' if p.size_bytes is None else ' ' + size_label(p.size_bytes)}]"
              f"({p.path.relative_to(root).as_posix()})" for p in plots]
    return "\n".join(lines) + "\n"
