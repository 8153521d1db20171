"""Root integration: `run --slurm` on a real one-node Slurm cluster that the test starts
(Debian's munged, slurmctld and slurmd, machine/slurm.LocalCluster) and removes.

The runs are on the real clock here (the cluster lets root submit), because what is tested is
the plumbing: the array, every run merged exactly once, requeue after a node failure, a
killed task resubmitted by the same command, Ctrl-C. Their timing is not asserted.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT  # noqa: E402
from leftovers import assert_nothing_left, leftovers, our_processes  # noqa: E402
from machine.errors import UserError
from machine.slurm import KILL_WAIT_S, LocalCluster, cluster_processes

pytestmark = [pytest.mark.root]
SMOKE = (ROOT / "scenarios" / "smoke.yaml").read_text()


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    assert_nothing_left()
    with LocalCluster() as c:
        yield c
    assert_nothing_left()


@pytest.fixture(autouse=True)
def idle_node(cluster):
    """Each test starts on an idle node, or says why it could not (an earlier test's task still
    completing, the node down or drained), rather than timing out on a queue that never moves."""
    assert cluster.wait_idle(KILL_WAIT_S + 30), f"the node is not idle:\n{cluster.diagnosis()}"


def scenario(tmp_path: Path, reps: int) -> Path:
    """smoke.yaml's two variants on dsl-fast, 100 KB, `reps` repetitions: short runs."""
    path = tmp_path / "slurm-smoke.yaml"
    path.write_text(SMOKE.replace("sizes: [200KB]", "sizes: [100KB]")
                    .replace("repetitions: 2", f"repetitions: {reps}").replace("name: smoke", "name: slurm-smoke"))
    return path


def command(cluster, scen: Path, out: Path, batch: int) -> list[str]:
    # --unfit-host: the plumbing is tested, not the timing; a noisy host must not refuse it.
    return [sys.executable, str(ROOT / "run.py"), "run", str(scen), "--slurm", "--clock", "real",
            "--batch", str(batch), "--out", str(out), "--unfit-host", "--json"]


def env(cluster) -> dict:
    return {**os.environ, "STARTLAB_NO_REEXEC": "1", "SLURM_CONF": str(cluster.conf)}


@contextlib.contextmanager
def submitted(cluster, argv: list[str]):
    """The submitting command as a terminal's foreground process: with SIGINT at its default,
    whatever this test inherited (a shell's background job ignores SIGINT, and so would the
    command, which is how Ctrl-C should not reach it there). Whatever the test asserts, the
    command is gone afterwards: Ctrl-C (it cancels its array), then SIGKILL."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(cluster),
                            cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=KILL_WAIT_S + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def finish(cluster, proc: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """The command's output once it has ended, or the cluster's state if it did not."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the command did not end in {timeout_s:.0f} s:\n{cluster.diagnosis()}") from None


def metas(out: Path) -> dict[str, dict]:
    return {p.name: json.loads((p / "meta.json").read_text()) for p in out.iterdir()
            if p.is_dir() and (p / "meta.json").is_file() and not p.name.endswith((".partial", ".failed"))}


