"""Each scheme behind each queue: the report's comparison of the queues a campaign's
`shapers:` put every profile behind (campaign.json's `behind`, scenarios/spec.behind_each).

The summary compares schemes behind one queue; this compares one scheme behind each queue
with the same scheme behind the file's first queue (the FIFO, typically): an AQM changes
what a startup's overshoot costs, so a scheme can gain behind one queue and lose behind
another. It is the summary's own computation (summary_rows) on the runs relabelled, each
(profile, variant) a cell and each queue a "variant" whose baseline is the first queue, so
its figures, intervals and tests are the summary's.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from analysis.summary import ordered_variants, summary_rows
from analysis.workloads.base import Row, Section, WorkloadAnalysis
from results.campaign import RunRecord


def queue_rows(campaign: dict[str, Any], records: list[RunRecord], analysis: WorkloadAnalysis) -> list[Row]:
    """The workload's summary rows with `profile` "PROFILE, VARIANT" and `variant` the queue,
    each compared with the first queue's; [] for a campaign with one queue."""
    behind: dict[str, dict[str, str]] = campaign.get("behind") or {}
    placed = [r for r in records if r.profile in behind]
    if not placed or not analysis.compared:
        return []
    queues = list(dict.fromkeys(b["queue"] for b in behind.values()))
    bases = list(dict.fromkeys(b["profile"] for b in behind.values()))
    variants = ordered_variants(campaign, placed)
    relabelled = [replace(r, profile=f"{behind[r.profile]['profile']}, {r.variant}",
                          variant=behind[r.profile]["queue"]) for r in placed]
    view = {**campaign, "profiles": [f"{b}, {v}" for b in bases for v in variants], "variants": queues,
            "baseline": queues[0]}
    return summary_rows(view, relabelled, analysis)


def sections(campaign: dict[str, Any], records: list[RunRecord], analysis: WorkloadAnalysis) -> list[Section]:
    """"Behind each queue": the workload's summary table per (profile, variant) and queue,
    with the primary figure's change from the first queue and that change's 95 % interval."""
    from analysis.report import format_value
    rows = queue_rows(campaign, records, analysis)
    if not rows:
        return []
    metric = analysis.compared[0]
    first = next(r["variant"] for r in rows)
    renamed = {"profile": "profile, variant", "variant": "queue",
               f"Δ{metric.label} vs baseline": f"Δ{metric.label} vs {first}"}
    headers = [renamed.get(h, h) for h in analysis.display_headers] + [f"Δ{metric.label} 95% CI"]

    def interval(row: Row) -> str:
        low, high = row.get(metric.col("diff_ci_low")), row.get(metric.col("diff_ci_high"))
        if low is None or high is None:
            return ""
        return f"{format_value(low, metric.unit, signed=True)} – {format_value(high, metric.unit, signed=True)}"
    table = [analysis.display(row) + [interval(row)] for row in rows]
    note = (f"Each variant behind each queue against the same variant behind {first} (the scenario's first "
            f"queue), at the same profile and size: Δ{metric.label} is the difference of the means, its interval "
            "Welch's at 95 %, the arrow as in the summary; the ANOVA is across the queues.")
    return [Section("Behind each queue", headers, table, note)]
