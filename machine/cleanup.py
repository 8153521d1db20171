"""`run.py clean`: remove what startlab created, found by registry and by name, nothing else."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from machine import cpuset, kmod, registry

# Names startlab gives: PREFIX + two hex digits + a role (see topologies/names.py).
OUR_NAME = re.compile(rf"^{registry.PREFIX}[0-9a-f]{{2}}({'|'.join(registry.NODE_ROLES.values())})\d*(-eth\d+|br)?$")


def root_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(": ")
        if len(parts) > 1:
            names.append(parts[1].split("@")[0])
    return names


def our_shells() -> list[tuple[int, str]]:
    """Mininet host shells of ours: started as `bash ... mininet:<node name>`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for arg in argv:
            if arg.startswith(b"mininet:"):
                name = arg[len(b"mininet:"):].decode(errors="replace")
                if OUR_NAME.match(name):
                    found.append((int(entry.name), name))
    return found


def _links_of_netns(pid: int) -> list[str]:
    out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"],
                         capture_output=True, text=True).stdout
    return [line.split(": ")[1].split("@")[0] for line in out.splitlines() if len(line.split(": ")) > 1]


def processes_in_our_netns() -> list[tuple[int, str, str]]:
    """Processes (pid, comm, prefix) living in a network namespace whose interfaces carry our
    names: a node's namespace, even after its shell is gone (a killed campaign's server,
    say). Ownership by namespace, not by a program's name or arguments."""
    try:
        root_ns = os.readlink("/proc/self/ns/net")       # clean runs in the root namespace
    except OSError:
        return []
    prefix_of_ns: dict[str, str | None] = {}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ns = os.readlink(entry / "ns" / "net")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if ns == root_ns:
            continue
        if ns not in prefix_of_ns:
            ours = [n for n in _links_of_netns(int(entry.name)) if OUR_NAME.match(n)]
            prefix_of_ns[ns] = ours[0][:5] if ours else None
        if prefix_of_ns[ns]:
            found.append((int(entry.name), comm, prefix_of_ns[ns]))
    return found


def clean(force: bool = False) -> list[str]:
    """Remove dead instances (all instances with force), then stray objects with our names."""
    removed: list[str] = []
    # Before any link goes: a namespace is known as a node's by its interfaces' names.
    strays = [(pid, comm, prefix, registry.process_start_time(pid)) for pid, comm, prefix in processes_in_our_netns()]
    for _ in range(5):   # removing a lanes' owner ends its workers, whose instances then are dead too
        live_prefixes = set()
        before = len(removed)
        for inst in registry.load_instances():
            if inst.owner_alive() and not force and inst.owner_pid != os.getpid():
                live_prefixes.add(inst.prefix)
                continue
            removed += inst.remove_all()
        if len(removed) == before:
            break
    for pid, name in our_shells():
        if name[:5] in live_prefixes:
            continue
        if registry.terminate(pid, registry.process_start_time(pid)):
            removed.append(f"process shell {name} ({pid})")
    for pid, comm, prefix, start in strays:
        if prefix in live_prefixes or registry.process_start_time(pid) != start:
            continue
        if registry.terminate(pid, start):
            removed.append(f"process {comm} ({pid}) in a node's namespace")
    for name in root_links():
        if OUR_NAME.match(name) and name[:5] not in live_prefixes:
            if subprocess.run(["ip", "link", "del", name], capture_output=True).returncode == 0:
                removed.append(f"link {name}")
    for path in cpuset.lane_cpusets():        # stl-lane-<owner id>-<k>
        owner = path.name[len(cpuset.LANE_PREFIX):].split("-")[0]
        if owner not in live_prefixes:
            try:
                if cpuset.remove(path, wait_s=1.0):
                    removed.append(f"cpuset {path}")
            except OSError as exc:
                removed.append(f"cpuset {path} NOT removed: {exc}")
    from machine.slurm import cluster_processes
    for pid, comm, owner in cluster_processes():     # a local Slurm cluster's, its owner gone
        if owner not in live_prefixes and registry.terminate(pid, registry.process_start_time(pid)):
            removed.append(f"process {comm} ({pid}) of Slurm cluster {owner}")
    if not live_prefixes:                           # a module of ours no live instance uses
        for name in kmod.ours_loaded():
            if subprocess.run(["rmmod", name], capture_output=True).returncode == 0:
                removed.append(f"kernel module {name}")
    removed += remove_dead_vm_scratch()
    return removed


# The virtual clock's scratch beside the VM image (machine/vm/icount.py, cli/virtual.py):
# `.virtual-<pid>-…` and `.work-<pid>-…`, each its owner's while that process lives.
VM_SCRATCH = re.compile(r"^\.(virtual|work)-(\d+)-")


def remove_dead_vm_scratch() -> list[str]:
    """Scratch directories of virtual-clock boots whose owner died before removing them."""
    import shutil
    from machine.vm.image import CACHE_DIR
    removed = []
    for path in sorted(CACHE_DIR.glob("*/.*")) if CACHE_DIR.is_dir() else []:
        m = VM_SCRATCH.match(path.name)
        if m and path.is_dir() and not Path(f"/proc/{m.group(2)}").exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"virtual clock scratch {path}")
    return removed
