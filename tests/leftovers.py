"""What startlab may leave on the machine, found from the machine itself: root integration
tests check before and after that none of it is there."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine import kmod  # noqa: E402
from machine import cpuset, registry  # noqa: E402
from machine.cleanup import OUR_NAME, our_shells, processes_in_our_netns, root_links  # noqa: E402
from machine.slurm import cluster_processes  # noqa: E402

OUR_PROGRAMS = ("iperf3", "lighttpd", "tcpdump", "curl", "startlab-delayline")


def our_processes() -> list[str]:
    """Programs of the workloads still running with a startlab node's name space."""
    found = [f"shell {name} ({pid})" for pid, name in our_shells()]
    found += [f"{comm} ({pid}) in node namespace {prefix}" for pid, comm, prefix in processes_in_our_netns()
              if not any(f"({pid})" in f for f in found)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # /proc/PID/comm holds at most 15 characters (startlab-delayline → startlab-delayl).
        ours = comm in {p[:15] for p in OUR_PROGRAMS}
        if ours and ("10.1.0." in argv or "10.2.0." in argv or "stl" in argv or " probe " in argv):
            found.append(f"{comm} ({entry.name}): {argv[:80]}")
    return found


def bpf_leftovers() -> dict[str, list[str]]:
    """struct_ops named stl*, sock_ops attached to the cgroup v2 root and pins under /sys/fs/bpf/stl*."""
    from hosts.bpf.loader import BpfError, bpftool
    from machine.capabilities import cgroup2_mount

    try:
        struct_ops = [f"{s['name']} ({s['id']})" for s in bpftool("struct_ops", "list", as_json=True) or []
                      if s.get("name", "").startswith(registry.PREFIX)]
        cgroup = cgroup2_mount()
        attached = [f"{p.get('name')} ({p.get('id')})" for p in
                    (bpftool("cgroup", "show", cgroup, as_json=True) or [] if cgroup else [])
                    if str(p.get("name", "")).startswith(registry.PREFIX)]
    except (BpfError, FileNotFoundError) as exc:
        return {"bpftool": [str(exc)]}
    bpffs = Path("/sys/fs/bpf")
    pins = [str(p) for p in bpffs.glob(f"{registry.PREFIX}*")] if bpffs.is_dir() else []
    return {"struct_ops": struct_ops, "cgroup_attached": attached, "pins": pins}


def leftovers() -> dict[str, list[str]]:
    """Everything of startlab's still on the machine (empty lists when clean)."""
    return {
        **bpf_leftovers(),
        "links": [n for n in root_links() if OUR_NAME.match(n) or n.startswith(registry.PREFIX)],
        "netns": [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
                  .stdout.split() if n.startswith(registry.PREFIX)],
        "processes": our_processes(),
        "registry": [p.name for p in registry.REGISTRY_DIR.glob(f"{registry.PREFIX}*.json")]
        if registry.REGISTRY_DIR.is_dir() else [],
        "cpusets": [str(p) for p in cpuset.lane_cpusets()],
        "scratch": [str(p) for p in Path(tempfile.gettempdir()).glob("startlab-scratch-*")],
        "kernel_modules": kmod.ours_loaded(),
        "slurm": [f"{comm} ({pid}) of cluster {owner}" for pid, comm, owner in cluster_processes()]
        + [str(p) for p in Path(tempfile.gettempdir()).glob(f"{registry.PREFIX}*-slurm-*")],
    }


def vm_leftovers() -> list[str]:
    """qemu processes of ours (their kernel command line names the checkout), mounts under
    the VM image cache, half-built images (machine/vm)."""
    from machine.vm.image import CACHE_DIR
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"qemu-system-x86_64") and b"startlab.checkout=" in b" ".join(argv):
                found.append(f"qemu ({entry.name})")
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    found += [m.split()[1] for m in mounts if m and m.split()[1].startswith(str(CACHE_DIR))]
    found += [str(p) for p in CACHE_DIR.glob(".build-*")]
    found += [str(p) for p in CACHE_DIR.glob("*/.virtual-*")] + [str(p) for p in CACHE_DIR.glob("*/.work-*")]
    return found


def assert_nothing_left() -> None:
    left = {k: v for k, v in leftovers().items() if v}
    assert not left, f"startlab left state behind: {left}"
