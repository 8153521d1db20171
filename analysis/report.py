"""The campaign report: report.html (self-contained), report.md and a plain-text table.

The centrepiece follows the Blitzstart paper's Table 1: for every (profile, size) and
every variant, the change of the mean FCT and of the mean lost packets against the
baseline, with the factor between the means, coloured by verdict — improvement green,
deterioration red, an FCT change within one RTT orange, not significant grey.
Images are embedded as data URIs so the HTML file can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from analysis.plots import Plot, write_plots
from analysis.records import RunRecord, load_campaign, size_label
from analysis.summary import Row, ordered_variants, write_atomically, write_summary



@dataclass(frozen=True)
class Verdict:
    """How a comparison cell is shown: colour and arrow as in the paper, a short label, a meaning."""

    colour: str
    arrow: str
    label: str
    meaning: str


VERDICTS: dict[str, Verdict] = {  # in the legend's order
    "better": Verdict("#1e8e3e", "▼", "better", "significant improvement (lower mean)"),
    "worse": Verdict("#d93025", "▲", "worse", "significant deterioration (higher mean)"),
    "same_rtt": Verdict("#e8710a", "◆", "within 1 RTT", "FCT change significant but smaller than one RTT"),
    "not_significant": Verdict("#80868b", "●", "not significant",
                               "no significant difference (95 % CI of the difference contains 0)"),
}


def write_report(campaign_dir: Path | str) -> Path:
    """Analyse a campaign directory from its result files; return the path of report.html.

    Also writes summary.csv, summary.json, plots/*.png and report.md beside it.
    """
    root = Path(campaign_dir)
    campaign, records = load_campaign(root)
    rows = write_summary(root, campaign, records)
    plots = write_plots(root, campaign, records)
    write_atomically(root / "report.md", markdown_report(campaign, records, rows, plots, root))
    path = root / "report.html"
    write_atomically(path, html_report(campaign, records, rows, plots, root))
    return path


# ---------------------------------------------------------------- verdicts and figures

def verdict(row: Row, metric: str) -> Optional[str]:
    """Classify a variant's change of "fct" or "loss" against the baseline; None for the baseline.

    Lower is better for both metrics. Significance comes first (grey otherwise); a
    significant FCT change smaller than one RTT is orange, as in the paper.
    """
    diff = row[f"{metric}_diff_s" if metric == "fct" else f"{metric}_diff_pkts"]
    if diff is None:
        return None
    if not row[f"{metric}_significant"]:
        return "not_significant"
    if metric == "fct" and row["fct_within_one_rtt"]:
        return "same_rtt"
    return "better" if diff < 0 else "worse"


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


def format_factor(ratio: Optional[float]) -> str:
    """The factor between two means, always >= 1 as in the paper's "x1.4"; direction is in the sign."""
    if ratio is None:
        return "from 0"
    if ratio == 0:
        return "to 0"
    return f"×{max(ratio, 1 / ratio):.1f}"


def _change(row: Row, metric: str) -> tuple[str, str]:
    """(difference, factor) texts of a comparison cell."""
    if metric == "fct":
        return format_seconds(row["fct_diff_s"], signed=True), format_factor(row["fct_ratio"])
    return format_packets(row["loss_diff_pkts"], signed=True), format_factor(row["loss_ratio"])


# ---------------------------------------------------------------- the summary table, shared

SUMMARY_HEADERS = ["profile", "size", "variant", "runs", "FCT mean", "FCT 95% CI", "FCT median",
                   "loss mean", "loss median", "retx mean", "fairness median", "inflation",
                   "ΔFCT vs baseline", "ANOVA p"]


def cell_label(row: Row) -> str:
    """A row's profile, with the swept parameter's value where the campaign has a sweep."""
    if row.get("sweep_param") is None:
        return row["profile"]
    return f"{row['profile']}, {row['sweep_param']} {row['sweep_value']:g}"


def _summary_cells(row: Row) -> list[str]:
    """One summary row as display texts; the plain-text, Markdown and HTML tables share it."""
    ci = ("" if row["fct_ci_low_s"] is None
          else f"{format_seconds(row['fct_ci_low_s'])} – {format_seconds(row['fct_ci_high_s'])}")
    change = ""
    v = verdict(row, "fct")
    if v is not None:
        diff, factor = _change(row, "fct")
        change = f"{diff} ({factor}) {VERDICTS[v].arrow}"
    return [
        cell_label(row), size_label(row["size_bytes"]), row["variant"], str(row["runs"]),
        format_seconds(row["fct_mean_s"]), ci, format_seconds(row["fct_median_s"]),
        format_packets(row["loss_mean_pkts"]), format_packets(row["loss_median_pkts"]),
        format_packets(row["retx_mean_pkts"]),
        "" if row["fairness_median"] is None else f"{row['fairness_median']:.2f}",
        "" if row["inflation_mean"] is None else f"{row['inflation_mean']:.3f}", change,
        "" if row["anova_fct_p"] is None else f"{row['anova_fct_p']:.3g}",
    ]


QS_HEADERS = ["profile", "size", "variant", "runs", "requested", "approved", "failures", "QS bytes mean"]
QS_NOTE = ("requested: share of runs whose SYN-ACK carried a Quick-Start request; approved: share of the "
           "requests the sender accepted (echo with the right TTL diff and nonce, rate > 0); failures: share "
           "of approved runs that lost a packet sent in the Quick-Start phase; QS bytes: data sent in that "
           "phase, mean over the approved runs.")


def quickstart_rows(rows: list[Row]) -> list[list[str]]:
    """The Quick-Start columns as display texts, for the rows that carry them ([] if none)."""
    def share(x: Optional[float]) -> str:
        return "–" if x is None else f"{x:.0%}"
    return [[cell_label(r), size_label(r["size_bytes"]), r["variant"], str(r["runs"]),
             share(r["qs_requested_ratio"]), share(r["qs_approval_ratio"]), share(r["qs_failure_ratio"]),
             "–" if r["qs_bytes_mean"] is None else f"{r['qs_bytes_mean'] / 1000:.1f} KB"]
            for r in rows if r.get("qs_requested_ratio") is not None]


def format_table(summary_rows: list[Row]) -> str:
    """A compact aligned plain-text table of the summary for the command line."""
    table = [SUMMARY_HEADERS] + [_summary_cells(r) for r in summary_rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(SUMMARY_HEADERS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if summary_rows and any(verdict(r, "fct") for r in summary_rows):
        lines.append("ΔFCT: " + ", ".join(f"{v.arrow} {v.label}" for v in VERDICTS.values()))
    return "\n".join(lines)


# ---------------------------------------------------------------- metadata

def _metadata(campaign: dict[str, Any], records: list[RunRecord], root: Path) -> list[tuple[str, str]]:
    """(label, value) pairs describing the campaign and where its runs ran."""
    def distinct(key: str) -> str:
        values = sorted({str(r[key]) for r in records if r.get(key)})  # type: ignore[literal-required]
        return ", ".join(values) + (" (mixed!)" if len(values) > 1 else "") if values else "unknown"

    def listed(key: str) -> str:
        return ", ".join(str(x) for x in campaign.get(key) or []) or "–"

    expected = (len(campaign.get("profiles") or []) * len(campaign.get("sizes") or [])
                * len(campaign.get("variants") or []) * int(campaign.get("reps") or 0))
    return [
        ("scenario", str(campaign.get("scenario", "?"))),
        ("campaign", root.resolve().name),
        ("started", str(campaign.get("started", "?"))),
        ("baseline", str(campaign.get("baseline") or "none")),
        ("variants", listed("variants")),
        ("profiles", listed("profiles")),
        ("sizes", listed("sizes")),
        ("repetitions", str(campaign.get("reps", "?"))),
        ("finished runs", f"{len(records)} of {expected}" if expected else str(len(records))),
        ("seed", str(campaign.get("seed", "?"))),
        ("git revision", distinct("git_rev")),
        ("kernel", distinct("kernel")),
    ]


def _comparison_layout(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row]
                       ) -> tuple[list[tuple[str, list[int]]], list[str], dict[tuple[str, int, str], Row]]:
    """Profiles with their sizes, the non-baseline variants and the rows keyed by cell."""
    by_key = {(cell_label(r), r["size_bytes"], r["variant"]): r for r in rows}
    profiles: dict[str, list[int]] = {}
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


def html_report(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
                plots: list[Plot], root: Path) -> str:
    """The complete report.html text."""
    e = html.escape
    scenario = e(str(campaign.get("scenario", "campaign")))
    parts = [f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
             f"<title>startlab report: {scenario}</title><style>{CSS}</style></head><body>",
             f"<h1>startlab report: {scenario}</h1>", "<table class='meta'>"]
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _metadata(campaign, records, root)]
    parts.append("</table>")
    if not rows:
        parts.append("<p>No finished runs in this campaign yet.</p></body></html>")
        return "\n".join(parts)

    parts.append(f"<h2>Variants compared with the baseline “{e(str(campaign.get('baseline')))}”</h2>")
    parts.append(_html_comparison(campaign, records, rows))
    for profile in dict.fromkeys(r["profile"] for r in rows):
        parts.append(f"<h2>Profile {e(profile)}</h2>")
        mine = [p for p in plots if p.profile == profile]
        for kind, caption in (("cdf", "CDFs over the runs: FCT, fairness ratio (bytes of the short flow ÷ "
                                      "bytes of the long flow while the short flow is active), lost packets."),
                              ("fct_box", "FCT per variant; each point is one run."),
                              ("throughput", "Rolling-average throughput of both flows in the "
                                             "median-FCT run of each variant."),
                              ("speedup", "Speedup of each variant over the baseline (mean FCT) vs transfer "
                                          "size; where the flow ran alone, the relative improvement next to "
                                          "Equation 2 of the Quick-Start paper (dashed)."),
                              ("time_sequence", "Sequence number vs time of the server's data (before the "
                                                "bottleneck queue) in the median-FCT run of each variant."),
                              ("load", "Quick-Start approval and failure ratios, link utilisation and drop "
                                       "rate over the fetch, and mean FCT vs the swept workload parameter.")):
            of_kind = [p for p in mine if p.kind == kind]
            if of_kind:
                parts.append(f"<p class='note'>{e(caption)}</p>")
            for plot in of_kind:
                data = base64.b64encode(plot.path.read_bytes()).decode()
                alt = f"{kind} {profile}" + ("" if plot.size_bytes is None else f" {size_label(plot.size_bytes)}")
                parts.append(f"<img alt='{e(alt)}' src='data:image/png;base64,{data}'>")
    parts.append("<h2>Summary</h2>")
    parts.append(_html_table(SUMMARY_HEADERS, [_summary_cells(r) for r in rows]))
    qs_rows = quickstart_rows(rows)
    if qs_rows:
        parts.append("<h2>Quick-Start</h2>")
        parts.append(_html_table(QS_HEADERS, qs_rows))
        parts.append(f"<p class='note'>{e(QS_NOTE)}</p>")
    parts.append("<p class='note'>The same figures, unrounded and with more columns, are in "
                 "summary.csv and summary.json beside this report.</p></body></html>")
    return "\n".join(parts)


def _html_comparison(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row]) -> str:
    e = html.escape
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
        head1.append(f"<th colspan='{2 * len(sizes)}'>{e(profile)}<br><small>{e(params)}</small></th>")
        for size in sizes:
            head2.append(f"<th colspan='2'>{e(size_label(size))}</th>")
            head3.append("<th>FCT</th><th>loss</th>")
    out = ["<table>", "".join(head1) + "</tr>", "".join(head2) + "</tr>", "".join(head3) + "</tr>"]

    base_cells = [f"<td class='name'>{e(str(baseline))} (means)</td>"]
    for profile, sizes in profiles:
        for size in sizes:
            b = by_key.get((profile, size, baseline))
            base_cells.append("<td class='missing'>–</td><td class='missing'>–</td>" if b is None else
                              f"<td>{e(format_seconds(b['fct_mean_s']))}</td>"
                              f"<td>{e(format_packets(b['loss_mean_pkts']))}</td>")
    out.append("<tr>" + "".join(base_cells) + "</tr>")

    for variant in variants:
        cells = [f"<td class='name'>{e(variant)}</td>"]
        for profile, sizes in profiles:
            for size in sizes:
                row = by_key.get((profile, size, variant))
                for metric in ("fct", "loss"):
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
               "the same profile and size (FCT in ms or s, loss in packets of the short flow) and the "
               "factor between the two means (larger ÷ smaller). Significance: the 95 % Welch confidence "
               "interval of the difference excludes 0; the one-way ANOVA p-value across all variants is "
               "in the summary table. “–”: no runs, or no baseline runs, at that cell.</p>")
    return "\n".join(out)


def _html_table(headers: list[str], body: list[list[str]]) -> str:
    e = html.escape
    lines = ["<table>", "<tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>"]
    for cells in body:
        lines.append("<tr>" + "".join(f"<td class='name'>{e(c)}</td>" if i < 3 else f"<td>{e(c)}</td>"
                                      for i, c in enumerate(cells)) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


# ---------------------------------------------------------------- Markdown

def markdown_report(campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
                    plots: list[Plot], root: Path) -> str:
    """report.md: metadata, the comparison as a long table with verdict words, the summary."""
    lines = [f"# startlab report: {campaign.get('scenario', 'campaign')}", ""]
    lines += [f"- **{k}**: {v}" for k, v in _metadata(campaign, records, root)]
    if not rows:
        return "\n".join(lines + ["", "No finished runs in this campaign yet.", ""])

    lines += ["", f"## Variants compared with the baseline `{campaign.get('baseline')}`", ""]
    profiles, variants, by_key = _comparison_layout(campaign, records, rows)
    compared = [by_key[(p, s, v)] for p, sizes in profiles for s in sizes for v in variants
                if (p, s, v) in by_key and verdict(by_key[(p, s, v)], "fct")]
    if compared:
        table = []
        for row in compared:
            cells = [cell_label(row), size_label(row["size_bytes"]), row["variant"]]
            for metric in ("fct", "loss"):
                diff, factor = _change(row, metric)
                shown = VERDICTS[verdict(row, metric) or "not_significant"]
                cells.append(f"{shown.arrow} {diff} ({factor}) {shown.label}")
            table.append(cells)
        lines += _md_table(["profile", "size", "variant", "FCT change", "loss change"], table)
        lines += ["", "Legend: " + "; ".join(f"{v.arrow} {v.label}: {v.meaning}" for v in VERDICTS.values())]
    else:
        lines.append("Only the baseline variant ran (or no cell has baseline runs): nothing to compare.")

    lines += ["", "## Summary", ""]
    lines += _md_table(SUMMARY_HEADERS, [_summary_cells(r) for r in rows])
    qs_rows = quickstart_rows(rows)
    if qs_rows:
        lines += ["", "## Quick-Start", ""] + _md_table(QS_HEADERS, qs_rows) + ["", QS_NOTE]
    lines += ["", "## Figures", ""]
    lines += [f"- [{p.kind} {p.profile}{'' if p.size_bytes is None else ' ' + size_label(p.size_bytes)}]"
              f"({p.path.relative_to(root).as_posix()})" for p in plots]
    return "\n".join(lines) + "\n"


def _md_table(headers: list[str], body: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    return [line(headers), "|" + "---|" * len(headers)] + [line(c) for c in body]
