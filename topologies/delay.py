"""The delay element in the core node: a fixed one-way delay per direction, never on an end host.

Two backends behind one interface (DelayBackend):
- NetemDelay: a Linux bridge joins the core node's two interfaces and `tc netem` delays each
  egress. Needs sch_netem, which standard distribution kernels have.
- DelayLine: the userspace delay line (hosts/delayline, AF_PACKET), for kernels without netem.

Both must never drop on their own: buffers are sized ≥ 1.5 × rate × delay, because a drop in
the delay element would be charged to the TCP scheme under test.
"""
from __future__ import annotations

import json
import math
import os
import select
import shlex
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path

from machine import binaries, capabilities
from machine.errors import UserError
from topologies.shell import check_cmd

BUFFER_FACTOR = 1.5                 # buffer ≥ 1.5 × bandwidth-delay product
NETEM_MIN_LIMIT = 1000              # netem's own default limit (packets)
RING_FLOOR_BYTES = 8 << 20          # bursts before the tbf settles exceed the BDP
MAX_FRAME_BYTES = 65_536 + 256      # one GSO super-frame with its virtio header
DEFAULT_RATE_BPS = 10_000_000_000   # sizing rate when a direction is not shaped
RING_MAX_BYTES = 4 << 30            # the delay line refuses larger rings
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


# -- sizing (pure) ---------------------------------------------------------------------

def netem_limit_packets(rate_bps: float, delay_s: float, mtu: int) -> int:
    """netem queue limit in packets: ≥ 1.5 × rate × delay at full-size packets, ≥ netem's default."""
    if mtu <= 0:
        raise ValueError(f"MTU must be positive, got {mtu}")
    bdp_bytes = max(rate_bps, 0) / 8 * max(delay_s, 0)
    return max(NETEM_MIN_LIMIT, math.ceil(BUFFER_FACTOR * bdp_bytes / mtu))


def ring_bytes(rate_bps: float | None, delay_s: float) -> int:
    """Delay-line ring size: ≥ 1.5 × rate × delay plus wrap slack, at least RING_FLOOR_BYTES.

    The ring stores whole frames (a 10-byte header each) and may waste up to one frame at
    its wrap point, hence the two frames of slack. An unshaped direction (rate None or 0)
    is sized for DEFAULT_RATE_BPS. Capped at the 4 GiB the binary accepts.
    """
    rate = rate_bps if rate_bps else DEFAULT_RATE_BPS
    need = math.ceil(BUFFER_FACTOR * rate / 8 * max(delay_s, 0)) + 2 * MAX_FRAME_BYTES
    return min(max(need, RING_FLOOR_BYTES), RING_MAX_BYTES)


def netem_commands(intf_a: str, intf_b: str, bridge: str, delay_ab_s: float, delay_ba_s: float,
                   limit_ab: int, limit_ba: int) -> list[list[str]]:
    """Commands (run in the core node) that build the netem delay path.

    Traffic a→b leaves through intf_b, so intf_b's egress carries the a→b delay.
    """
    def us(s: float) -> str:
        return f"{round(s * 1e6)}us"
    return [
        ["ip", "link", "add", "name", bridge, "type", "bridge"],
        ["ip", "link", "set", intf_a, "master", bridge],
        ["ip", "link", "set", intf_b, "master", bridge],
        ["ip", "link", "set", bridge, "up"],
        ["tc", "qdisc", "replace", "dev", intf_b, "root", "netem", "delay", us(delay_ab_s),
         "limit", str(limit_ab)],
        ["tc", "qdisc", "replace", "dev", intf_a, "root", "netem", "delay", us(delay_ba_s),
         "limit", str(limit_ba)],
    ]


def rps_mask(cpu: int) -> str:
    """rps_cpus value selecting exactly one CPU (hex bitmap, comma-grouped per 32 bits)."""
    if cpu < 0:
        raise ValueError(f"CPU must be ≥ 0, got {cpu}")
    bits = 1 << cpu
    words = []
    while True:
        words.append(f"{bits & 0xFFFFFFFF:08x}")
        bits >>= 32
        if not bits:
            break
    return ",".join(reversed(words))


# -- machine probes ----------------------------------------------------------------------

def delayline_binary() -> Path | None:
    """The built delay-line binary, or None if it has not been built."""
    return binaries.delayline()


BUILD_HINT = binaries.BUILD_HINT


