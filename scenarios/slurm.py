"""A campaign on a Slurm cluster: the unfinished runs, dealt into batches, as one array job.

Each array task runs one batch with `run.py run … --task K --only <batch>` on the node Slurm
gave it, within the CPUs Slurm allocated. It writes its runs into the campaign directory where
every node sees it (a shared filesystem, or this machine for a one-node cluster), or with
`--node-dir` into the node's own storage, from where this command stages them back after the
array (scenarios/staging.py); then the job script carries the scenario and the batches itself.
A run appears only when complete, so a task cut short by its node's death and requeued by
Slurm runs only what it had not finished, and the same command later submits only what is
still missing. This process submits, shows progress, and cancels the array on Ctrl-C; Slurm
does the rest (dispatch, requeue, confinement).
"""
from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from machine import slurm
from machine.errors import UserError
from machine.provenance import slurm_task
from results.campaign import Campaign
from results.store import read_json_or_none, write_json
from scenarios import staging
from scenarios.lanes import CPUS_PER_LANE, deal_runs
from scenarios.progress import Progress
from scenarios.spec import Run
from scenarios.stats import add_stats, new_stats

SLURM_DIR = "slurm"            # inside the campaign: the batches, the job script, the tasks' logs and stats
RUN_PY = Path(__file__).resolve().parent.parent / "run.py"
# Runs per array task. A task pays for its start once: Slurm's dispatch (about a second on
# an idle controller), and on the virtual clock the guest's boot (half a minute to a minute
# of wall time) or on the real clock the host check (6 s) and a network per profile (a few
# seconds); a run costs 5–60 s of wall time. Ten runs keep that start below about a fifth of
# a task on the virtual clock, and still give a 100-run campaign ten tasks to spread.
DEFAULT_BATCH = 10
POLL_S = 2.0


def node_calibration(campaign: Path) -> Path:
    """Where an array task on the real clock keeps its node's calibration for the job's
    next tasks there (scenarios.hostcheck.check_node): beside the tasks' logs, named by job
    and node, so that only tasks of the same job on the same node share it."""
    task = slurm_task()
    return Path(campaign) / SLURM_DIR / f"host-{task.get('job') or 'nojob'}-{task.get('node') or 'nonode'}.json"


@dataclass
class Submission:
    """What `run --slurm` asks of the cluster, besides the scenario."""
    clock: str                          # real or virtual
    scenario: Path
    worker_args: list[str]              # the task's `run.py run` arguments besides the scenario, --out/--task/--only
    partition: str | None = None
    lanes_per_node: int | None = None   # None: a task takes a lane's CPUs (real) or one CPU (virtual)
    batch: int = DEFAULT_BATCH
    extra: tuple[str, ...] = ()         # --slurm-args, passed to sbatch as they are
    node_dir: str | None = None         # each node's own storage for its runs (None: the campaign is shared)


