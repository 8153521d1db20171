"""Analysing runs: captures → metrics.json with the fidelity checks of the run's flows.

Used by the runner right after each run and by `run.py analyze` on a finished campaign
(which needs neither root nor Mininet: only the result files and the pcap extractor).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis import flow_checks
from analysis import workloads
from machine.errors import UserError
from results import schema
from results.campaign import Campaign


def workload_analysis(name: str):
    """The analysis of workload `name`; an unknown one is a UserError listing the known."""
    known = workloads.registry()
    if name not in known:
        raise UserError(f"unknown workload '{name}' (known: {', '.join(known)})")
    return known[name]


def analyze_run(campaign: Campaign, run_dir: Path, meta: dict[str, Any]) -> list[str]:
    """Compute and write a run's metrics, mark it done; return what differs from its
    declaration (empty when its flows ran what they claimed)."""
    metrics = workload_analysis(meta["workload"]).run_metrics(run_dir, meta)
    checks = flow_checks.flow_checks(meta, metrics)
    metrics["flow_checks"] = checks
    campaign.write_metrics(run_dir, metrics)
    meta["status"] = schema.DONE
    meta.pop("analysis_error", None)
    meta["format"] = schema.FORMAT
    campaign.write_meta(run_dir, meta)
    return flow_checks.problems(checks)


def analyze_campaign(path: Path | str) -> tuple[Campaign, list[str]]:
    """Re-analyse every run whose traffic completed; (campaign, one line per run that failed
    to analyse or whose flows differ from their declaration)."""
    campaign = Campaign.open(path)
    errors = []
    for run_dir, meta in campaign.captured_runs():
        try:
            found = analyze_run(campaign, run_dir, meta)
        except UserError as exc:
            errors.append(f"{run_dir.name}: analysis failed: {exc}")
            continue
        errors += [f"{run_dir.name}: {p}" for p in found]
    return campaign, errors
