"""The campaign runner: drives topologies → hosts → results → analysis for every run.

A run is written into `<run>.partial/` and renamed only once its captures, meta.json and
metrics.json are complete, so an interrupted campaign leaves nothing that counts as
finished, and running the same command again resumes where it stopped. A run whose
traffic failed, or whose flows did not run what their variants declared, is kept as
`<run>.failed/` with its error and does not count.
"""
from __future__ import annotations

import itertools
import logging
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

from analysis.runs import analyze_run
from hosts.ping import PING_FRAME_BYTES, pair_rtts, path_rtt, ping_tail_flags
from hosts.session import RunSession
from hosts.workloads.base import WorkloadError
from machine import clock, host
from machine.cpuset import confinement
from machine.errors import HostUnfit, UserError
from machine.provenance import provenance, slurm_task
from results import export, schema
from results.campaign import Campaign
from scenarios import hostcheck
from scenarios.progress import Progress
from scenarios.spec import Run, Scenario
from scenarios.stats import new_stats
from links import delay
from links.hostfit import delay_flags
from topologies.endhosts import EndHostDefaults
from topologies.network import Network

log = logging.getLogger("startlab.runner")
ROOT = Path(__file__).resolve().parent.parent
# Campaigns go here by default (`results/` is the result-format code package; before
# format 3 campaigns were written to results/<scenario>/…, which every command still reads).
CAMPAIGNS = ROOT / "campaigns"
MAX_CONSECUTIVE_FAILURES = 3


class RunFailed(RuntimeError):
    """A run that did not produce a valid result (kept as <run>.failed/)."""


