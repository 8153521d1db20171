"""The campaign runner: drives topologies → hosts → results → analysis for every run.

A campaign directory holds campaign.json and one directory per finished run. A run is
written into `<run>.partial/` and renamed only once its captures, meta.json and
metrics.json are complete, so an interrupted campaign leaves nothing that counts as
finished, and running the same command again resumes where it stopped.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from analysis.metrics import run_metrics
from analysis.report import format_table, write_report
from analysis.summary import write_atomically
from hosts.workloads.competing import WorkloadError, run_competing
from machine.errors import UserError
from machine.provenance import provenance
from scenarios.fidelity import percentile, ping_rtts
from scenarios.progress import Progress, fmt_duration
from scenarios.spec import Run, Scenario, apply_overrides, format_size, load_scenario
from topologies.network import Network

log = logging.getLogger("startlab.runner")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
FORMAT = 1
MAX_CONSECUTIVE_FAILURES = 3


def _write_json(path: Path, data: dict) -> None:
    write_atomically(path, json.dumps(data, indent=1, default=str) + "\n")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def campaign_record(sc: Scenario) -> dict:
    return {"format": FORMAT, "scenario": sc.name, "scenario_file": str(sc.path), "scenario_hash": sc.hash,
            "description": sc.description, "paper": sc.paper, "baseline": sc.baseline,
            "variants": list(sc.variants), "profiles": [p.name for p in sc.profiles], "sizes": sc.sizes,
            "reps": sc.reps, "seed": sc.seed, "workload": sc.workload,
            "workload_params": sc.workload_params.as_dict(), "overrides": sc.overrides,
            "sweep": {"param": sc.sweep.param, "values": sc.sweep.values} if sc.sweep else None,
            "variant_definitions": {n: v.describe() for n, v in sc.variants.items()},
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def open_campaign(sc: Scenario, out: Path | None) -> Path:
    """Create the campaign directory, or check that an existing one is the same campaign."""
    if out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = RESULTS / sc.name / stamp
    out = Path(out)
    existing = _read_json(out / "campaign.json")
    if existing is not None:
        if existing.get("scenario_hash") != sc.hash:
            raise UserError(f"{out} holds a campaign of a different scenario or options "
                            f"(hash {existing.get('scenario_hash')} ≠ {sc.hash}); choose another --out")
        return out
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not a startlab campaign; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "campaign.json", campaign_record(sc))
    return out


def run_is_done(campaign_dir: Path, run: Run) -> bool:
    meta = _read_json(campaign_dir / run.run_id / "meta.json")
    return bool(meta) and meta.get("status") == "done"


def quick_rtt(net: Network, samples: int = 20) -> dict:
    """Base RTT of the freshly built path, recorded in every run's meta.json."""
    n = net.names
    client = net.host(n.client(1))
    ping_rtts(client, n.server_ip(1), 1, 0.2)
    rtts = ping_rtts(client, n.server_ip(1), samples, max(0.01, min(0.05, net.profile.rtt_s / 10)))
    if not rtts:
        raise WorkloadError("the path does not answer pings")
    return {"rtt_configured_ms": net.profile.rtt_ms, "rtt_mean_ms": round(statistics.fmean(rtts), 3),
            "rtt_p99_ms": round(percentile(rtts, 99), 3), "rtt_samples": len(rtts)}