def cpus_per_task(sub: Submission, client: slurm.Client) -> int:
    """A task's CPUs: a lane's on the real clock, QEMU's one thread on the virtual clock, or
    the partition's smallest node divided by --lanes-per-node."""
    if sub.lanes_per_node is None:
        return CPUS_PER_LANE if sub.clock == "real" else 1
    argv = ["sinfo", "-h", "-o", "%c"] + (["-p", sub.partition] if sub.partition else [])
    counts = [int(c.rstrip("+")) for c in client.run(*argv).split() if c.rstrip("+").isdigit()]
    if not counts:
        raise UserError("--lanes-per-node: sinfo lists no node CPUs for this partition")
    return max(1, min(counts) // sub.lanes_per_node)


def _worker(sub: Submission, scenario: str, out: str) -> str:
    """The task's command line; `scenario` and `out` are shell words (quoted, or a variable)."""
    argv = " ".join([*(shlex.quote(a) for a in [sys.executable, str(RUN_PY), "run"]), scenario,
                     *(shlex.quote(a) for a in sub.worker_args), "--out", out, "--clock", shlex.quote(sub.clock)])
    return f'exec {argv} --task "$SLURM_ARRAY_TASK_ID" --only "$only"\n'


def _script(campaign: Campaign, sub: Submission, shares: list[list[Run]]) -> Path:
    """The array's job script: every task runs its own batch. With a shared campaign the
    batches are files beside it; with `node_dir` the script carries the scenario and the
    batches, and the task writes under its node's storage (and its log there too: Slurm's
    --output would need the directory before the task could make it)."""
    d = campaign.path / SLURM_DIR
    head = "#!/bin/sh\n# One task of startlab's array: its batch of runs (task-K.runs).\n"
    if sub.node_dir is None:
        body = (f'only={shlex.quote(str(d))}/task-"$SLURM_ARRAY_TASK_ID".runs\n'
                + _worker(sub, shlex.quote(str(sub.scenario.resolve())), shlex.quote(str(campaign.path))))
    else:
        cases = "".join(f"  {k}) runs={shlex.quote(' '.join(r.run_id for r in share))} ;;\n"
                        for k, share in enumerate(shares))
        text = sub.scenario.read_text()
        text += "" if text.endswith("\n") else "\n"
        end = "STARTLAB_SCENARIO_END"
        if end in text:
            raise UserError(f"{sub.scenario}: holds {end}, which --node-dir's job script ends the scenario with")
        body = (f"root={shlex.quote(staging.node_root(sub.node_dir, campaign))}\n"
                f'mkdir -p "$root/{SLURM_DIR}" || exit 1\n'
                f'exec >>"$root/{SLURM_DIR}/task-$SLURM_ARRAY_TASK_ID.log" 2>&1\n'
                f'case "$SLURM_ARRAY_TASK_ID" in\n{cases}'
                f'  *) echo "no batch $SLURM_ARRAY_TASK_ID"; exit 1 ;;\nesac\n'
                f'only="$root/{SLURM_DIR}/task-$SLURM_ARRAY_TASK_ID.runs"\n'
                f"printf '%s\\n' $runs > \"$only\"\n"
                f'scenario="$root/{SLURM_DIR}/{sub.scenario.name}"\n'
                f"cat > \"$scenario\" <<'{end}'\n{text}{end}\n"
                + _worker(sub, '"$scenario"', f'"$root/{staging.CAMPAIGN}"'))
    script = d / "task.sh"
    script.write_text(head + body)
    script.chmod(0o755)
    return script


def submit(campaign: Campaign, todo: list[Run], sub: Submission, client: slurm.Client) -> tuple[str, int]:
    """Deal `todo` into batches and submit them as one array; returns (job id, tasks)."""
    shares = [s for s in deal_runs(todo, math.ceil(len(todo) / sub.batch)) if s]
    d = campaign.path / SLURM_DIR
    d.mkdir(exist_ok=True)
    for old in [*d.glob("task-*.runs"), *d.glob("task-*.stats.json")]:
        old.unlink()
    for k, share in enumerate(shares):
        (d / f"task-{k}.runs").write_text("".join(f"{r.run_id}\n" for r in share))
    log = "/dev/null" if sub.node_dir else f"{d}/task-%a.log"
    options = [f"--job-name=startlab-{campaign.record.get('scenario', 'campaign')}",
               f"--output={log}", "--open-mode=append", "--requeue",
               f"--cpus-per-task={cpus_per_task(sub, client)}", f"--chdir={RUN_PY.parent}",
               *([f"--partition={sub.partition}"] if sub.partition else []), *sub.extra]
    job = client.submit(_script(campaign, sub, shares), f"0-{len(shares) - 1}", options)
    write_json(d / "job.json", {"job": job, "tasks": len(shares), "clock": sub.clock, "node_dir": sub.node_dir,
                                "submitted": time.time(), "sbatch": options})
    return job, len(shares)


def _batch(campaign: Campaign, task: int) -> list[str]:
    """Task `task`'s runs, as submitted."""
    path = campaign.path / SLURM_DIR / f"task-{task}.runs"
    return path.read_text().split() if path.is_file() else []


def watch(campaign: Campaign, job: str, ids: list[str], progress: Progress, client: slurm.Client,
          node_root: str | None = None) -> list[slurm.Task]:
    """Progress until no task of `job` is pending, running or completing; the tasks' last states
    (none if the controller has already forgotten the job: MinJobAge). With `node_root`, every
    node a task is seen on is remembered as one to stage from, and a run counts as done when
    its task has completed (its runs are staged after the array)."""
    seen: list[slurm.Task] = []
    while True:
        tasks = client.tasks(job)
        if not tasks and seen:
            return seen
        seen = tasks or seen
        if node_root is None:
            progress.set_done(sum(campaign.is_done(i) for i in ids))
        else:                                   # the runs stay on the nodes: a completed task's batch
            staging.remember(campaign, SLURM_DIR, {t.node: node_root for t in tasks if t.node})
            progress.set_done(sum(len(_batch(campaign, t.index)) for t in tasks if t.state == "COMPLETED"))
        states = {}
        for t in tasks:
            states[t.state.lower()] = states.get(t.state.lower(), 0) + 1
        progress.show(f"job {job}: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "submitted"))
        if tasks and not any(t.active for t in tasks):
            return tasks
        time.sleep(POLL_S)


def run_campaign_on_slurm(campaign: Campaign, runs: list[Run], sub: Submission,
                          client: slurm.Client | None = None) -> dict:
    """Submit the unfinished runs of `runs` (failed ones included), watch the array, and
    return the campaign's stats. Ctrl-C (or any error here) cancels the array and waits until
    Slurm has ended its tasks."""
    client = client or slurm.Client()
    why = client.unreachable()
    if why:
        raise UserError(f"--slurm: {why}")
    campaign.clear_partials()
    say = lambda m: print(m, file=sys.stderr)   # noqa: E731
    staging.stage(campaign, client, SLURM_DIR, say)     # what an earlier command left on the nodes
    todo = [r for r in runs if not campaign.is_done(r.run_id)]
    stats = new_stats(len(runs), len(todo))
    if not todo:
        return stats
    t0 = time.monotonic()
    progress = Progress(len(runs), len(runs) - len(todo))
    job, tasks = submit(campaign, todo, sub, client)
    print(f"startlab: submitted job {job}: {len(todo)} runs in {tasks} tasks ({sub.clock} clock"
          + (f", on the nodes' {sub.node_dir}" if sub.node_dir else "") + ")", file=sys.stderr)
    root = staging.node_root(sub.node_dir, campaign) if sub.node_dir else None
    try:
        final = watch(campaign, job, [r.run_id for r in todo], progress, client, root)
        if root is not None:                    # the tasks' last nodes, seen or not while they ran
            staging.remember(campaign, SLURM_DIR, {t.node: root for t in final if t.node})
    except BaseException:
        progress.close()
        print(f"\nstartlab: cancelling job {job} …", file=sys.stderr)
        client.cancel(job)
        if not client.wait_gone(job, slurm.KILL_WAIT_S + 30):
            print(f"startlab: job {job} still has tasks after {slurm.KILL_WAIT_S + 30} s (squeue -j {job})",
                  file=sys.stderr)
        if root is not None:
            say(f"startlab: the runs the array finished stay on its nodes ({root}); the same command "
                "stages them first")
        raise
    progress.close()
    missed = staging.stage(campaign, client, SLURM_DIR, say)
    stats["wall_s"] = time.monotonic() - t0
    stats["slurm"] = {"job": job, "tasks": {t.index: {"state": t.state, "node": t.node} for t in final},
                      **({"unstaged_nodes": missed} if missed else {})}
    d = campaign.path / SLURM_DIR
    for t in final:
        add_stats(stats, read_json_or_none(d / f"task-{t.index}.stats.json") or {})
    missing = [r.run_id for r in todo if not campaign.is_done(r.run_id)
               and r.run_id not in {f["run"] for f in stats["failed"]}]
    if missing:
        ended = ", ".join(f"task {t.index} {t.state.lower()}" for t in final if t.state != "COMPLETED")
        stats["unfinished"] = missing
        print(f"startlab: {len(missing)} runs not finished ({ended or 'no task failed'}; their logs: "
              f"{d}/task-K.log); the same command submits them again", file=sys.stderr)
    return stats