def choose_backend(preference: str = "auto") -> "DelayBackend":
    """The delay backend to use; UserError saying why when the wanted one is unavailable."""
    if preference not in ("auto", "netem", "delayline"):
        raise UserError(f"unknown delay backend {preference!r}: use auto, netem or delayline")
    netem = capabilities.probe_qdisc("netem")
    binary = delayline_binary()
    if preference == "netem":
        if not netem:
            raise UserError("delay backend 'netem' unavailable: this kernel has no sch_netem module "
                            "(use --delay-backend delayline or auto)")
        return NetemDelay()
    if preference == "delayline":
        if binary is None:
            raise UserError(f"delay backend 'delayline' unavailable: {binaries.RELEASE}/"
                            f"startlab-delayline is not built; {BUILD_HINT}")
        return DelayLine(binary)
    if netem:
        return NetemDelay()
    if binary is not None:
        return DelayLine(binary)
    raise UserError("no delay backend available: this kernel has no sch_netem and the userspace "
                    f"delay line is not built; {BUILD_HINT}")


# -- node helpers ------------------------------------------------------------------------

def set_single_cpu_rps(node, intf: str, cpu: int) -> None:
    """Steer all receive processing of `intf` (in `node`) to one CPU.

    veth hands frames to the per-CPU backlog of whichever CPU sends; without a fixed RPS
    CPU, frames sent from different CPUs can overtake each other (reordering at high
    rates). Depending on the Mininet version a host's /sys may still show the root
    namespace's devices, so the mask is written through a fresh sysfs, mounted (on a
    temporary directory, in a private mount namespace) from the node's network namespace:
    that view always shows the node's own devices.
    """
    mask = rps_mask(cpu)
    script = (f"d=$(mktemp -d /tmp/stlsys.XXXXXX) || exit 1; "
              f"mount -t sysfs sysfs $d && for q in $d/class/net/{intf}/queues/rx-*; do "
              f"echo {mask} > $q/rps_cpus || exit 1; done && cat $d/class/net/{intf}/queues/rx-*/rps_cpus; "
              f"rc=$?; umount $d; rmdir $d; exit $rc")
    out = check_cmd(node, "unshare -m --propagation private sh -c " + shlex.quote(script))
    got = {line.strip().replace(",", "").lstrip("0") for line in out.split() if line.strip()}
    if got != {mask.replace(",", "").lstrip("0")}:
        raise RuntimeError(f"{node.name}: RPS mask of {intf} reads {sorted(got)}, wanted {mask}")


def interface_mtu(node, intf: str) -> int:
    words = check_cmd(node, f"ip -o link show dev {intf}").split()
    return int(words[words.index("mtu") + 1])


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the comm field: state is index 0, utime index 11, stime index 12.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- backends ------------------------------------------------------------------------------

class DelayBackend(ABC):
    """A delay element between two interfaces of a core node."""
    name: str

    @abstractmethod
    def start(self, node, intf_a: str, intf_b: str, delay_ab_s: float, delay_ba_s: float,
              rate_ab_bps: float | None, rate_ba_bps: float | None, workdir: Path, instance) -> None:
        """Start delaying; returns once frames are being forwarded."""

    @abstractmethod
    def stop(self) -> dict:
        """Stop and return the element's counters (backend, drops, reorders, lateness_us, cpu_s, …)."""


class NetemDelay(DelayBackend):
    """Bridge + netem on each egress of the core node (kernels with sch_netem)."""
    name = "netem"

    def __init__(self) -> None:
        self.node = None
        self.intfs: tuple[str, str] = ("", "")
        self.bridge = ""

    def start(self, node, intf_a, intf_b, delay_ab_s, delay_ba_s, rate_ab_bps, rate_ba_bps,
              workdir, instance) -> None:
        mtu = interface_mtu(node, intf_a)
        self.node, self.intfs = node, (intf_a, intf_b)
        # The bridge lives in the core node's namespace and goes away with it.
        self.bridge = f"{instance.prefix}br"
        cmds = netem_commands(intf_a, intf_b, self.bridge, delay_ab_s, delay_ba_s,
                              netem_limit_packets(rate_ab_bps or DEFAULT_RATE_BPS, delay_ab_s, mtu),
                              netem_limit_packets(rate_ba_bps or DEFAULT_RATE_BPS, delay_ba_s, mtu))
        for cmd in cmds:
            check_cmd(node, shlex.join(cmd))

    def _drops(self, intf: str) -> int:
        out = json.loads(check_cmd(self.node, f"tc -s -j qdisc show dev {intf} root") or "[]")
        return sum(int(q.get("drops", 0)) for q in out if q.get("kind") == "netem")

    def stop(self) -> dict:
        intf_a, intf_b = self.intfs
        ab, ba = self._drops(intf_b), self._drops(intf_a)
        for intf in self.intfs:
            check_cmd(self.node, f"tc qdisc del dev {intf} root")
        check_cmd(self.node, f"ip link del {self.bridge}")
        return {"backend": self.name, "drops": ab + ba, "reorders": 0,
                "lateness_us": {"p50": None, "p99": None, "max": None},
                "cpu_s": None,     # kernel work, not attributable to one process
                "a_to_b": {"drops": ab}, "b_to_a": {"drops": ba}}