def execute_run(sc: Scenario, run: Run, net: Network, campaign_dir: Path, docroot: Path,
                fidelity: dict) -> dict:
    """One run into `<run>.partial/`, renamed to `<run>/` when complete. Returns its meta."""
    partial = campaign_dir / f"{run.run_id}.partial"
    final = campaign_dir / run.run_id
    for stale in (partial, final, campaign_dir / f"{run.run_id}.failed"):
        if stale.exists():
            shutil.rmtree(stale)
    partial.mkdir(parents=True)
    t0 = time.monotonic()
    drops_before = net.queue_drops()
    try:
        app = run_competing(net, sc.variants[run.variant], run.size_bytes, partial, docroot,
                            sc.params_for(run))
    except BaseException:
        if partial.exists():
            shutil.rmtree(partial)
        raise
    drops_after = net.queue_drops()
    meta = {
        "format": FORMAT, "status": "captured", "run_id": run.run_id, "scenario": sc.name,
        "scenario_hash": sc.hash, "profile": run.profile, "size_bytes": run.size_bytes,
        "variant": run.variant, "rep": run.rep, "variant_definition": sc.variants[run.variant].describe(),
        "profile_params": net.profile.as_dict(), "link": net.applied(), "fidelity": fidelity,
        "queue_drops": {k: drops_after[k] - drops_before.get(k, 0) for k in drops_after},
        "workload": sc.workload, "workload_params": sc.params_for(run).as_dict(),
        "spec": app["spec"], "app": {"curl": app["curl"], "captures": app["captures"]},
        "router_counters": app["router_counters"], "link_use": app["link_use"],
        "load_shaper": app["load_shaper"],
        "sweep": {run.sweep[0]: run.sweep[1]} if run.sweep else {},
        "timings": app["timings"], "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **provenance(),
    }
    _write_json(partial / "meta.json", meta)
    t1 = time.monotonic()
    try:
        analyse_run(partial, meta)
    except Exception as exc:      # keep the captures; `run.py analyze` can retry
        meta["analysis_error"] = f"{type(exc).__name__}: {exc}"
        log.warning("analysis of %s failed: %s", run.run_id, exc)
    meta["timings"]["analysis_s"] = time.monotonic() - t1
    meta["timings"]["run_s"] = time.monotonic() - t0
    _write_json(partial / "meta.json", meta)
    os.rename(partial, final)
    return meta


def analyse_run(run_dir: Path, meta: dict) -> None:
    """Captures → metrics.json; marks the run done."""
    metrics = run_metrics(run_dir, meta["spec"])
    _write_json(run_dir / "metrics.json", {"format": FORMAT, **metrics})
    meta["status"] = "done"
    meta.pop("analysis_error", None)
    _write_json(run_dir / "meta.json", meta)


def run_campaign(sc: Scenario, out: Path | None, delay_backend: str = "auto") -> tuple[Path, dict]:
    campaign_dir = open_campaign(sc, out)
    for stale in campaign_dir.glob("*.partial"):
        shutil.rmtree(stale)
    runs = sc.runs()
    todo = [r for r in runs if not run_is_done(campaign_dir, r)]
    progress = Progress(len(runs), len(runs) - len(todo))
    stats = {"runs": len(runs), "skipped": len(runs) - len(todo), "failed": [], "overhead_s": 0.0,
             "traffic_s": 0.0, "network_setup_s": 0.0, "network_teardown_s": 0.0}
    docroot = Path(tempfile.mkdtemp(prefix="startlab-www-"))
    t_start = time.monotonic()
    profiles = {p.name: p for p in sc.profiles}
    failures_in_a_row = 0
    try:
        for profile_name, group in itertools.groupby(todo, key=lambda r: r.profile):
            net_dir = campaign_dir / "networks" / f"{profile_name}-{datetime.now().strftime('%H%M%S')}"
            with Network(profiles[profile_name], net_dir, delay_backend=delay_backend) as net:
                fidelity = quick_rtt(net)
                for run in group:
                    progress.show(f"{run.profile} {format_size(run.size_bytes)} {run.variant} #{run.rep}")
                    try:
                        meta = execute_run(sc, run, net, campaign_dir, docroot, fidelity)
                        failures_in_a_row = 0
                        t = meta["timings"]
                        stats["traffic_s"] += t.get("long_before_short_s", 0) + t.get("short_s", 0)
                        stats["overhead_s"] += t.get("setup_s", 0) + t.get("stop_s", 0) + t.get("analysis_s", 0)
                    except (WorkloadError, RuntimeError) as exc:
                        failures_in_a_row += 1
                        stats["failed"].append({"run": run.run_id, "error": str(exc)})
                        failed = campaign_dir / f"{run.run_id}.failed"
                        failed.mkdir(exist_ok=True)
                        (failed / "error.txt").write_text(f"{exc}\n")
                        log.warning("run %s failed: %s", run.run_id, exc)
                        if failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
                            raise UserError(f"{failures_in_a_row} runs in a row failed; last: {exc}") from exc
                    progress.advance()
            _write_json(net_dir / "network.json", {"applied": net.applied(), "timings": net.timings,
                                                   "delay_stats": net.delay_stats, "fidelity": fidelity})
            stats["network_setup_s"] += net.timings.get("setup_s", 0)
            stats["network_teardown_s"] += net.timings.get("teardown_s", 0)
    finally:
        progress.close()
        shutil.rmtree(docroot, ignore_errors=True)
    stats["wall_s"] = time.monotonic() - t_start
    return campaign_dir, stats


