"""cpuset cgroups that confine a lane (one testbed instance) to its own CPUs.

A lane's worker process joins its cpuset before it starts anything, so every process it
starts (Mininet host shells, the delay line, the workloads' programs) inherits the CPUs,
and the kernel narrows each one's affinity to them. Both hierarchies exist in the wild:
cgroup v2 (`/sys/fs/cgroup` with `cpuset` among its controllers) and v1 (a `cpuset`
mount, e.g. hybrid systemd machines). A cpuset is named `stl-lane-…` so `clean` and the
tests can find it, and the instance that made it records how to remove it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from machine.errors import UserError
from machine import registry
from machine.registry import PREFIX

LANE_PREFIX = f"{PREFIX}-lane-"


class CpusetError(UserError):
    """No cpuset to be had: lanes cannot run here (a one-line error for the user)."""


@dataclass(frozen=True)
class Hierarchy:
    root: Path
    version: int            # 1 or 2


def hierarchy() -> Hierarchy | None:
    """Where cpusets can be made here: v2 if its root offers the controller, else v1's mount."""
    entries = [line.split() for line in _read(Path("/proc/mounts")).splitlines()]
    for e in entries:
        if len(e) > 3 and e[2] == "cgroup2" and "cpuset" in _read(Path(e[1]) / "cgroup.controllers").split():
            return Hierarchy(Path(e[1]), 2)
    for e in entries:
        if len(e) > 3 and e[2] == "cgroup" and "cpuset" in e[3].split(","):
            return Hierarchy(Path(e[1]), 1)
    return None


def parse_cpu_list(text: str) -> list[int]:
    """'0-2,5' → [0, 1, 2, 5] (the kernel's list format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def split_cpus(cpus: list[int], lanes: int) -> list[list[int]]:
    """Consecutive, disjoint, as-equal-as-possible shares of `cpus` (lanes ≤ len(cpus))."""
    if not 1 <= lanes <= len(cpus):
        raise ValueError(f"{lanes} lanes need at least as many CPUs, have {len(cpus)}")
    cpus = sorted(cpus)
    base, extra = divmod(len(cpus), lanes)
    shares, start = [], 0
    for k in range(lanes):
        size = base + (1 if k < extra else 0)
        shares.append(cpus[start:start + size])
        start += size
    return shares


@dataclass
class Cpuset:
    path: Path
    cpus: list[int]
    version: int

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def members(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def effective_cpus(self) -> list[int]:
        name = "cpuset.effective_cpus" if self.version == 1 else "cpuset.cpus.effective"
        return parse_cpu_list(_read(self.path / name))


def create(name: str, cpus: list[int], where: Hierarchy | None = None) -> Cpuset:
    """Make the cpuset `stl-lane-<name>` holding `cpus` (and the parent's memory nodes)."""
    where = where or hierarchy()
    if where is None:
        raise CpusetError("no cpuset cgroup controller on this machine (neither cgroup v2 with cpuset "
                          "nor a v1 cpuset mount): lanes cannot be confined to their CPUs")
    if where.version == 2:
        control = where.root / "cgroup.subtree_control"
        if "cpuset" not in _read(control).split():
            # Enabling a controller for the root's children is machine-wide; it stays enabled
            # (systemd enables it itself on most v2 machines) and is harmless.
            control.write_text("+cpuset")
    path = where.root / f"{LANE_PREFIX}{name}"
    path.mkdir()
    try:
        if where.version == 1:     # v1 needs both set before a task may join
            (path / "cpuset.mems").write_text(_read(where.root / "cpuset.mems").strip())
        (path / "cpuset.cpus").write_text(format_cpu_list(cpus))
    except OSError as exc:
        path.rmdir()
        raise CpusetError(f"configuring cpuset {path} with CPUs {cpus} failed: {exc}") from exc
    return Cpuset(path, list(cpus), where.version)


def remove(path: Path, wait_s: float = 5.0) -> bool:
    """Remove an (emptied) cpuset; its last processes may take a moment to be gone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return False
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def lane_cpusets() -> list[Path]:
    """Every cpuset of ours on the machine (for `clean` and the tests' leftover check)."""
    where = hierarchy()
    return sorted(where.root.glob(f"{LANE_PREFIX}*")) if where else []


def process_cpuset(pid: int) -> str | None:
    """The cpuset cgroup path of a process as /proc/PID/cgroup names it (v1 line or v2)."""
    text = _read(Path(f"/proc/{pid}/cgroup"))
    v2 = None
    for line in text.splitlines():
        ident, controllers, path = line.split(":", 2)
        if "cpuset" in controllers.split(","):
            return path
        if ident == "0":
            v2 = path
    where = hierarchy()
    return v2 if where is not None and where.version == 2 else None


def allowed_cpus(pid: int) -> list[int]:
    """The CPUs a process may run on (Cpus_allowed_list)."""
    for line in _read(Path(f"/proc/{pid}/status")).splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    return []


def own_cpus() -> list[int]:
    """The CPUs this process may use: a lane's, or the machine's."""
    return sorted(os.sched_getaffinity(0))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def confinement(lane: int, instance: registry.Instance | None) -> dict:
    """What the kernel says about this lane now: its cpuset, its CPUs, and every process in
    the cpuset or registered by the lane's instance that is not confined to them."""
    cpus = own_cpus()
    mine = process_cpuset(os.getpid())
    where = hierarchy()
    members: set[int] = set()
    if where is not None and mine:
        members = set(Cpuset(where.root / mine.lstrip("/"), cpus, where.version).members())
    registered = {p["pid"] for p in (instance.processes if instance else [])
                  if registry.process_start_time(p["pid"]) == p.get("start")}
    outside: list[dict] = []
    if not mine or LANE_PREFIX not in mine:
        outside.append({"pid": os.getpid(), "cpuset": mine, "cpus": cpus, "why": "the lane has no cpuset of its own"})
    for pid in sorted(members | registered):
        path, allowed = process_cpuset(pid), allowed_cpus(pid)
        if path is None and not allowed:
            continue                                  # ended meanwhile
        if path != mine or not set(allowed) <= set(cpus):
            outside.append({"pid": pid, "cpuset": path, "cpus": allowed})
    return {"index": lane, "cpuset": mine, "cpus": cpus, "processes": len(members | registered),
            "outside": outside}
