"""Per-(profile, size, variant) summary of a campaign: summary.csv and summary.json.

The first eleven CSV columns are the stable interface other tools and acceptance
checks read (see DESIGN.md); further columns carry the comparison with the baseline
that the report's Table-1-style view is built from.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from analysis import stats
from analysis.records import RunRecord

SUMMARY_FORMAT = 1

COLUMNS = [
    # stable interface
    "profile", "size_bytes", "variant", "runs",
    "fct_mean_s", "fct_median_s", "fct_ci_low_s", "fct_ci_high_s",
    "loss_mean_pkts", "retx_mean_pkts", "fairness_median",
    # further figures
    "loss_median_pkts", "inflation_mean",
    # comparison with the baseline at the same (profile, size); empty for the baseline
    "fct_diff_s", "fct_diff_ci_low_s", "fct_diff_ci_high_s", "fct_ratio",
    "fct_significant", "fct_within_one_rtt",
    "loss_diff_pkts", "loss_ratio", "loss_significant",
    "anova_fct_p",
    # the profile's configured figures, for reading the above
    "rtt_s", "rate_bps",
    # Quick-Start of the flow under test (empty where no run carries a Quick-Start block)
    "qs_requested_ratio", "qs_approval_ratio", "qs_failure_ratio", "qs_bytes_mean",
    # the swept workload parameter and its value (empty without a sweep); then the
    # bottleneck over the fetch: sent bytes ÷ capacity × time, drops ÷ arrivals (empty if
    # the runs did not record them)
    "sweep_param", "sweep_value", "utilisation_mean", "drop_rate_mean",
]

Row = dict[str, Any]


def summary_rows(campaign: dict[str, Any], records: list[RunRecord]) -> list[Row]:
    """One row per (profile, size, sweep value, variant) present in the records, in campaign
    order; variants are compared with the baseline at the same point of the matrix."""
    groups: dict[tuple[str, int, Optional[float], str], list[RunRecord]] = defaultdict(list)
    for rec in records:
        groups[(rec["profile"], rec["size_bytes"], sweep_value(rec), rec["variant"])].append(rec)

    baseline = campaign.get("baseline")
    rows: list[Row] = []
    for profile, size in ordered_cells(campaign, records):
        points = sorted({k[2] for k in groups if k[:2] == (profile, size)}, key=lambda x: (x is not None, x))
        for point in points:
            variants = [v for v in ordered_variants(campaign, records) if (profile, size, point, v) in groups]
            fct_groups = [[r["short"]["fct_s"] for r in groups[(profile, size, point, v)]] for v in variants]
            anova = stats.anova_p(fct_groups)
            base = groups.get((profile, size, point, baseline)) if baseline else None
            for variant in variants:
                runs = groups[(profile, size, point, variant)]
                row = _describe(profile, size, variant, runs)
                row["anova_fct_p"] = anova
                if base and variant != baseline:
                    row.update(_compare(runs, base))
                rows.append(row)
    return rows


def sweep_value(rec: RunRecord) -> Optional[float]:
    """The value of the run's swept workload parameter (None without a sweep)."""
    return next(iter(rec["sweep"].values()), None) if rec.get("sweep") else None


def ordered_cells(campaign: dict[str, Any], records: list[RunRecord]) -> list[tuple[str, int]]:
    """The (profile, size) cells with runs: profiles in campaign order, sizes ascending."""
    order = {name: i for i, name in enumerate(campaign.get("profiles") or [])}
    cells = {(r["profile"], r["size_bytes"]) for r in records}
    return sorted(cells, key=lambda c: (order.get(c[0], len(order)), c[0], c[1]))


def ordered_variants(campaign: dict[str, Any], records: list[RunRecord]) -> list[str]:
    """Variants with runs: the baseline first, then campaign order, then any others by name."""
    listed = list(campaign.get("variants") or [])
    baseline = campaign.get("baseline")
    if baseline:
        listed = [baseline] + [v for v in listed if v != baseline]
    present = {r["variant"] for r in records}
    return [v for v in listed if v in present] + sorted(present - set(listed))