def report_figures(campaign_dir: Path) -> dict:
    """What `run --json` prints: file paths and the per-variant rows of the summary."""
    summary = _read_json(campaign_dir / "summary.json") or {}
    rows = summary.get("rows", [])
    per_variant: dict[str, list] = {}
    for row in rows:
        per_variant.setdefault(row["variant"], []).append(
            {k: row.get(k) for k in ("profile", "size_bytes", "sweep_value", "runs", "fct_mean_s", "fct_median_s",
                                     "fct_ci_low_s", "fct_ci_high_s", "loss_mean_pkts", "retx_mean_pkts",
                                     "fairness_median", "fct_diff_s", "fct_significant")})
    return {"campaign": str(campaign_dir), "summary_csv": str(campaign_dir / "summary.csv"),
            "summary_json": str(campaign_dir / "summary.json"), "report": str(campaign_dir / "report.html"),
            "baseline": summary.get("campaign", {}).get("baseline"), "variants": per_variant}


def _finish(campaign_dir: Path, as_json: bool, stats: dict | None) -> int:
    write_report(campaign_dir)
    figures = report_figures(campaign_dir)
    if stats is not None:
        figures["run_stats"] = stats
    if as_json:
        print(json.dumps(figures, indent=2, default=str))
    else:
        summary = _read_json(campaign_dir / "summary.json") or {}
        print(format_table(summary.get("rows", [])))
        if stats:
            print(f"\n{stats['runs'] - stats['skipped'] - len(stats['failed'])} runs done, "
                  f"{stats['skipped']} already done, {len(stats['failed'])} failed, "
                  f"wall {fmt_duration(stats['wall_s'])}")
        print(f"report: {campaign_dir / 'report.html'}")
    return 1 if stats and stats["failed"] else 0


def run_campaign_cli(args) -> int:
    sc = apply_overrides(load_scenario(args.scenario), args.profiles, args.sizes, args.variants, args.reps)
    campaign_dir, stats = run_campaign(sc, Path(args.out) if args.out else None, args.delay_backend)
    return _finish(campaign_dir, args.json, stats)


def analyze_cli(args) -> int:
    campaign_dir = Path(args.dir)
    if _read_json(campaign_dir / "campaign.json") is None:
        raise UserError(f"{campaign_dir}: not a campaign directory (no campaign.json)")
    errors = []
    for meta_path in sorted(campaign_dir.glob("*/meta.json")):
        meta = _read_json(meta_path)
        if not meta or meta.get("status") not in ("done", "captured"):
            continue
        try:
            analyse_run(meta_path.parent, meta)
        except Exception as exc:
            errors.append(f"{meta_path.parent.name}: {exc}")
    for err in errors:
        print(f"startlab: analysis failed for {err}")
    return _finish(campaign_dir, args.json, None) or (1 if errors else 0)


def report_cli(args) -> int:
    campaign_dir = Path(args.dir)
    if _read_json(campaign_dir / "campaign.json") is None:
        raise UserError(f"{campaign_dir}: not a campaign directory (no campaign.json)")
    return _finish(campaign_dir, args.json, None)


def compare_cli(args) -> int:
    from analysis.compare import compare_campaigns
    return compare_campaigns(Path(args.old), Path(args.new), args.json)


def demo_cli(args) -> int:
    """The README's main job: the embedded smoke scenario, its table and report."""
    sc = load_scenario(ROOT / "scenarios" / "smoke.yaml")
    campaign_dir, stats = run_campaign(sc, None)
    return _finish(campaign_dir, args.json, stats)
