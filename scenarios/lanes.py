"""Lanes: several independent testbeds at once on one machine, writing into one campaign.

Each lane is a worker process (`run.py run … --lane K --only FILE`) that joins its own
cpuset before it starts anything, so its Mininet shells, delay line and workload programs
run on its CPUs only (the kernel narrows their affinity; the network steers each lane's
packet processing to the same CPUs, see topologies/network.py). A worker builds its own
instance (prefix, registry entry) and builds each of its networks once: the runs of a
profile are dealt over the lanes, not the profiles. The campaign directory is shared: a
run is claimed by exactly one lane and appears only when complete, so resuming works as
for one lane. This process only plans, starts, watches and cleans up.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from machine import cpuset, registry
from machine.errors import UserError
from results.campaign import Campaign
from scenarios.progress import Progress
from scenarios.spec import Run, Scenario
from scenarios.stats import add_stats, new_stats

LANES_DIR = "lanes"            # inside the campaign: each lane's run list, log and stats
CPUS_PER_LANE = 2              # a lane's end hosts, routers and delay line share these
RUN_PY = Path(__file__).resolve().parent.parent / "run.py"
STOP_GRACE_S = 120.0           # a worker tears its network down on SIGTERM; give it time
CPUSET_REMOVE_S = 30.0         # a lane's last processes leave its cpuset within this

log = logging.getLogger("startlab.lanes")


def auto_lanes(cpus: int) -> int:
    """As many lanes as the machine has CPU pairs (at least one)."""
    return max(1, cpus // CPUS_PER_LANE)


def choose_lanes(requested: str, cpus: int, force: bool) -> int:
    """`--lanes N|auto` → the number of lanes, refusing more than the CPUs allow unless forced."""
    allowed = auto_lanes(cpus)
    if requested == "auto":
        return allowed
    try:
        n = int(requested)
    except ValueError:
        raise UserError(f"--lanes: expected a number or 'auto', got '{requested}'") from None
    if n < 1:
        raise UserError(f"--lanes: at least 1, got {n}")
    if n > cpus:
        raise UserError(f"--lanes {n}: this machine lets this process use {cpus} CPUs; a lane needs "
                        "at least one of its own")
    if n > allowed and not force:
        raise UserError(f"--lanes {n}: {cpus} CPUs allow {allowed} lane(s) with {CPUS_PER_LANE} CPUs each "
                        f"(the end hosts and the delay line of a lane share its CPUs; with fewer, "
                        "delay lateness grows and results drift). Pass --force to run anyway")
    return n


def deal_runs(runs: Sequence[Run], lanes: int) -> list[list[Run]]:
    """Deal the runs over lanes (or hosts): each profile's runs to every lane, so each lane
    builds each network once, and the repetitions of every cell (profile, size, sweep
    value, variant) spread over the lanes, so a lane that differs adds noise to every
    variant alike instead of biasing one. Within a lane the seeded order is kept.
    """
    order = {id(run): i for i, run in enumerate(runs)}
    shares: list[list[Run]] = [[] for _ in range(lanes)]
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        cells.setdefault((run.profile, run.size_bytes, run.sweep, run.variant), []).append(run)
    start = 0
    for cell in cells.values():
        for i, run in enumerate(cell):
            shares[(start + i) % lanes].append(run)
        start = (start + len(cell)) % lanes
    by_profile = {run.profile: i for i, run in reversed(list(enumerate(runs)))}
    return [sorted(share, key=lambda r: (by_profile[r.profile], order[id(r)])) for share in shares]


def read_run_list(path: Path) -> set[str]:
    """Run ids, one per line (the `--only` file)."""
    try:
        return {line.strip() for line in Path(path).read_text().splitlines() if line.strip()}
    except OSError as exc:
        raise UserError(f"--only {path}: {exc.strerror}") from None


def run_campaign_in_lanes(sc: Scenario, out: Path | None, delay_backend: str, lanes: int,
                          scenario_argv: list[str], only: set[str] | None = None,
                          host_rec: dict | None = None) -> tuple[Campaign, dict]:
    """The lanes' counterpart of runner.run_campaign; `scenario_argv` is the scenario file
    and its overrides as `run` takes them, for the workers' command line. The workers adopt
    the campaign's host calibration (`host_rec`, written to the campaign here)."""
    from scenarios.hostcheck import record
    from scenarios.runner import open_campaign, select_runs
    campaign = open_campaign(sc, out)
    campaign.clear_partials()
    if host_rec is not None:
        record(campaign.path, host_rec)
    runs = select_runs(sc, only)
    todo = [r for r in runs if not campaign.is_done(r.run_id)]
    worker_argv = ["run", *scenario_argv, "--out", str(campaign.path), "--delay-backend", delay_backend]
    return campaign, run_lanes(campaign, todo, len(runs), lanes, worker_argv)


