"""`run.py clean`: remove what startlab created, found by registry and by name, nothing else."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from machine import cpuset, registry

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


def clean(force: bool = False) -> list[str]:
    """Remove dead instances (all instances with force), then stray objects with our names."""
    removed: list[str] = []
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
    return removed
