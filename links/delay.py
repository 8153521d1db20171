"""The delay element in the core node: a fixed one-way delay per direction, never on an end host.

Two backends behind one interface (DelayBackend):
- NetemDelay: a Linux bridge joins the core node's two interfaces and `tc netem` delays each
  egress. Needs sch_netem, which standard distribution kernels have.
- DelayLine: the userspace delay line (links/delayline, AF_PACKET), for kernels without netem.

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
import ipaddress
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from links import delaytraces
from machine import binaries, capabilities, clock
from machine.cpuset import own_cpus
from machine.errors import UserError
from machine.shell import check_cmd

BUFFER_FACTOR = 1.5                 # buffer ≥ 1.5 × bandwidth-delay product
NETEM_MIN_LIMIT = 1000              # netem's own default limit (packets)
RING_FLOOR_BYTES = 8 << 20          # bursts before the tbf settles exceed the BDP
MAX_FRAME_BYTES = 65_536 + 256      # one GSO super-frame with its virtio header
DEFAULT_RATE_BPS = 10_000_000_000   # sizing rate when a direction is not shaped
RING_MAX_BYTES = 4 << 30            # the delay line refuses larger rings
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
SNAPSHOT_TIMEOUT_S = 5.0
LATE_THRESHOLD_US = 1000          # `late_over_1ms`: frames released ≥ 1 ms late


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


QUEUE_POLICIES = ("droptail", "pushout", "red", "codel", "pie", "fq_codel")
# The policies whose AQM is CoDel's (fq_codel runs one per flow): a target below an interval.
CODEL_POLICIES = ("codel", "fq_codel")
AF13 = 14                           # DSCP of the default low-priority class
# The line's a side faces the clients: a→b carries client → server (up), b→a the other way.
LINE_DIRECTION = {"up": "ab", "down": "ba"}


@dataclass(frozen=True)
class LineQueue:
    """A bottleneck queue inside the delay line, in front of the delay (one direction).

    rate_bps counts whole Ethernet frames with their 14-byte header (as tc tbf does);
    limit_bytes is the buffer in the same bytes. `pushout` drops the most recently queued
    frame whose DSCP is in `low_dscp` to make room for an arrival; `red` takes
    (min_bytes, max_bytes, max_p), default a quarter and three quarters of the limit, 0.1;
    the AQMs take `aqm`: `codel` (RFC 8289) and `fq_codel` (RFC 8290, CoDel's per flow) their
    (target_us, interval_us, ecn), default (5000, 100000, False), `pie` (RFC 8033) its
    (target_us, tupdate_us, ecn), default (15000, 15000, False); with ecn they mark
    ECN-capable frames CE instead of dropping them.
    """
    rate_bps: float
    limit_bytes: int
    policy: str = "droptail"
    low_dscp: tuple[int, ...] = (AF13,)
    red: tuple[int, int, float] | None = None
    aqm: tuple[int, int, bool] | None = None
    # A trace of delivery opportunities (links/traces.py) drains the queue instead of the
    # rate, which is then the trace's mean (for sizing); each opportunity carries one frame
    # of opportunity_bytes (an MTU-sized packet with its Ethernet header).
    trace: Path | None = None
    opportunity_bytes: int = 1514
    # Probability that an arriving frame is lost on the link (Bernoulli), before the queue.
    loss: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate_bps or self.rate_bps <= 0:
            raise ValueError(f"queue rate must be positive, got {self.rate_bps}")
        if self.limit_bytes <= 0:
            raise ValueError(f"queue limit must be positive, got {self.limit_bytes} bytes")
        if self.policy not in QUEUE_POLICIES:
            raise ValueError(f"unknown queue policy {self.policy!r}: use {', '.join(QUEUE_POLICIES)}")
        if any(not 0 <= d <= 63 for d in self.low_dscp):
            raise ValueError(f"DSCP values are 0..63, got {self.low_dscp}")
        if self.red is not None and self.policy != "red":
            raise ValueError("red thresholds apply to the red policy only")
        if self.aqm is not None and (self.policy not in (*CODEL_POLICIES, "pie") or min(self.aqm[:2]) <= 0
                                     or (self.policy in CODEL_POLICIES and self.aqm[1] <= self.aqm[0])):
            raise ValueError(f"aqm times apply to the codel and fq_codel policies (0 < target < interval) and the "
                             f"pie policy (both above 0) only: got {self.aqm} for {self.policy}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss is a probability from 0 up to 1, got {self.loss}")


def queue_flags(direction: str, queue: LineQueue | None) -> list[str]:
    """The delay line's flags for one direction's queue ('ab' or 'ba'); none without a queue."""
    if queue is None:
        return []
    drain = ([f"--trace-{direction}", str(queue.trace), f"--opportunity-{direction}-bytes", str(queue.opportunity_bytes)]
             if queue.trace is not None else [f"--rate-{direction}-bps", str(round(queue.rate_bps))])
    flags = [*drain, f"--limit-{direction}-bytes", str(int(queue.limit_bytes)),
             f"--policy-{direction}", queue.policy,
             f"--low-dscp-{direction}", ",".join(str(d) for d in sorted(set(queue.low_dscp)))]
    if queue.red is not None:
        lo, hi, p = queue.red
        flags += [f"--red-{direction}", f"{int(lo)},{int(hi)},{p}"]
    if queue.aqm is not None:
        first, second, ecn = queue.aqm
        # fq_codel's times are its flows' CoDel's: the line takes them as --codel.
        flag = "codel" if queue.policy in CODEL_POLICIES else queue.policy
        flags += [f"--{flag}-{direction}", f"{int(first)},{int(second)}" + (",ecn" if ecn else "")]
    if queue.loss:
        flags += [f"--loss-{direction}", repr(queue.loss)]
    return flags


PairDelays = dict[tuple[str, str], float]     # (source IPv4, destination IPv4) → one-way delay (s)


def pair_delay_text(table: PairDelays) -> str:
    """The delay line's pair table: one `SRC_IPV4 DST_IPV4 DELAY_US` line per pair, sorted."""
    lines = []
    for (src, dst), seconds in sorted(table.items()):
        for addr in (src, dst):
            try:
                ipaddress.IPv4Address(addr)
            except ValueError:
                raise ValueError(f"{addr!r} is not an IPv4 address (pair {src} → {dst})") from None
        if not 0 <= seconds <= 10:
            raise ValueError(f"delay of pair {src} → {dst} must lie in 0..10 s, got {seconds}")
        lines.append(f"{src} {dst} {round(seconds * 1e6)}\n")
    return "".join(lines)


def longest_delay(default_s: float, table: PairDelays | None) -> float:
    """The longest one-way delay a direction applies (sizes its ring)."""
    return max([default_s, *(table or {}).values()])


def line_ring_bytes(rate_bps: float | None, delay_s: float, queue: LineQueue | None = None) -> int:
    """Ring of one direction of the line: the delay's share (`ring_bytes`) plus the queue's.

    The queue holds up to its limit; frames it pushes out keep their ring space until older
    frames leave, and each frame carries a 10-byte header, hence twice the limit.
    """
    extra = 2 * int(queue.limit_bytes) if queue else 0
    return min(ring_bytes(rate_bps, delay_s) + extra, RING_MAX_BYTES)


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


# What --delay-backend accepts: 'auto' (netem on the virtual clock; else the delay line on every
# kernel, netem only where it is not built) or a backend by name.
BACKEND_CHOICES = ("auto", "netem", "delayline")


def choose_backend(preference: str = "auto") -> "DelayBackend":
    """The delay backend to use; UserError saying why when the wanted one is unavailable."""
    if preference not in BACKEND_CHOICES:
        raise UserError(f"unknown delay backend {preference!r}: use {', '.join(BACKEND_CHOICES)}")
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
    # auto: on the virtual clock the guest kernel's netem, which costs no userspace crossing
    # per packet on the guest's one CPU (docs/emulation.md#the-virtual-clock); elsewhere the
    # delay line on every kernel, so that a scenario is the same experiment on every machine
    # (docs/emulation.md, "One delay element everywhere"); netem only where the delay line is
    # not built.
    if netem and clock.is_virtual():
        return NetemDelay()
    if binary is not None:
        return DelayLine(binary)
    if netem:
        return NetemDelay()
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
    # mount's own words (on a systemd machine whose fstab changed: "(hint) your fstab has been
    # modified ...") would be read as the mask: they are shown only when the mount fails.
    script = (f"d=$(mktemp -d /tmp/stlsys.XXXXXX) || exit 1; "
              f"m=$(mount -t sysfs sysfs $d 2>&1) || {{ echo \"mount: $m\"; rmdir $d; exit 1; }}; "
              f"for q in $d/class/net/{intf}/queues/rx-*; do "
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

    @abstractmethod
    def snapshot(self) -> dict:
        """Cumulative counters so far, without stopping; `interval_figures` turns two into an interval."""


class NetemDelay(DelayBackend):
    """Bridge + netem on each egress of the core node (kernels with sch_netem)."""
    name = "netem"

    def __init__(self) -> None:
        self.node = None
        self.intfs: tuple[str, str] = ("", "")
        self.bridge = ""
        self.generation = 0
        self.started = 0.0

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
        self.generation, self.started = 0, time.monotonic()

    def _counters(self, intf: str) -> dict:
        """Packets, bytes and drops of the netem qdisc on `intf` (its egress)."""
        out = json.loads(check_cmd(self.node, f"tc -s -j qdisc show dev {intf} root") or "[]")
        netem = [q for q in out if q.get("kind") == "netem"]
        return {"tx_frames": sum(int(q.get("packets", 0)) for q in netem),
                "tx_bytes": sum(int(q.get("bytes", 0)) for q in netem),
                "qdisc_drops": sum(int(q.get("drops", 0)) for q in netem)}

    def _drops(self, intf: str) -> int:
        return self._counters(intf)["qdisc_drops"]

    def snapshot(self) -> dict:
        """netem's own counters (no lateness: the kernel keeps none)."""
        if self.node is None:
            raise RuntimeError("netem delay not started")
        intf_a, intf_b = self.intfs
        self.generation += 1
        ab, ba = self._counters(intf_b), self._counters(intf_a)     # a→b leaves through intf_b
        return {"backend": self.name, "generation": self.generation, "final": False,
                "elapsed_s": time.monotonic() - self.started, "a_to_b": ab, "b_to_a": ba,
                "drops": ab["qdisc_drops"] + ba["qdisc_drops"], "reorders": 0}

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


def cpu_plan(cpus: list[int], uses_line: bool) -> tuple[list[int], int | None]:
    """(the CPUs whose backlogs take the path's receive work, the delay line's own CPU).

    A frame the line sends into a veth is received by the kernel at once, on the sending CPU,
    when the next hop's RPS CPU is that CPU: the line's thread then runs that CPU's whole
    backlog (routers, queues, the endpoints' stacks) inside its send call, tens of ms under
    a flood. With two CPUs or more the line gets the last to itself and every RPS mask
    points elsewhere, so its sends only enqueue. With one, it shares it (and that shows as
    its own lateness)."""
    if uses_line and len(cpus) >= 2:
        return list(cpus[:-1]), cpus[-1]
    return list(cpus), None


class DelayLine(DelayBackend):
    """The userspace AF_PACKET delay line (links/delayline) in the core node.

    Order is kept by single-CPU RPS masks on the core's interfaces (frames then always
    enter one backlog). `cpus` pins the a→b and b→a threads: the network builder gives
    them a CPU no RPS mask points at (`cpu_plan`), so that sending a frame never runs the
    receive path of the next hop inline. The threads run SCHED_RR (priority
    `rt_priority`, 0 = normal scheduling), so the pinned CPU is theirs whenever they need
    it; they never spin longer than the measured spin window. Round-robin, not FIFO: under
    FIFO one direction busy for seconds shut its sibling on the same CPU out (snapshots
    unanswered for 3 s in 3 of 8 runs of the push-out queue's fidelity test); RR bounds
    that at one time slice (sched_rr_timeslice_ms).
    """
    name = "delayline"

    def __init__(self, binary: Path | None = None, cpus: tuple[int, int] | None = None,
                 rps_cpu: int | None = None, rt_priority: int = 10) -> None:
        found = binary or delayline_binary()
        if found is None:
            raise UserError(f"the delay line is not built; {BUILD_HINT}")
        self.binary = found
        # By default the CPU plan of this process's CPUs (a lane's own, in lanes): the line's
        # threads on a CPU of their own, its frames' backlog on another (cpu_plan).
        stack, line = cpu_plan(own_cpus(), True)
        self.cpus = cpus if cpus is not None else ((line, line) if line is not None else None)
        self.rps_cpu = stack[0] if rps_cpu is None else rps_cpu
        self.rt_priority = rt_priority
        # The spin window measured for this host (links/hostfit.py); none: the binary's
        # defaults, the old fixed constants.
        self.tuning_flags: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.stats_path: Path | None = None
        self.stderr_path: Path | None = None
        self.generation = 0                 # newest stats generation read
        self.delay_traces: dict[str, delaytraces.DelayTrace] = {}   # 'ab'/'ba' → its delay trace
        self.delay_trace_epoch_ns = 0       # CLOCK_MONOTONIC ns the traces' steps count from

    @property
    def delay_trace_epoch(self) -> float:
        """The traces' epoch in CLOCK_MONOTONIC seconds."""
        return self.delay_trace_epoch_ns / 1e9

    def command(self, intf_a: str, intf_b: str, delay_ab_s: float, delay_ba_s: float,
                ring_ab: int, ring_ba: int, stats: Path, queue_ab: LineQueue | None = None,
                queue_ba: LineQueue | None = None, pairs_ab: Path | None = None,
                pairs_ba: Path | None = None, delay_traces: dict[str, Path] | None = None,
                delay_trace_epoch_ns: int | None = None) -> list[str]:
        return [str(self.binary), "--if-a", intf_a, "--if-b", intf_b,
                "--delay-ab-us", str(round(delay_ab_s * 1e6)), "--delay-ba-us", str(round(delay_ba_s * 1e6)),
                "--ring-ab-bytes", str(ring_ab), "--ring-ba-bytes", str(ring_ba), "--stats", str(stats),
                *(["--cpu-a", str(self.cpus[0]), "--cpu-b", str(self.cpus[1])] if self.cpus else []),
                *queue_flags("ab", queue_ab), *queue_flags("ba", queue_ba),
                *(["--pairs-ab", str(pairs_ab)] if pairs_ab else []),
                *(["--pairs-ba", str(pairs_ba)] if pairs_ba else []),
                *(w for d, p in sorted((delay_traces or {}).items()) for w in (f"--delay-trace-{d}", str(p))),
                *(["--delay-trace-epoch-ns", str(delay_trace_epoch_ns)] if delay_traces else []), *self.tuning_flags]

    def start(self, node, intf_a, intf_b, delay_ab_s, delay_ba_s, rate_ab_bps, rate_ba_bps,
              workdir, instance, *, queue_ab: LineQueue | None = None,
              queue_ba: LineQueue | None = None, pair_delays_ab: PairDelays | None = None,
              pair_delays_ba: PairDelays | None = None, delay_trace_ab: Path | None = None,
              delay_trace_ba: Path | None = None) -> None:
        """Start the line.

        `queue_ab`/`queue_ba` put a bottleneck queue before each direction's delay;
        `pair_delays_ab`/`pair_delays_ba` give IPv4 (source, destination) pairs their own
        one-way delay in that direction instead of delay_ab_s/delay_ba_s;
        `delay_trace_ab`/`delay_trace_ba` add a delay that steps over time
        (links/delaytraces.py), counted from `delay_trace_epoch` (CLOCK_MONOTONIC, s).
        """
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.stats_path = workdir / "delayline-stats.json"
        self.stats_path.unlink(missing_ok=True)
        self.stderr_path = workdir / "delayline.stderr"
        set_single_cpu_rps(node, intf_a, self.rps_cpu)
        set_single_cpu_rps(node, intf_b, self.rps_cpu)
        tables: dict[str, Path | None] = {}
        for direction, table in (("ab", pair_delays_ab), ("ba", pair_delays_ba)):
            tables[direction] = None
            if table:
                tables[direction] = workdir / f"delayline-pairs-{direction}.txt"
                tables[direction].write_text(pair_delay_text(table))
        trace_paths = {d: p for d, p in (("ab", delay_trace_ab), ("ba", delay_trace_ba)) if p}
        self.delay_traces = {d: delaytraces.read(p) for d, p in trace_paths.items()}
        # The steps count from now; the line is given this epoch, so the extra delay at any
        # moment is known here (extra_delay_ms).
        self.delay_trace_epoch_ns = time.monotonic_ns()
        extra = {d: t.high_ms / 1e3 for d, t in self.delay_traces.items()}
        cmd = self.command(intf_a, intf_b, delay_ab_s, delay_ba_s,
                           line_ring_bytes(rate_ab_bps, longest_delay(delay_ab_s, pair_delays_ab) + extra.get("ab", 0), queue_ab),
                           line_ring_bytes(rate_ba_bps, longest_delay(delay_ba_s, pair_delays_ba) + extra.get("ba", 0), queue_ba),
                           self.stats_path, queue_ab=queue_ab, queue_ba=queue_ba,
                           pairs_ab=tables["ab"], pairs_ba=tables["ba"],
                           delay_traces=trace_paths, delay_trace_epoch_ns=self.delay_trace_epoch_ns)
        with open(self.stderr_path, "wb") as err:
            self.proc = node.popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        instance.add_process(self.proc.pid, "delayline")
        self._wait_ready()
        if self.rt_priority:
            # All threads (-a) of the running line; failure is reported, not fatal to a run.
            subprocess.run(["chrt", "-a", "-r", "-p", str(self.rt_priority), str(self.proc.pid)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def extra_delay_ms(self, direction: str, at_s: float) -> float:
        """The delay trace's extra one-way delay of `direction` ('ab'/'ba') at monotonic `at_s`."""
        trace = self.delay_traces.get(direction)
        return trace.extra_ms(at_s - self.delay_trace_epoch) if trace else 0.0

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

    def snapshot(self, timeout_s: float = SNAPSHOT_TIMEOUT_S) -> dict:
        """Ask the running line for its counters (SIGUSR1) and wait for the new generation.

        The line rewrites its stats file atomically, so a read sees a whole document; the
        generation tells this request's answer from an older one.
        """
        if self.proc is None or self.stats_path is None:
            raise RuntimeError("delay line not started")
        if self.proc.poll() is not None:
            raise RuntimeError(f"delay line has exited with {self.proc.returncode}")
        wanted = self.generation + 1
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while True:
            raw = read_stats(self.stats_path)
            if raw is not None and raw.get("generation", 0) >= wanted:
                self.generation = raw["generation"]
                return {"backend": self.name, **raw}
            if time.monotonic() > deadline or self.proc.poll() is not None:
                reason = self.stderr_path.read_text().strip() if self.stderr_path else ""
                raise RuntimeError(f"delay line gave no snapshot {wanted} within {timeout_s:.0f} s"
                                   + (f": {reason}" if reason else ""))
            time.sleep(0.002)

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

    Combined lateness is the worse of the two directions (p50, p99, max each), and so are
    the line's own wake-up and spin figures.
    """
    dirs = {k: raw[k] for k in ("a_to_b", "b_to_a")}

    def worst(key: str):
        vals = [d["lateness_us"][key] for d in dirs.values() if d["lateness_us"][key] is not None]
        return max(vals) if vals else None
    return {"backend": DelayLine.name, "drops": raw["drops"], "reorders": raw["reorders"],
            "lateness_us": {k: worst(k) for k in ("p50", "p99", "max")},
            **own_timing(dirs), "cpu_s": cpu_s, **dirs}


def own_timing(dirs: dict) -> dict:
    """The line's own timer wake-ups and spin stalls, the worse direction's (whole life so
    far: the line keeps no interval of them): whether its late frames were the host's
    (links/hostfit.lateness_cause). Empty for a backend that measures neither."""
    if not any("wakeup_us" in d for d in dirs.values()):
        return {}
    def worst(key: str, sub: str | None = None) -> float:
        return max(((d.get(key) or {}).get(sub) if sub else d.get(key)) or 0 for d in dirs.values())
    return {"wakeup_us": {k: worst("wakeup_us", k) for k in ("p99", "max")},
            "spin_stall_max_us": worst("spin_stall_max_us"),
            "own_lateness_us": {k: worst("own_lateness_us", k) for k in ("p99", "max")},
            "send_call_max_us": worst("send_call_max_us"),
            "off_cpu_max_us": worst("off_cpu_max_us")}


def trace_epoch_s(queue_stats: dict) -> float:
    """When a trace link's trace began (its queue's `trace_epoch_mono_ns`, on the line's
    CLOCK_MONOTONIC) on CLOCK_REALTIME, the clock of captures."""
    return (queue_stats["trace_epoch_mono_ns"] - monotonic_minus_realtime_ns()) / 1e9


def monotonic_minus_realtime_ns(tries: int = 50) -> int:
    """CLOCK_MONOTONIC − CLOCK_REALTIME now, from the realtime read bracketed most tightly by
    two monotonic reads. One pair of reads is off by however long the process was descheduled
    between them: measured 174 frames of a trace link judged early on a loaded host, where
    a frame released within ~100 µs after its millisecond moved into the one before."""
    best = None
    for _ in range(tries):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r = time.time_ns()
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, (m0 + m1) // 2 - r)
    return best[1]


def read_stats(path: Path) -> dict | None:
    """The line's stats file, or None while it does not exist yet."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


# -- intervals between two snapshots (pure) ------------------------------------------------

DIRECTIONS = ("a_to_b", "b_to_a")
# Every way a frame can be lost inside the delay element (delay line and netem keys).
DROP_KINDS = ("ring_overflows", "send_errors", "socket_drops", "link_tx_drops", "rx_errors", "qdisc_drops")


def fine_histogram(direction: dict) -> dict[int, int] | None:
    """A direction's sparse lateness histogram {µs: frames}, or None when the element keeps none."""
    pairs = direction.get("lateness_fine_us")
    return None if pairs is None else {int(us): int(n) for us, n in pairs}


def histogram_figures(hist: dict[int, int] | None) -> dict:
    """p50, p99 and max (µs buckets, rounded down) of a histogram, as the line computes them.

    A quantile is the smallest bucket at or below which at least that fraction of the frames
    lie; all None when the histogram is unknown or empty.
    """
    count = sum(hist.values()) if hist else 0
    if not count:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted((us, n) for us, n in hist.items() if n)

    def quantile(q: float) -> int:
        rank, seen = max(1, math.ceil(q * count)), 0
        for us, n in ordered:
            seen += n
            if seen >= rank:
                return us
        return ordered[-1][0]
    return {"p50": quantile(0.5), "p99": quantile(0.99), "max": ordered[-1][0]}


def _difference(before: int | None, after: int | None, what: str) -> int:
    if after is None:
        return 0
    d = after - (before or 0)
    if d < 0:
        raise ValueError(f"{what} went down from {before} to {after}: the snapshots are out of "
                         "order or from different runs")
    return d


def _direction_interval(before: dict, after: dict, name: str) -> dict:
    drops = {k: _difference(before.get(k), after[k], f"{name}.{k}") for k in DROP_KINDS if k in after}
    hist = None
    h1 = fine_histogram(after)
    if h1 is not None:
        h0 = fine_histogram(before) or {}
        hist = {us: _difference(h0.get(us), n, f"{name} lateness bucket {us} µs") for us, n in h1.items()}
        if any(us not in h1 for us in h0):
            raise ValueError(f"{name}: a lateness bucket vanished: the snapshots are out of order")
        hist = {us: n for us, n in hist.items() if n}
    queue = after.get("queue")
    return {"frames": _difference(before.get("tx_frames"), after.get("tx_frames"), f"{name}.tx_frames"),
            "drops": sum(drops.values()), "drops_by_kind": drops,
            "reorders": _difference(before.get("reorders_seen"), after.get("reorders_seen"), f"{name}.reorders_seen"),
            "queue_drops": None if not queue else
            _difference((before.get("queue") or {}).get("dropped"), queue["dropped"], f"{name}.queue.dropped"),
            "histogram": hist}


def interval_figures(before: dict, after: dict) -> dict:
    """What the delay element did between two snapshots of it (`DelayBackend.snapshot`).

    frames: frames sent on; drops: frames lost inside the element, every kind (a bottleneck
    queue's deliberate drops are `queue_drops`, None without a queue); reorders: frames
    released before an earlier one; lateness_us p50/p99/max over the interval's frames
    (None when no frame or the backend keeps no lateness) and `late_over_1ms`, the frames
    released 1 ms or more late. Both directions together, and each under its name.
    """
    if before.get("backend") != after.get("backend"):
        raise ValueError(f"snapshots of different backends: {before.get('backend')} and {after.get('backend')}")
    if after.get("generation", 0) <= before.get("generation", 0):
        raise ValueError(f"snapshot generation {after.get('generation')} does not follow "
                         f"{before.get('generation')}")
    dirs = {name: _direction_interval(before[name], after[name], name) for name in DIRECTIONS}
    hists = [d.pop("histogram") for d in dirs.values()]
    merged: dict[int, int] | None = None
    if all(h is not None for h in hists):
        merged = {}
        for h in hists:
            for us, n in h.items():
                merged[us] = merged.get(us, 0) + n
    for d, h in zip(dirs.values(), hists):
        d["lateness_us"] = histogram_figures(h)
        d["late_over_1ms"] = None if h is None else sum(n for us, n in h.items() if us >= LATE_THRESHOLD_US)
    kinds: dict[str, int] = {}
    for d in dirs.values():
        for k, n in d["drops_by_kind"].items():
            kinds[k] = kinds.get(k, 0) + n
    queue = [d["queue_drops"] for d in dirs.values() if d["queue_drops"] is not None]
    elapsed = (after["elapsed_s"] - before["elapsed_s"]
               if "elapsed_s" in after and "elapsed_s" in before else None)
    out = {"backend": after.get("backend"),
           "generations": [before.get("generation"), after.get("generation")],
           "seconds": elapsed,
           "frames": sum(d["frames"] for d in dirs.values()),
           "drops": sum(kinds.values()), "drops_by_kind": kinds,
           "reorders": sum(d["reorders"] for d in dirs.values()),
           "queue_drops": sum(queue) if queue else None,
           "lateness_us": histogram_figures(merged),
           "late_over_1ms": None if merged is None else
           sum(n for us, n in merged.items() if us >= LATE_THRESHOLD_US),
           **own_timing({name: after[name] for name in DIRECTIONS}), **dirs}
    if "core" in after:
        out["core"] = after["core"]
    return out
