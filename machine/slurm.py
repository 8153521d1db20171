"""Slurm: the cluster a campaign is submitted to, and a one-node cluster of startlab's own.

startlab does not schedule. Slurm dispatches the tasks, requeues a task whose node failed,
cancels, and confines each task to the CPUs it allocated. This module speaks only Slurm's
client commands (sbatch, squeue, scancel, scontrol, sinfo, srun); `LocalCluster` starts Debian's
munged, slurmctld and slurmd with a configuration of their own in one directory, for the
tests and for trying `run --slurm` on one machine (`run.py slurm-local`).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from machine import registry
from machine.errors import UserError

CLIENT_TOOLS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")
DAEMONS = ("munged", "slurmctld", "slurmd")
# A task's states in which it still holds or awaits a node (squeue's %T).
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
# slurmd's wait between SIGTERM and SIGKILL of a cancelled task: a worker tears its network
# down on SIGTERM (scenarios/lanes.py gives its workers as long).
KILL_WAIT_S = 120
START_TIMEOUT_S = 30.0


@dataclass
class Task:
    """One array task as squeue shows it."""
    index: int
    state: str
    node: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


class Client:
    """Slurm's client commands against one cluster: the one SLURM_CONF (or the machine's
    configuration) names."""

    def __init__(self, env: dict[str, str] | None = None):
        self.env = {**os.environ, **(env or {})}

    def run(self, *argv: str) -> str:
        try:
            done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise UserError(f"{argv[0]}: not installed (Slurm's client commands: apt install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"{' '.join(argv[:2])}: no answer from the cluster in 60 s") from None
        if done.returncode != 0:
            raise UserError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()}")
        return done.stdout

    def popen(self, argv: list[str]) -> subprocess.Popen:
        """A client command whose output is streamed (srun's forwarded output, as bytes)."""
        try:
            return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise UserError(f"{argv[0]}: not installed (Slurm's client commands: apt install slurm-client)") from None

    def unreachable(self) -> str | None:
        """Why this machine cannot submit to a cluster, or None."""
        missing = [t for t in CLIENT_TOOLS if shutil.which(t) is None]
        if missing:
            return f"Slurm's client commands are missing ({', '.join(missing)}): apt install slurm-client"
        try:
            self.run("sinfo", "-h", "-o", "%P")
        except UserError as exc:
            return f"this machine is not a client of a running Slurm cluster ({exc})"
        return None

    def submit(self, script: Path, array: str, options: list[str]) -> str:
        """sbatch `script` as an array job; returns the job id."""
        out = self.run("sbatch", "--parsable", f"--array={array}", *options, str(script))
        return out.strip().split(";")[0]

    def tasks(self, job: str) -> list[Task]:
        """The job's array tasks, finished ones included while the controller keeps them."""
        out = self.run("squeue", "-h", "-r", "-j", job, "--states=all", "-o", "%K|%T|%N")
        tasks = []
        for line in out.splitlines():
            index, state, node = (line.split("|") + ["", ""])[:3]
            if index.strip().isdigit():
                tasks.append(Task(int(index), state.strip(), node.strip()))
        return tasks

    def cancel(self, job: str) -> None:
        self.run("scancel", job)

    def wait_gone(self, job: str, timeout_s: float) -> bool:
        """Wait until no task of `job` is pending, running or completing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(t.active for t in self.tasks(job)):
                return True
            time.sleep(1.0)
        return False


def cluster_processes() -> list[tuple[int, str, str]]:
    """(pid, comm, cluster id) of every process of a cluster of startlab's own: its daemons,
    slurmstepd and the tasks under it all carry its SLURM_CONF (`<id>-slurm-…/slurm.conf`)
    in their environment, which is how they are told from anyone else's Slurm."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        for var in env:
            if var.startswith(b"SLURM_CONF="):
                parent = Path(var[len(b"SLURM_CONF="):].decode(errors="replace")).parent.name
                if parent.startswith(registry.PREFIX) and "-slurm-" in parent:
                    found.append((int(entry.name), comm, parent.split("-slurm-")[0]))
                break
    return found


@dataclass(frozen=True)
class Node:
    """One slurmd: Slurm's name for it, the host name slurmd finds its line by, the address
    the controller reaches it at, and its CPUs."""
    name: str
    hostname: str
    addr: str
    cpus: int


@dataclass(frozen=True)
class Layout:
    """Where a cluster's daemons keep their state, PIDs and logs, who runs slurmctld, and
    munge's socket (None: munge's own default)."""
    state: str
    spool: str
    ctld_pid: str
    slurmd_pid: str
    ctld_log: str
    slurmd_log: str
    slurm_user: str = "slurm"
    munge_socket: str | None = None


# Debian's packages: their init scripts and units read /etc/slurm/slurm.conf and these paths.
SYSTEM_LAYOUT = Layout(state="/var/lib/slurm/slurmctld", spool="/var/lib/slurm/slurmd",
                       ctld_pid="/run/slurmctld.pid", slurmd_pid="/run/slurmd.pid",
                       ctld_log="/var/log/slurm/slurmctld.log", slurmd_log="/var/log/slurm/slurmd.log")
PARTITION = "startlab"


def config(name: str, controller: Node, nodes: list[Node], layout: Layout, ports: tuple[int, int] = (6817, 6818),
           cgroups: bool = False) -> str:
    """slurm.conf of a cluster of startlab's: one partition of every node. `cgroups` where
    systemd runs (bookworm's cgroup v2 plugin needs it; cgroup_config() goes beside):
    tasks tracked and confined by cgroups. Without systemd, proctrack/linuxproc tracks a
    task's processes and task/affinity confines it to its CPUs."""
    if not nodes:
        raise ValueError("a cluster needs at least one node")
    return "\n".join([
        f"ClusterName={name}",
        f"SlurmctldHost={controller.hostname}({controller.addr})",
        f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}",
        "AuthType=auth/munge", "CredType=cred/munge",
        *([f"AuthInfo=socket={layout.munge_socket}"] if layout.munge_socket else []),
        f"SlurmUser={layout.slurm_user}", "SlurmdUser=root",
        f"StateSaveLocation={layout.state}", f"SlurmdSpoolDir={layout.spool}",
        f"SlurmctldPidFile={layout.ctld_pid}", f"SlurmdPidFile={layout.slurmd_pid}",
        f"SlurmctldLogFile={layout.ctld_log}", f"SlurmdLogFile={layout.slurmd_log}",
        *(["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity"] if cgroups
          else ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity"]),
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "ReturnToService=2", f"KillWait={KILL_WAIT_S}", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        *(f"NodeName={n.name} NodeHostname={n.hostname} NodeAddr={n.addr} CPUs={n.cpus} State=UNKNOWN"
          for n in nodes),
        f"PartitionName={PARTITION} Nodes={','.join(n.name for n in nodes)} Default=YES MaxTime=INFINITE State=UP",
        ""])


def cgroup_config() -> str:
    """cgroup.conf beside a slurm.conf with `cgroups`: each task confined to its cores."""
    return "ConstrainCores=yes\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A one-node Slurm cluster on this machine, of startlab's own: munged with a fresh key,
    slurmctld and slurmd from Debian's packages, their configuration, state, sockets and logs
    in one temporary directory. Registered by name and PID (`run.py clean` removes a
    cluster whose owner died); `stop` cancels every job, ends the daemons and removes the
    directory. Without systemd there is no cgroup plugin: proctrack/linuxproc tracks a
    task's processes and task/affinity confines it to its CPUs."""

    def __init__(self, cpus: int | None = None):
        self.cpus = cpus or len(os.sched_getaffinity(0))
        self.dir: Path | None = None
        self.instance: registry.Instance | None = None
        self.node = ""

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def client(self) -> Client:
        return Client({"SLURM_CONF": str(self.conf)})

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        missing = [t for t in (*DAEMONS, "mungekey", *CLIENT_TOOLS) if shutil.which(t) is None]
        if missing:
            raise UserError(f"a local Slurm cluster needs {', '.join(missing)}: provisioning installs them "
                            "(playbooks/site.yml, stage full: slurmctld, slurmd, slurm-client, munge)")
        self.instance = registry.new_instance()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.instance.prefix}-slurm-"))
        self.instance.add_undo(["rm", "-rf", str(self.dir)], f"Slurm cluster directory {self.dir}")
        self.node = f"{self.instance.prefix}n0"
        d = self.dir
        (d / "ctld").mkdir()
        (d / "spool").mkdir()
        subprocess.run(["mungekey", "--create", f"--keyfile={d / 'munge.key'}"], check=True)
        # -f: munged refuses to run as root otherwise; the socket's directory is ours alone.
        self._daemon(["munged", "-F", "-f", f"--socket={d / 'munge.sock'}", f"--key-file={d / 'munge.key'}",
                      f"--log-file={d / 'munged.log'}", f"--pid-file={d / 'munged.pid'}",
                      f"--seed-file={d / 'munged.seed'}"], "munged")
        self._wait(lambda: (d / "munge.sock").exists(), "munged's socket")
        self.conf.write_text(self._conf())
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._daemon(["slurmd", "-D", "-N", self.node, "-f", str(self.conf)], "slurmd")
        self._wait(self._node_up, f"node {self.node} idle")

    def _conf(self) -> str:
        d, host = self.dir, socket.gethostname().split(".")[0]
        layout = Layout(state=str(d / "ctld"), spool=str(d / "spool"), ctld_pid=str(d / "slurmctld.pid"),
                        slurmd_pid=str(d / "slurmd.pid"), ctld_log=str(d / "slurmctld.log"),
                        slurmd_log=str(d / "slurmd.log"), slurm_user="root", munge_socket=str(d / "munge.sock"))
        node = Node(self.node, host, "127.0.0.1", self.cpus)
        return config(self.instance.prefix, node, [node], layout, (_free_port(), _free_port()))

    def _daemon(self, argv: list[str], name: str) -> None:
        log = open(self.dir / f"{name}.out", "w")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")},
                                start_new_session=True)
        log.close()
        self.instance.add_process(proc.pid, f"Slurm {name}")

    def node_state(self) -> tuple[str, str]:
        """The node's state as sinfo abbreviates it (idle, alloc, down, drain, …) and the
        reason it was set down or drained ("none" otherwise)."""
        state, _, reason = self.client.run("sinfo", "-h", "-n", self.node, "-o", "%t|%E").strip().partition("|")
        return state, reason

    def _node_up(self) -> bool:
        try:
            return self.node_state()[0] in ("idle", "mix", "alloc")
        except UserError:
            return False

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until the node runs nothing and accepts work: no job of an earlier submission
        still completing on it, not down, not drained."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.node_state()[0] == "idle" and not self.client.run("squeue", "-h", "-o", "%i").strip():
                    return True
            except UserError:
                pass
            time.sleep(1.0)
        return False

    def diagnosis(self, lines: int = 25) -> str:
        """What an operator would look at when the cluster does not do what was asked: the
        node's state and reason, the queue, and the daemons' last log lines."""
        try:
            state, reason = self.node_state()
            queue = self.client.run("squeue", "-h", "-r", "--states=all", "-o", "%i %T %R").strip() or "empty"
        except UserError as exc:
            state, reason, queue = "unknown", str(exc), "unknown"
        logs = []
        for name in ("slurmctld", "slurmd"):
            path = self.dir / f"{name}.log"
            tail = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
            logs.append(f"--- {name}.log, last {len(tail)} lines\n" + "\n".join(tail))
        return f"node {self.node}: {state} ({reason}); queue: {queue}\n" + "\n".join(logs)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        logs = "".join((self.dir / f"{n}.out").read_text(errors="replace")[-400:] for n in DAEMONS
                       if (self.dir / f"{n}.out").exists())
        self.stop()
        raise UserError(f"the local Slurm cluster did not start ({what} not there in {START_TIMEOUT_S:.0f} s): {logs}")

    def set_node(self, state: str, reason: str = "startlab") -> None:
        """`scontrol update nodename=… state=…` (down, drain, resume)."""
        self.client.run("scontrol", "update", f"nodename={self.node}", f"state={state}", f"reason={reason}")

    def stop(self) -> None:
        """Cancel every job (all are ours: the cluster is), wait for the node to end them,
        then end the daemons and remove the directory."""
        if self.instance is None:
            return
        if self.dir is not None and self.conf.exists():
            try:
                jobs = set(self.client.run("squeue", "-h", "-o", "%F").split())
                for job in jobs:
                    self.client.run("scancel", job)
                for job in jobs:
                    self.client.wait_gone(job, KILL_WAIT_S + 30)
            except UserError:
                pass                    # a controller already gone: its tasks' processes went with slurmd
        self.instance.remove_all()
        self.instance = None