def job_of(out: Path, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = out / "slurm" / "job.json"
        if path.is_file():
            return json.loads(path.read_text())["job"]
        time.sleep(0.2)
    raise AssertionError("no job submitted")


def wait_for(cluster, what, timeout_s: float, why: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out: {why}\n{cluster.diagnosis()}")


def return_to_service(cluster) -> None:
    """The operator's part once a failed node is mended: resume it if it is still down.
    ReturnToService=2 returns it as soon as its slurmd answers the controller, which is
    usually its reply to the kill of the failed task; if that reply came first, the next
    answer is to the controller's ping, 100 s later."""
    try:
        if cluster.node_state()[0].startswith("down"):
            cluster.set_node("resume")
    except UserError:
        pass                             # returned between the reading and the update


def test_an_array_of_batches_runs_every_run_once_into_one_campaign(cluster, tmp_path):
    out = tmp_path / "c"
    res = subprocess.run(command(cluster, scenario(tmp_path, 2), out, batch=2), capture_output=True, text=True,
                         env=env(cluster), timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    job = json.loads((out / "slurm" / "job.json").read_text())
    assert job["tasks"] == 2 and job["clock"] == "real"
    runs = metas(out)
    assert sorted(runs) == sorted(f"dsl-fast_100KB_{v}_r{r:02d}" for v in ("cubic-iw10", "reno-iw3") for r in (1, 2))
    assert all(m["status"] == "done" for m in runs.values())
    # Each run says which job, task and node ran it: both tasks, the cluster's node.
    assert {m["slurm"]["job"] for m in runs.values()} == {job["job"]}
    assert sorted(m["slurm"]["task"] for m in runs.values()) == ["0", "0", "1", "1"]
    assert {m["slurm"]["node"] for m in runs.values()} == {cluster.node}
    # The node's calibration is measured by the job's first task there and adopted by the
    # next (the same figures, judged again), not measured twice.
    by_task = {m["slurm"]["task"]: m["host_check"] for m in runs.values()}
    kept = f"host-{job['job']}-{cluster.node}.json"
    assert sorted(h.get("adopted", "") for h in by_task.values()) == ["", kept], by_task
    assert by_task["0"]["calibration"] == by_task["1"]["calibration"]
    assert (out / "slurm" / kept).is_file()
    stats = json.loads(res.stdout)["run_stats"]
    assert {t["state"] for t in stats["slurm"]["tasks"].values()} == {"COMPLETED"}
    assert not list(out.glob("*.partial")) and not list(out.glob("*.failed"))
    # The same command again has nothing to submit.
    again = subprocess.run(command(cluster, scenario(tmp_path, 2), out, batch=2), capture_output=True, text=True,
                           env=env(cluster), timeout=120, cwd=ROOT)
    assert again.returncode == 0 and json.loads(again.stdout)["run_stats"]["skipped"] == 4, again.stderr[-2000:]


def test_a_node_failure_requeues_the_task_which_runs_only_what_it_had_not_finished(cluster, tmp_path):
    out = tmp_path / "c"
    with submitted(cluster, command(cluster, scenario(tmp_path, 3), out, batch=3)) as proc:
        job = job_of(out)
        first = (out / "slurm" / "task-0.runs").read_text().split()
        wait_for(cluster, lambda: any(r in metas(out) for r in first), 120, "task 0 finished a run")
        before = {r: m["finished"] for r, m in metas(out).items()}
        cluster.set_node("down", "test-node-failure")
        wait_for(cluster, lambda: [t for t in cluster.client.tasks(job) if t.index == 0 and t.state == "PENDING"],
                 60, "task 0 requeued")
        return_to_service(cluster)
        # Slurm holds a requeued batch task about two minutes (its BeginTime); an operator
        # may start it at once, as here.
        cluster.client.run("scontrol", "update", f"jobid={job}_0", "starttime=now")
        stdout, stderr = finish(cluster, proc, 300)
    assert proc.returncode == 0, stderr[-3000:]
    runs = metas(out)
    assert len(runs) == 6 and all(m["status"] == "done" for m in runs.values())
    # What had finished before the failure was not run again; the rest ran in the restart.
    assert all(runs[r]["finished"] == t for r, t in before.items())
    rerun = [r for r in first if r not in before]
    assert rerun and all(runs[r]["slurm"]["task"] == "0" and runs[r]["slurm"]["restarts"] == "1" for r in rerun)
    assert not list(out.glob("*.partial"))


def test_a_task_first_removes_what_a_killed_run_left_on_its_node(cluster, tmp_path):
    """A task killed outright (its node failed, or it outlived KillWait) cannot tear down; the
    next real-clock task on that node removes what it left (what no live process of ours holds)
    before its own runs."""
    killed = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "fidelity", "js-dumbbell"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
    try:
        wait_for(cluster, lambda: leftovers()["links"], 60, "the network of the run to be killed")
    finally:
        killed.kill()
        killed.wait()
    prefixes = {name[:5] for name in leftovers()["links"]}
    assert prefixes
    out = tmp_path / "c"
    res = subprocess.run(command(cluster, scenario(tmp_path, 1), out, batch=2), capture_output=True, text=True,
                         env=env(cluster), timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "removed what an earlier startlab process left on this node" in (out / "slurm" / "task-0.log").read_text()
    assert not {name[:5] for name in leftovers()["links"]} & prefixes


def test_a_cancelled_task_is_submitted_again_by_the_same_command(cluster, tmp_path):
    out = tmp_path / "c"
    argv = command(cluster, scenario(tmp_path, 3), out, batch=3)
    with submitted(cluster, argv) as proc:
        job = job_of(out)
        first = (out / "slurm" / "task-0.runs").read_text().split()
        wait_for(cluster, lambda: any(r in metas(out) for r in first), 120, "task 0 finished a run")
        cluster.client.run("scancel", f"{job}_0")
        stdout, stderr = finish(cluster, proc, 300)
    assert proc.returncode == 1 and "the same command submits them again" in stderr, stderr[-3000:]
    unfinished = json.loads(stdout)["run_stats"]["unfinished"]
    assert unfinished and set(unfinished) <= set(first)
    before = {r: m["finished"] for r, m in metas(out).items()}
    assert len(before) == 6 - len(unfinished)
    again = subprocess.run(argv, capture_output=True, text=True, env=env(cluster), timeout=300, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = metas(out)
    assert len(runs) == 6 and all(runs[r]["finished"] == t for r, t in before.items())
    assert json.loads(again.stdout)["run_stats"]["skipped"] == len(before)


def test_ctrl_c_cancels_the_array_and_leaves_nothing_running(cluster, tmp_path):
    out = tmp_path / "c"
    with submitted(cluster, command(cluster, scenario(tmp_path, 3), out, batch=3)) as proc:
        job = job_of(out)
        wait_for(cluster, lambda: any(t.state == "RUNNING" for t in cluster.client.tasks(job)), 60, "a task running")
        time.sleep(3)                          # inside its run: host check, network, traffic
        proc.send_signal(signal.SIGINT)
        _, stderr = finish(cluster, proc, 300)
    assert proc.returncode == 130, stderr[-3000:]
    assert not [t for t in cluster.client.tasks(job) if t.active]
    assert cluster.client.run("squeue", "-h", "-o", "%i").strip() == ""
    # No task process is left on the node: only the cluster's daemons carry its SLURM_CONF
    # (slurmctld's helper slurmscriptd among them).
    assert sorted(comm for _, comm, _ in cluster_processes()) == ["munged", "slurmctld", "slurmd", "slurmscriptd"]
    assert our_processes() == []


def test_runs_on_the_nodes_own_storage_are_staged_back_once_even_after_the_command_was_killed(cluster, tmp_path):
    """--node-dir: the tasks write on their node's storage, and the submitting command stages
    the runs back through srun. Here the first command is killed (SIGKILL: no chance to stage)
    once it knows the node, and its second task is cancelled while it waits for the CPUs the
    first holds; the first task finishes without the command. The same command then stages
    what the first task left, submits only the runs of the cancelled one, and stages those
    when its array ends."""
    out, node_dir = tmp_path / "c", tmp_path / "node-local"
    # --lanes-per-node 1: a task takes all the node's CPUs, so task 1 waits for task 0 on any machine.
    argv = command(cluster, scenario(tmp_path, 2), out, batch=2) + ["--node-dir", str(node_dir),
                                                                    "--lanes-per-node", "1"]
    with submitted(cluster, argv) as proc:
        job = job_of(out)
        wait_for(cluster, lambda: (out / "slurm" / "nodes.json").is_file(), 60, "the node remembered")
        proc.kill()
        assert [t.state for t in cluster.client.tasks(job) if t.index == 1] == ["PENDING"]
        cluster.client.run("scancel", f"{job}_1")
    first = (out / "slurm" / "task-0.runs").read_text().split()
    assert cluster.client.wait_gone(job, 300), cluster.diagnosis()
    assert not metas(out), "nothing reaches the campaign but by staging"
    (root,) = node_dir.iterdir()
    assert sorted(metas(root / "campaign")) == sorted(first)
    again = subprocess.run(argv, capture_output=True, text=True, env=env(cluster), timeout=300, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count(f"staged 2 runs from node {cluster.node}") == 2, again.stderr[-3000:]
    stats = json.loads(again.stdout)["run_stats"]
    assert stats["skipped"] == 2 and not stats["failed"] and "unstaged_nodes" not in stats["slurm"], stats
    runs = metas(out)
    assert len(runs) == 4 and all(m["status"] == "done" for m in runs.values())
    assert {r for r, m in runs.items() if m["slurm"]["job"] == job} == set(first)
    # The tasks' logs and stats came back with the runs; the node keeps nothing.
    assert (out / "slurm" / "task-0.log").is_file() and (out / "slurm" / "task-0.stats.json").is_file()
    assert not list(node_dir.iterdir())
    assert json.loads((out / "slurm" / "nodes.json").read_text()) == {"nodes": {}}
    assert str(out) not in (out / "slurm" / "task.sh").read_text()