class DelayLine(DelayBackend):
    """The userspace AF_PACKET delay line (hosts/delayline) in the core node.

    Order is kept by single-CPU RPS masks on the core's interfaces (frames then always
    enter one backlog), not by pinning: on a machine shared with other CPU-bound work a
    pinned thread must wait for its one CPU, which costs milliseconds of lateness.
    `cpus` pins the a→b and b→a threads anyway where a machine is reserved for the run.
    The threads run SCHED_FIFO (priority `rt_priority`, 0 = normal scheduling) so that a
    release is not delayed by a time slice of another process; they never spin longer
    than 100 µs, so they cannot monopolise a CPU.
    """
    name = "delayline"

    def __init__(self, binary: Path | None = None, cpus: tuple[int, int] | None = None,
                 rps_cpu: int = 0, rt_priority: int = 10) -> None:
        found = binary or delayline_binary()
        if found is None:
            raise UserError(f"the delay line is not built; {BUILD_HINT}")
        self.binary = found
        self.cpus = cpus
        self.rps_cpu = rps_cpu
        self.rt_priority = rt_priority
        self.proc: subprocess.Popen | None = None
        self.stats_path: Path | None = None
        self.stderr_path: Path | None = None

    def command(self, intf_a: str, intf_b: str, delay_ab_s: float, delay_ba_s: float,
                ring_ab: int, ring_ba: int, stats: Path) -> list[str]:
        return [str(self.binary), "--if-a", intf_a, "--if-b", intf_b,
                "--delay-ab-us", str(round(delay_ab_s * 1e6)), "--delay-ba-us", str(round(delay_ba_s * 1e6)),
                "--ring-ab-bytes", str(ring_ab), "--ring-ba-bytes", str(ring_ba), "--stats", str(stats),
                *(["--cpu-a", str(self.cpus[0]), "--cpu-b", str(self.cpus[1])] if self.cpus else [])]

    def start(self, node, intf_a, intf_b, delay_ab_s, delay_ba_s, rate_ab_bps, rate_ba_bps,
              workdir, instance) -> None:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.stats_path = workdir / "delayline-stats.json"
        self.stats_path.unlink(missing_ok=True)
        self.stderr_path = workdir / "delayline.stderr"
        set_single_cpu_rps(node, intf_a, self.rps_cpu)
        set_single_cpu_rps(node, intf_b, self.rps_cpu)
        cmd = self.command(intf_a, intf_b, delay_ab_s, delay_ba_s, ring_bytes(rate_ab_bps, delay_ab_s),
                           ring_bytes(rate_ba_bps, delay_ba_s), self.stats_path)
        with open(self.stderr_path, "wb") as err:
            self.proc = node.popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        instance.add_process(self.proc.pid, "delayline")
        self._wait_ready()
        if self.rt_priority:
            # All threads (-a) of the running line; failure is reported, not fatal to a run.
            subprocess.run(["chrt", "-a", "-f", "-p", str(self.rt_priority), str(self.proc.pid)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                if line.strip() == b"ready":
                    return
                if not line:        # EOF: the process ended
                    break
        self.proc.poll()
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()
        reason = self.stderr_path.read_text().strip() if self.stderr_path else ""
        raise RuntimeError(f"delay line did not become ready within {READY_TIMEOUT_S:.0f} s: "
                           f"{reason or 'no message'}")

    def stop(self) -> dict:
        if self.proc is None:
            raise RuntimeError("delay line not started")
        cpu_s = process_cpu_s(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("delay line did not stop on SIGTERM (killed; no stats)")
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()
        if self.proc.returncode != 0 or not self.stats_path or not self.stats_path.exists():
            reason = self.stderr_path.read_text().strip() if self.stderr_path else ""
            raise RuntimeError(f"delay line exited with {self.proc.returncode}: {reason or 'no stats'}")
        return summarize(json.loads(self.stats_path.read_text()), cpu_s)


def summarize(raw: dict, cpu_s: float | None) -> dict:
    """The delay line's stats file as the backend-neutral dict stop() returns.

    Combined lateness is the worse of the two directions (p50, p99, max each).
    """
    dirs = {k: raw[k] for k in ("a_to_b", "b_to_a")}

    def worst(key: str):
        vals = [d["lateness_us"][key] for d in dirs.values() if d["lateness_us"][key] is not None]
        return max(vals) if vals else None
    return {"backend": DelayLine.name, "drops": raw["drops"], "reorders": raw["reorders"],
            "lateness_us": {k: worst(k) for k in ("p50", "p99", "max")},
            "cpu_s": cpu_s, **dirs}