def run_lanes(campaign: Campaign, todo: list[Run], total: int, lanes: int,
              worker_argv: list[str]) -> dict:
    """Run `todo` in `lanes` confined workers; returns the campaign's merged stats.

    `worker_argv` is the `run` command line of the scenario (with its overrides, --out and
    --delay-backend) that each worker extends with its lane number and run list.
    """
    if not todo:
        return _merge_stats(total, 0, [], campaign.path / LANES_DIR, 0.0)
    shares = [s for s in deal_runs(todo, lanes) if s]
    lane_cpus = cpuset.split_cpus(cpuset.own_cpus(), lanes)[:len(shares)]
    lane_dir = campaign.path / LANES_DIR
    lane_dir.mkdir(exist_ok=True)
    owner = registry.new_instance()          # the lanes' cpusets and workers, by name and PID
    workers: list[tuple[int, subprocess.Popen, Path]] = []
    groups: list[cpuset.Cpuset] = []
    progress = Progress(total, total - len(todo))
    t0 = time.monotonic()
    try:
        for k, (share, cpus) in enumerate(zip(shares, lane_cpus)):
            group = cpuset.create(f"{owner.id}-{k}", cpus)
            owner.add_undo(["rmdir", str(group.path)], f"cpuset {group.path}")
            groups.append(group)
            runs_file = lane_dir / f"lane-{k}.runs"
            runs_file.write_text("".join(f"{r.run_id}\n" for r in share))
            stats_file = lane_dir / f"lane-{k}.stats.json"
            stats_file.unlink(missing_ok=True)
            log = open(lane_dir / f"lane-{k}.log", "w")
            proc = subprocess.Popen(
                [sys.executable, str(RUN_PY), *worker_argv, "--lane", str(k), "--only", str(runs_file)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "STARTLAB_NO_REEXEC": "1"},
                preexec_fn=lambda g=group: g.add(os.getpid()))   # confined before it runs anything
            log.close()
            owner.add_process(proc.pid, f"lane {k} worker")
            workers.append((k, proc, stats_file))
        ids = [r.run_id for r in todo]
        shown = -1
        while any(p.poll() is None for _, p, _ in workers):
            done = sum(campaign.is_done(i) for i in ids)
            if done != shown:
                progress.set_done(done)
                progress.show(f"{len(workers)} lanes")
                shown = done
            time.sleep(1.0)
    finally:
        _stop(workers)
        progress.close()
        _remove_cpusets(groups)
        owner.remove_all()
    return _merge_stats(total, len(todo), workers, lane_dir, time.monotonic() - t0)


def _remove_cpusets(groups: list[cpuset.Cpuset]) -> None:
    """Remove the lanes' cpusets, waiting for their last processes (a worker's network
    teardown ends shells that may still be exiting when it returns): the registry's undo is a
    single rmdir, which failed on such a busy cpuset and left it behind for `clean`."""
    for group in groups:
        try:
            cpuset.remove(group.path, wait_s=CPUSET_REMOVE_S)
        except OSError as exc:
            log.warning("cpuset %s not removed: %s (run.py clean removes it)", group.path, exc)


def _stop(workers: list[tuple[int, subprocess.Popen, Path]]) -> None:
    """Interrupted: ask every worker to tear its network down, wait, then insist."""
    running = [p for _, p, _ in workers if p.poll() is None]
    for p in running:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _merge_stats(total: int, todo: int, workers, lane_dir: Path, wall_s: float) -> dict:
    stats = {**new_stats(total, todo), "wall_s": wall_s, "lanes": []}
    for k, proc, stats_file in workers:
        try:
            lane = json.loads(stats_file.read_text())
        except (OSError, ValueError):
            tail = (lane_dir / f"lane-{k}.log").read_text(errors="replace")[-1500:]
            raise UserError(f"lane {k} stopped (exit {proc.returncode}) without finishing; its log "
                            f"({lane_dir / f'lane-{k}.log'}) ends:\n{tail}") from None
        add_stats(stats, lane)
        stats["lanes"].append({"lane": k, "runs": lane["runs"], "wall_s": lane.get("wall_s"),
                               "cpus": lane.get("cpus"), "exit": proc.returncode})
    return stats