def _describe(profile: str, size: int, variant: str, runs: list[RunRecord]) -> Row:
    fct = [r["short"]["fct_s"] for r in runs]
    loss = [r["short"]["lost_pkts"] for r in runs]
    fairness = [r["fairness_ratio"] for r in runs if r["fairness_ratio"] is not None]
    # inflation is undefined for a run whose short flow sent nothing at the bottleneck capture
    inflation = [r["short"]["inflation"] for r in runs if r["short"].get("inflation") is not None]
    ci = stats.mean_ci(fct)
    row: Row = {c: None for c in COLUMNS}
    row.update(
        profile=profile, size_bytes=size, variant=variant, runs=len(runs),
        fct_mean_s=stats.mean(fct), fct_median_s=stats.median(fct),
        fct_ci_low_s=ci[0] if ci else None, fct_ci_high_s=ci[1] if ci else None,
        loss_mean_pkts=stats.mean(loss),
        retx_mean_pkts=stats.mean([r["short"]["retx_pkts"] for r in runs]),
        fairness_median=stats.median(fairness) if fairness else None,
        loss_median_pkts=stats.median(loss),
        inflation_mean=stats.mean(inflation) if inflation else None,
        rtt_s=runs[0]["rtt_s"], rate_bps=runs[0]["rate_bps"],
    )
    row.update(quickstart_figures(runs))
    row.update(_link_figures(runs))
    return row


def _link_figures(runs: list[RunRecord]) -> Row:
    sweep = runs[0].get("sweep") or {}
    use = [r["link_use"] for r in runs if r.get("link_use") and r["link_use"].get("utilisation") is not None]
    return {
        "sweep_param": next(iter(sweep), None), "sweep_value": next(iter(sweep.values()), None),
        "utilisation_mean": stats.mean([u["utilisation"] for u in use]) if use else None,
        "drop_rate_mean": stats.mean([u["drop_rate"] for u in use]) if use else None,
    }


def quickstart_figures(runs: list[RunRecord]) -> Row:
    """The Allman/Floyd/Sarolahti paper's per-scenario Quick-Start figures over `runs`.

    requested ratio = runs whose SYN-ACK carried a request ÷ runs with a Quick-Start block;
    approval ratio = approved ÷ requested; failure ratio = approved runs that lost a
    Quick-Start packet ÷ approved; bytes mean = data sent in the Quick-Start phase, mean
    over the approved runs. A ratio without a denominator is None, as are all four when no
    run carries the block (campaigns analysed before Quick-Start existed, other metrics).
    """
    blocks = [r["quickstart"] for r in runs if r.get("quickstart") is not None]
    requested = [b for b in blocks if b.get("requested")]
    approved = [b for b in requested if b.get("approved")]
    return {
        "qs_requested_ratio": len(requested) / len(blocks) if blocks else None,
        "qs_approval_ratio": len(approved) / len(requested) if requested else None,
        "qs_failure_ratio": (sum(1 for b in approved if b.get("qs_failure")) / len(approved)
                             if approved else None),
        "qs_bytes_mean": stats.mean([b.get("qs_bytes", 0) for b in approved]) if approved else None,
    }


def _compare(runs: list[RunRecord], base: list[RunRecord]) -> Row:
    fct = [r["short"]["fct_s"] for r in runs]
    fct_base = [r["short"]["fct_s"] for r in base]
    loss = [r["short"]["lost_pkts"] for r in runs]
    loss_base = [r["short"]["lost_pkts"] for r in base]
    d_fct = stats.welch_difference(fct, fct_base)
    d_loss = stats.welch_difference(loss, loss_base)
    return {
        "fct_diff_s": d_fct.diff,
        "fct_diff_ci_low_s": d_fct.ci[0] if d_fct.ci else None,
        "fct_diff_ci_high_s": d_fct.ci[1] if d_fct.ci else None,
        "fct_ratio": stats.ratio_of_means(fct, fct_base),
        "fct_significant": d_fct.significant,
        "fct_within_one_rtt": stats.within_one_rtt(d_fct.diff, runs[0]["rtt_s"]),
        "loss_diff_pkts": d_loss.diff,
        "loss_ratio": stats.ratio_of_means(loss, loss_base),
        "loss_significant": d_loss.significant,
    }


def write_summary(campaign_dir: Path | str, campaign: dict[str, Any],
                  records: list[RunRecord]) -> list[Row]:
    """Write summary.csv and summary.json into the campaign directory; return the rows."""
    root = Path(campaign_dir)
    rows = summary_rows(campaign, records)
    write_atomically(root / "summary.csv", _csv_text(rows))
    document = {"format": SUMMARY_FORMAT, "campaign": campaign, "columns": COLUMNS, "rows": rows}
    write_atomically(root / "summary.json", json.dumps(document, indent=2, allow_nan=False) + "\n")
    return rows


def _csv_text(rows: Iterable[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_csv_cell(row[c]) for c in COLUMNS])
    return out.getvalue()


def _csv_cell(value: Any) -> str:
    """Empty for missing figures, lowercase booleans, full float precision (repr)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def write_atomically(path: Path, data: Union[str, bytes]) -> None:
    """Write via a temporary file in the same directory and rename it into place.

    A reader (or a campaign interrupted mid-analysis) then sees the old file or the
    complete new one, never a half-written result. All analysis outputs go through here.
    """
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

