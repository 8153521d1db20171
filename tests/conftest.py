"""Shared test fixtures. Root integration tests check that they leave nothing behind."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

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


@pytest.fixture
def clean_machine():
    """For root tests: the machine must hold nothing of ours before and after the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    assert_nothing_left()
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text()
    yield
    assert_nothing_left()
    assert Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text() == allowed, \
        "the root namespace's allowed congestion controls were not restored"


def pytest_collection_modifyitems(config, items):
    """Tests marked virtual_clock run in a guest on the virtual clock, where their timing
    checks have one outcome (tests/vm/test_timing_on_virtual_clock.py): on the host they are
    deselected, unless STARTLAB_REAL_CLOCK_TESTS=1 asks for them on the real clock."""
    from machine import clock
    if clock.is_virtual() or os.environ.get("STARTLAB_REAL_CLOCK_TESTS") == "1":
        return
    moved = [i for i in items if i.get_closest_marker("virtual_clock")]
    if moved:
        config.hook.pytest_deselected(items=moved)
        items[:] = [i for i in items if not i.get_closest_marker("virtual_clock")]


def pytest_terminal_summary(terminalreporter):
    """How many timing assertions ran in each of their outcomes (tests/timing.py)."""
    from timing import COUNTS
    if COUNTS["virtual"]:
        terminalreporter.write_line(f"timing assertions: {COUNTS['virtual']} on the virtual clock (tolerance asserted)")
    if COUNTS["qualified"] or COUNTS["flagged"]:
        terminalreporter.write_line(f"timing assertions: {COUNTS['qualified']} on a qualified host (tolerance "
                                    f"asserted), {COUNTS['flagged']} on an unfit host (flag asserted)")


class HostWatch:
    """The host monitor over one test, for networks built without topologies.network (the
    delay line's own test path): `flags(...)` stops it and gives hostfit.run_flags."""

    def __init__(self, workdir: Path):
        from machine.host import HostMonitor
        self.monitor = HostMonitor(workdir).start()
        self.timing = None

    def stop(self):
        if self.monitor is not None:
            self.timing = self.monitor.stop()
            self.monitor = None
        return self.timing

    def flags(self, delay_stats: list | None = None, tail: bool = False) -> list[str]:
        """The delay flags (timer wake-ups, the delay element's lateness) of the test; `tail`
        for figures of a few frames' tail (hostfit.delay_flags)."""
        from links.hostfit import delay_flags
        return delay_flags(self.stop(), delay_stats, tail)


@pytest.fixture
def host_watch(tmp_path):
    watch = HostWatch(tmp_path / "host-monitor")
    yield watch
    watch.stop()