def open_campaign(sc: Scenario, out: Path | None) -> Campaign:
    """Create the campaign directory, or check that an existing one is the same campaign."""
    if out is None:
        out = CAMPAIGNS / sc.name / datetime.now().strftime("%Y%m%d-%H%M%S")
    record = {"format": schema.FORMAT, **sc.record(),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return Campaign.create_or_resume(Path(out), record)


SCRATCH_PREFIX = ".scratch-"


def scratch_dir(campaign_dir: Path) -> Path:
    """Files the applications serve, inside the campaign (so a killed campaign leaves nothing
    elsewhere): one per running process, and those of dead processes removed."""
    for old in campaign_dir.glob(f"{SCRATCH_PREFIX}*"):
        pid = old.name[len(SCRATCH_PREFIX):]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    scratch = campaign_dir / f"{SCRATCH_PREFIX}{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


def execute_run(sc: Scenario, run: Run, net: Network, campaign: Campaign, scratch: Path, path: dict,
                lane: int | None = None, host_rec: dict | None = None) -> dict:
    """One run into `<run>.partial/`, renamed to `<run>/` when complete. Returns its meta."""
    partial = campaign.start_run(run.run_id)
    t0 = time.monotonic()
    params = sc.params_for(run)
    cpu0 = clock.cpu_times()
    irq0 = clock.interrupts() if clock.is_virtual() else {}
    try:
        with RunSession(net, sc.variants[run.variant], partial, scratch, sc.variant, rep=run.rep) as session:
            result = sc.workload.run(session, params, run.size_bytes)
            confined = None if lane is None else confinement(lane, net.instance)
    except (WorkloadError, RuntimeError) as exc:
        why = f"{exc}{clock.failure_note(cpu0)}"
        export_run(campaign.fail_run(run.run_id, f"{type(exc).__name__}: {why}"))
        raise RunFailed(why) from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    meta = {
        "format": schema.FORMAT, "status": schema.CAPTURED, "run_id": run.run_id, "scenario": sc.name,
        "scenario_hash": sc.hash, **sc.declaration(run), "link": net.applied(), "path": path,
        "spec": result.spec, "app": result.app, **result.extra, **session.record(),
        **({"lane": confined} if confined is not None else {}),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **provenance(),
    }
    meta["host_check"] = {**hostcheck.run_record(host_rec, run.profile), **meta.get("host_check", {})}
    meta["run_clock"] = clock.record()
    if clock.is_virtual():
        # The guest's CPU over the run (session set-up to teardown), in guest time: its
        # saturation is the virtual clock's one way to be wrong, flagged the same on any host.
        meta["guest_cpu"] = clock.guest_cpu(cpu0, clock.cpu_times())
        meta["guest_interrupts"] = clock.interrupt_delta(irq0, clock.interrupts())
        meta["host_check"]["flags"] = [*meta["host_check"].get("flags", []),
                                       *clock.saturation_flags(meta["guest_cpu"]["busy_fraction"])]
    if meta["host_check"].get("forced") and not (meta["host_check"].get("verdict") or {}).get("ok", True):
        meta["host_check"]["flags"] = [f"run on a host the calibration found unfit for {run.profile} "
                                 f"({hostcheck.ALLOW_FLAG}): {meta['host_check']['verdict']['reason']}",
                                 *meta["host_check"].get("flags", [])]
    campaign.write_meta(partial, meta)
    t1 = time.monotonic()
    problems: list[str] = []
    if confined is not None and confined["outside"]:
        problems.append(f"lane {lane}: processes outside its cpuset or CPUs: {confined['outside']}")
    try:
        problems += analyze_run(campaign, partial, meta)
    except Exception as exc:      # keep the captures; `run.py analyze` can retry
        meta["analysis_error"] = f"{type(exc).__name__}: {exc}"
        log.warning("analysis of %s failed: %s", run.run_id, exc)
    meta["timings"]["analysis_s"] = time.monotonic() - t1
    meta["timings"]["run_s"] = time.monotonic() - t0
    campaign.write_meta(partial, meta)
    if problems:
        export_run(campaign.fail_run(run.run_id, "the run differs from its declaration:\n" + "\n".join(problems)))
        raise RunFailed("; ".join(problems))
    export_run(campaign.finish_run(run.run_id))
    return meta


def export_run(run_dir: Path) -> None:
    """In a guest on the virtual clock: send the run, whole, to the host (results/export.py)."""
    port = os.environ.get("STARTLAB_EXPORT")
    if port:
        export.export(run_dir, run_dir.name, port)


def export_campaign(campaign_dir: Path) -> None:
    """In a guest on the virtual clock, after the last run: the campaign's own files (its
    record, networks, statistics) as one record, unpacked beside the runs."""
    port = os.environ.get("STARTLAB_EXPORT")
    if not port:
        return
    files = campaign_dir / export.CAMPAIGN_FILES
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir()
    for p in campaign_dir.iterdir():
        if p.is_file():
            shutil.copy2(p, files / p.name)
        elif p.name == schema.NETWORKS_DIR:
            shutil.copytree(p, files / p.name)
    export.export(files, export.CAMPAIGN_FILES, port)


SETTLE_WINDOW_S = 1.0       # building a network stalls the host for a moment: wait for
SETTLE_TIMEOUT_S = 3.0      # a quiet window of this length, at most this long


def settle(net: Network) -> None:
    """Wait until the host monitor sees a SETTLE_WINDOW_S window without late wake-ups
    (namespaces, links and qdiscs just made keep the kernel busy for a moment), at most
    SETTLE_TIMEOUT_S; an unsettled host then shows in the path check's flags."""
    if net.monitor is None:
        return
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        before = net.monitor.snapshot()
        time.sleep(SETTLE_WINDOW_S)
        if not delay_flags(host.interval(before, net.monitor.snapshot()), None):
            return


# The path check's pings (a warm-up and 20 spaced ones) take well under this.
DELAY_STEP_MARGIN_S = 2.0


def check_path(net: Network, rtts_ms: dict | None, host_rec: dict | None) -> dict:
    """The path's base RTT (and every pair's, on a multi-RTT path) before any run uses it,
    with the host's flags over exactly that window: the figures a run's meta.json keeps.

    Per-pair base RTTs off their declaration refuse the campaign in one line: the host's
    reason when it was late meanwhile (HostUnfit; with --unfit-host the runs go ahead,
    flagged), else the delay line is suspect (UserError)."""
    n = net.names
    settle(net)
    # A path whose delay steps (a delay trace): ping within one step, against that step's RTT.
    to_step = net.next_delay_step_s(time.monotonic())
    if to_step < DELAY_STEP_MARGIN_S:
        time.sleep(to_step + 0.05)
    before = (net.monitor.snapshot() if net.monitor else None, net.delay_snapshot())
    configured = (rtts_ms or {}).get((1, 1), round(net.rtt_at_ms(time.monotonic()), 3))
    path = path_rtt(net.host(n.client(1)), n.server_ip(1), configured,
                    queued_ms=net.lone_frame_queue_ms(PING_FRAME_BYTES))
    if net.profile.has_delay_trace:
        path["delay_trace_rtt_ms"] = configured
    if rtts_ms:
        path["pairs"] = pair_rtts(net, rtts_ms)
    window = host.interval(before[0], net.monitor.snapshot()) if net.monitor else None
    lateness = [delay.interval_figures(b, a) for b, a in zip(before[1], net.delay_snapshot())]
    path["host_flags"] = delay_flags(window, lateness)
    path["host"] = window.brief() if window else None
    off = {k: v for k, v in (path.get("pairs") or {}).items() if not v["ok"]}
    if not off:
        return path
    figures = ", ".join(f"{k} mean {v['rtt_mean_ms']} ms (min {v.get('rtt_min_ms')}, {v['rtt_late']['late']} of "
                        f"{v['rtt_samples']} pings late) for {v['rtt_expected_ms']}" for k, v in list(off.items())[:3])
    more = f" and {len(off) - 3} more" if len(off) > 3 else ""
    # A pair's mean pulled off by a host stall the monitor measured is the host's.
    tails = {k: ping_tail_flags(v, window) for k, v in off.items()}
    if not path["host_flags"] and all(tails.values()):
        path["host_flags"] = [f"{k}: {flag}" for k, flags in tails.items() for flag in flags]
    if not path["host_flags"]:
        raise UserError(f"per-pair base RTTs not as declared ({figures}{more}) while the host was punctual "
                        f"({window.describe() if window else 'no monitor'}): the delay line is suspect")
    problem = HostUnfit(f"per-pair base RTTs not as declared ({figures}{more}): {'; '.join(path['host_flags'])}. "
                        f"Run again on a quieter host, or with {hostcheck.ALLOW_FLAG} (every run is flagged)")
    if host_rec is not None and host_rec.get("allow_unfit"):
        path["flags"] = [str(problem)]          # run anyway, as asked: every run carries it
        log.warning("%s", problem)
        return path
    raise problem


def select_runs(sc: Scenario, only: set[str] | None) -> list[Run]:
    """The scenario's runs in their seeded order, restricted to `only` (a lane's or shard's list)."""
    runs = sc.runs()
    if only is None:
        return runs
    unknown = sorted(only - {r.run_id for r in runs})
    if unknown:
        raise UserError(f"run list names runs the scenario does not have: {', '.join(unknown[:5])}"
                        + (" …" if len(unknown) > 5 else ""))
    return [r for r in runs if r.run_id in only]


def refuse_unavailable(sc: Scenario) -> None:
    """A variant this kernel cannot run stops the campaign before any network is built, with
    the kernel's reason (hosts.implementations.base.Implementation.unavailable)."""
    for name, variant in sc.used_variants().items():
        why = variant.unavailable()
        if why:
            raise UserError(f"{sc.path}: variant {name} cannot run on this kernel ({os.uname().release}): {why}")


def run_campaign(sc: Scenario, out: Path | None, delay_backend: str = "auto", only: set[str] | None = None,
                 lane: int | None = None, host_rec: dict | None = None,
                 shared: bool = False) -> tuple[Campaign, dict]:
    """Run what is not finished yet of the scenario (or of `only`). A lane (`lane` set) is
    one of several workers on one campaign: it leaves the others' partial runs alone and
    adopts the campaign's host calibration. A cluster's task (`shared`) leaves them alone
    too, but keeps its own node's `host_rec` in its runs only. Otherwise `host_rec`
    (hostcheck.check_host) is recorded in the campaign."""
    refuse_unavailable(sc)
    campaign = open_campaign(sc, out)
    if lane is not None:
        host_rec = hostcheck.adopt(campaign.path)
    elif not shared:
        campaign.clear_partials()
        if host_rec is not None:
            hostcheck.record(campaign.path, host_rec)
    runs = select_runs(sc, only)
    todo = [r for r in runs if not campaign.is_done(r.run_id)]
    progress = Progress(len(runs), len(runs) - len(todo))
    stats = new_stats(len(runs), len(todo))
    scratch = scratch_dir(campaign.path)
    t_start = time.monotonic()
    profiles = {p.name: p for p in sc.profiles}
    failures_in_a_row = 0
    try:
        for profile_name, group in itertools.groupby(todo, key=lambda r: r.profile):
            task = slurm_task().get("task")          # tasks of a cluster share the campaign too
            net_name = (f"{profile_name}-{datetime.now().strftime('%H%M%S')}"
                        + (f"-lane{lane}" if lane is not None else f"-task{task}" if task else ""))
            net_dir = campaign.path / schema.NETWORKS_DIR / net_name
            needs = sc.host_needs()
            with Network(profiles[profile_name], net_dir, pairs=needs.pairs, delay_backend=delay_backend,
                         shaper=sc.shaper_for(profiles[profile_name]), pair_rtts_ms=needs.rtts_ms,
                         defaults=EndHostDefaults(ecn=sc.ecn)) as net:
                path = check_path(net, needs.rtts_ms, host_rec)
                for run in group:
                    progress.show(run.run_id)
                    try:
                        meta = execute_run(sc, run, net, campaign, scratch, path, lane, host_rec)
                        failures_in_a_row = 0
                        t = meta["timings"]
                        stats["traffic_s"] += sc.workload.traffic_s(t)
                        stats["overhead_s"] += t.get("setup_s", 0) + t.get("stop_s", 0) + t.get("analysis_s", 0)
                    except RunFailed as exc:
                        failures_in_a_row += 1
                        stats["failed"].append({"run": run.run_id, "error": str(exc)})
                        log.warning("run %s failed: %s", run.run_id, exc)
                        if failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
                            raise UserError(f"{failures_in_a_row} runs in a row failed; last: {exc}") from exc
                    progress.advance()
            campaign.write_network(net_name, {"applied": net.applied(), "timings": net.timings,
                                              "host": net.host_timing.brief() if net.host_timing else None,
                                              "host_flags": net.host_flags(),
                                              "delay_stats": net.delay_stats, "path": path})
            stats["network_setup_s"] += net.timings.get("setup_s", 0)
            stats["network_teardown_s"] += net.timings.get("teardown_s", 0)
    finally:
        progress.close()
        shutil.rmtree(scratch, ignore_errors=True)
    stats["wall_s"] = time.monotonic() - t_start
    return campaign, stats
