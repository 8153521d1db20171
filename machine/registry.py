"""What startlab created on this machine, so it can be removed by name and PID.

Every emulation instance (one Mininet network with its processes) owns a JSON file in
REGISTRY_DIR. It lists the root-namespace links and bridges, the processes (PID plus
their start time, so a recycled PID is never signalled) and the pinned BPF objects it
made. Teardown removes exactly these; `run.py clean` does the same for instances whose
owner died without tearing down. Nothing that is not listed here, or that does not carry
the PREFIX in its name, is ever touched.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

PREFIX = "stl"                      # every node, link and bridge name starts with it
# What follows an instance's prefix in a node's name, by role (topologies/names.py builds
# the names, machine/cleanup.py recognises them).
NODE_ROLES = {"client": "cl", "server": "sv", "router": "r", "core": "co", "switch": "sw"}


def _registry_dir() -> Path:
    """Root's registry is the machine's; an ordinary user (a guest on the virtual clock, the
    only thing startlab runs without root) keeps one of their own."""
    if os.environ.get("STARTLAB_REGISTRY"):
        return Path(os.environ["STARTLAB_REGISTRY"])
    if os.geteuid() == 0:
        return Path("/run/startlab")
    return Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"startlab-{os.geteuid()}"


REGISTRY_DIR = _registry_dir()
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def process_start_time(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class Instance:
    """One emulation instance and everything it made."""
    id: str
    owner_pid: int
    owner_start: int | None
    created: float
    processes: list[dict] = field(default_factory=list)   # {pid, start, what}
    links: list[str] = field(default_factory=list)        # root-namespace links
    bridges: list[str] = field(default_factory=list)
    allowed_cc: list[str] = field(default_factory=list)   # names this instance added to the root's
                                                          # tcp_allowed_congestion_control
    undo: list[dict] = field(default_factory=list)        # {argv, what}: commands that remove
                                                          # machine-wide objects (BPF struct_ops,
                                                          # cgroup attachments), run newest first

    @property
    def path(self) -> Path:
        return REGISTRY_DIR / f"{self.id}.json"

    @property
    def prefix(self) -> str:
        """Name prefix of this instance's nodes and links (5 chars: room for -ethN)."""
        return self.id

    # -- recording ---------------------------------------------------------------
    def save(self) -> None:
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.path)

    def add_process(self, pid: int, what: str) -> None:
        self.processes.append({"pid": pid, "start": process_start_time(pid), "what": what})
        self.save()

    def add_link(self, name: str) -> None:
        self.links.append(name)
        self.save()

    def add_bridge(self, name: str) -> None:
        self.bridges.append(name)
        self.save()

    def add_undo(self, argv: list[str], what: str) -> None:
        """Record the command that removes something machine-wide we just created."""
        self.undo.append({"argv": list(argv), "what": what})
        self.save()

    def add_allowed_cc(self, name: str) -> None:
        """Remember a congestion control this instance needs in the root's allowed list."""
        if name not in self.allowed_cc:
            self.allowed_cc.append(name)
            self.save()

    def owner_alive(self) -> bool:
        return self.owner_start is not None and process_start_time(self.owner_pid) == self.owner_start

    # -- removal -------------------------------------------------------------------
    def remove_all(self) -> list[str]:
        """Remove everything listed; return what was actually removed (for `clean`)."""
        removed: list[str] = []
        for proc in reversed(self.processes):
            if terminate(proc["pid"], proc.get("start")):
                removed.append(f"process {proc['what']} ({proc['pid']})")
        for item in reversed(self.undo):
            if _run(item["argv"]):
                removed.append(item["what"])
        for name in self.bridges:
            if _run(["ip", "link", "del", name]):
                removed.append(f"bridge {name}")
        for name in self.links:
            if _run(["ip", "link", "del", name]):
                removed.append(f"link {name}")
        with allowed_cc_lock():
            others = {n for inst in load_instances() if inst.id != self.id for n in inst.allowed_cc}
            mine = [n for n in self.allowed_cc if n not in others]
            try:
                current = ALLOWED_CC.read_text().split()
                if any(n in current for n in mine):
                    ALLOWED_CC.write_text(" ".join(n for n in current if n not in mine))
                    removed.append(f"allowed congestion controls {', '.join(mine)}")
            except OSError:
                pass
            self.path.unlink(missing_ok=True)
        return removed


@contextmanager
def allowed_cc_lock():
    """Serialises changes to tcp_allowed_congestion_control between instances (a lock on
    the registry directory itself: no lock file is left behind)."""
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(REGISTRY_DIR, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def new_instance() -> Instance:
    """A fresh instance with a short random id such as 'stl3f' (PREFIX + 2 hex chars)."""
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    while True:                      # claimed atomically: two threads may ask at once
        ident = PREFIX + secrets.token_hex(1)
        try:
            os.close(os.open(REGISTRY_DIR / f"{ident}.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            continue
    inst = Instance(id=ident, owner_pid=os.getpid(), owner_start=process_start_time(os.getpid()),
                    created=time.time())
    inst.save()
    return inst


def load_instances() -> list[Instance]:
    out = []
    if not REGISTRY_DIR.is_dir():
        return out
    for path in sorted(REGISTRY_DIR.glob(f"{PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            known = {f.name for f in fields(Instance)}
            out.append(Instance(**{k: v for k, v in data.items() if k in known}))
        except (OSError, ValueError, TypeError):
            continue
    return out


def terminate(pid: int, start: int | None, grace_s: float = 2.0) -> bool:
    """SIGTERM, then SIGKILL, a process we started; False if it is gone or not ours.

    The start time must match the one recorded, so a PID reused by someone else's
    process is left alone.
    """
    if start is None or process_start_time(pid) != start:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if process_start_time(pid) != start:
            return True
        _reap(pid)
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    for _ in range(100):
        _reap(pid)
        if process_start_time(pid) != start:
            break
        time.sleep(0.01)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _run(cmd: list[str]) -> bool:
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
