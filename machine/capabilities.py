"""What this kernel and machine can do, probed rather than assumed.

`run.py doctor` prints these; the network builder asks them which delay backend and
switch to use. Qdiscs are probed by really creating one on the loopback device of a
throwaway network namespace (gone when the probe exits), because module lists lie:
built-in qdiscs have no module, and a listed module may fail to load.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from machine import binaries
from machine.errors import UserError

QDISC_PROBES = {
    "netem": "netem delay 1ms",
    "tbf": "tbf rate 1mbit burst 3028 limit 30000",
    "htb": "htb default 1",
    "fq": "fq",
    "fq_codel": "fq_codel",
    "codel": "codel",
    "pie": "pie",
    "cake": "cake",
    "prio": "prio",
    "clsact": None,            # clsact is added with its own syntax below
}


def require_root() -> None:
    if os.geteuid() != 0:
        raise UserError("startlab needs root to build network namespaces (run it with sudo)")


@lru_cache(maxsize=None)
def probe_qdisc(kind: str) -> bool:
    """Can a qdisc of this kind be created here? (needs root; asked once per process)"""
    spec = QDISC_PROBES[kind]
    cmd = "tc qdisc add dev lo clsact" if spec is None else f"tc qdisc add dev lo root {spec}"
    result = subprocess.run(["unshare", "-n", "sh", "-c", cmd],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return result.returncode == 0


def mounts() -> list[tuple[str, str, str]]:
    """(source, mount point, fs type) of /proc/mounts."""
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def cgroup2_mount() -> str | None:
    """cgroup v2 mount point: /sys/fs/cgroup (unified) or e.g. /sys/fs/cgroup/unified (hybrid)."""
    points = [m[1] for m in mounts() if m[2] == "cgroup2"]
    return min(points, key=len) if points else None


def bpffs_mount() -> str | None:
    points = [m[1] for m in mounts() if m[2] == "bpf"]
    return points[0] if points else None


def kernel_has_module(name: str) -> bool:
    """Loaded, built in, or loadable."""
    if Path(f"/sys/module/{name}").exists():
        return True
    if shutil.which("modprobe"):
        return subprocess.run(["modprobe", "-n", "-q", name], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    return False


def btf_available() -> bool:
    return Path("/sys/kernel/btf/vmlinux").exists()


def bpf_struct_ops_tcp() -> bool:
    """Does the kernel's BTF know struct_ops for TCP congestion control?"""
    btf = Path("/sys/kernel/btf/vmlinux")
    try:
        data = btf.read_bytes()
    except OSError:
        return False
    return b"bpf_struct_ops_tcp_congestion_ops" in data or b"bpf_tcp_ca" in data


OVS_DB_SOCKET = Path("/var/run/openvswitch/db.sock")


def ovs_datapath() -> bool:
    """Open vSwitch with its kernel datapath (userspace OVS is too slow for the testbed)."""
    return kernel_has_module("openvswitch") and shutil.which("ovs-vsctl") is not None


def switch_kind() -> tuple[str, type | None]:
    """('ovs', OVSBridge) when the OVS kernel datapath exists, else ('linux-bridge', None).
    On the virtual clock OVS only where its daemons were started (the kernel matrix does):
    a campaign's guest starts none, so it has no daemons sharing its one CPU and the same
    switch as the real clock's runs on a host without OVS."""
    from machine import clock
    if ovs_datapath() and (not clock.is_virtual() or OVS_DB_SOCKET.exists()):
        from mininet.node import OVSBridge
        return "ovs", OVSBridge
    return "linux-bridge", None


def tool_version(cmd: list[str], pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str | None:
    exe = shutil.which(cmd[0])
    if exe is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, out.stdout + out.stderr)
    return match.group(1) if match else "unknown"


def tool_versions() -> dict[str, str | None]:
    try:
        from mininet.net import VERSION as mininet_version
    except ImportError:
        mininet_version = None
    return {
        "mininet": mininet_version,
        "iperf3": tool_version(["iperf3", "--version"]),
        "lighttpd": tool_version(["lighttpd", "-v"]),
        "curl": tool_version(["curl", "--version"]),
        "tcpdump": tool_version(["tcpdump", "--version"]),
        "tc": tool_version(["tc", "-V"], r"(\d+\.\d+(?:\.\d+)?|\d{6})"),
        "ethtool": tool_version(["ethtool", "--version"]),
        "brctl": "present" if shutil.which("brctl") else None,
    }


@dataclass
class Report:
    kernel: str
    qdiscs: dict[str, bool]
    btf: bool
    bpf_struct_ops: bool
    cgroup2: str | None
    bpffs: str | None
    ovs_datapath: bool
    tools: dict[str, str | None]
    delay_backend: str | None
    delay_reason: str
    switch: str
    switch_reason: str
    problems: list[str] = field(default_factory=list)


def doctor() -> Report:
    """Probe everything `doctor` reports. Root is needed for the qdisc probes."""
    require_root()
    qdiscs = {kind: probe_qdisc(kind) for kind in QDISC_PROBES}
    tools = tool_versions()
    problems = [f"{name} is not installed" for name, v in tools.items() if v is None]
    binary = binaries.delayline()
    if binary is not None:
        backend, reason = "delayline", (f"startlab's delay line ({binary}), the default on every kernel; "
                                        + ("this kernel also has sch_netem (--delay-backend netem)"
                                           if qdiscs["netem"] else "this kernel has no sch_netem"))
    elif qdiscs["netem"]:
        backend, reason = "netem", "the delay line is not built (run playbooks/bootstrap.sh): the kernel's sch_netem"
    else:
        backend, reason = None, ("the kernel has no sch_netem and the delay line is not built "
                                 "(run playbooks/bootstrap.sh)")
        problems.append("no delay backend: " + reason)
    if not qdiscs["tbf"]:
        problems.append("no tbf qdisc: the bottleneck cannot be shaped")
    ovs = ovs_datapath()
    switch, switch_reason = (("ovs", "Open vSwitch kernel datapath found") if ovs else
                             ("linux-bridge", "no Open vSwitch kernel datapath; Linux bridge"
                              + ("" if shutil.which("brctl") else " (brctl missing!)")))
    return Report(kernel=os.uname().release, qdiscs=qdiscs, btf=btf_available(),
                  bpf_struct_ops=bpf_struct_ops_tcp(), cgroup2=cgroup2_mount(), bpffs=bpffs_mount(),
                  ovs_datapath=ovs, tools=tools, delay_backend=backend, delay_reason=reason,
                  switch=switch, switch_reason=switch_reason, problems=problems)
