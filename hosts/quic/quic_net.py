"""A client — core — server path for checking the QUIC endpoints on their own (first-flight
timing, goodput, CPU): the delay line's own test network (links/delayline/line_net.py),
with the QUIC processes on its end hosts.

```
stl<id>cl1 [cl1-eth0] ── veth ── [co-eth0] stl<id>co [co-eth1] ── veth ── [sv1-eth0] stl<id>sv1
 10.77.0.1 (client)           tbf on co-eth0 (toward the client);                10.77.0.2 (server)
                              delay line, or a bridge without delay
```

The core forwards at L2: startlab's delay line when the path has a delay
(links.delay.DelayLine, as in every campaign: its own CPU, the host's spin window,
SCHED_RR, ready before the first frame), else a Linux bridge. On the virtual clock the
delay is the guest kernel's netem on each egress (as `--delay-backend auto` chooses there:
no userspace crossing per packet on the guest's one CPU), and the tbf is netem's child
toward the client. The bottleneck is a tbf on the core's egress toward the client, never on
an end host, so neither TCP nor QUIC is back-pressured by its own qdisc. The nodes and every process started here are registered
under one startlab instance, so `run.py clean` finds whatever a killed test left; on exit
everything is removed, and only the processes started here are signalled, by PID.

Also: a reader for classic pcap files of Ethernet/IPv4/UDP (what the checks need from
tcpdump) and the first-flight summary of a server's response.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from links.delay import DelayLine, NetemDelay
from links.delayline.line_net import H1_IP, H2_IP, LineNet, line_net
from links.hostfit import delay_flags, rate_flags, tuning_for
from machine import clock, host
from machine.binaries import RELEASE
from machine.host import HostMonitor
from machine.shell import check_cmd
from wire import pcap

SERVER_BIN = RELEASE / "startlab-quic-server"
CLIENT_BIN = RELEASE / "startlab-quic-client"
DELAYLINE_BIN = RELEASE / "startlab-delayline"
CLIENT_IP, SERVER_IP = H1_IP, H2_IP
FRAME = 1514                 # Ethernet frame of a 1500-byte IP packet
MIN_FRAME = 60               # the smallest Ethernet frame (without its FCS)
NETEM_OWN_LIMIT = 1000       # packets netem holds in its delay, beyond its child's queue


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tbf_burst_bytes(rate_bps: float, offloads: bool) -> int:
    """500 µs of tokens, at least three frames (README: a one-frame bucket under-shapes
    here); with offloads on, a whole 64 KiB GSO frame."""
    burst = max(3 * FRAME, int(rate_bps * 500e-6 / 8))
    return max(burst, 96 * 1024) if offloads else burst


@dataclass
class PathSpec:
    rate_bps: float | None = None        # bottleneck toward the client (None: no tbf)
    rtt_ms: float = 0.0                  # added by the delay line (0: a bridge)
    limit_bytes: int | None = None       # tbf queue (default: 208 frames or 10 ms, more)
    offloads: bool = False               # tso/gso/gro and UDP segmentation on the veths
    workdir: Path | None = None          # logs and captures (default: a temporary directory
                                         # removed with the path)


class QuicNet:
    """Build with `with QuicNet(PathSpec(...)) as net:`; torn down on exit. `client` and
    `server` are the end hosts (Mininet nodes), `client_intf`/`server_intf` their links."""

    def __init__(self, spec: PathSpec) -> None:
        self.spec = spec
        self.procs: list[subprocess.Popen] = []
        self.line: DelayLine | NetemDelay | None = None
        # On the virtual clock: the guest's CPU busy fraction over each fetch (its pace is the
        # CPU's, not the path's, where one was saturated).
        self.fetch_busy: list[float] = []
        self.ln: LineNet | None = None
        self._stack = ExitStack()
        self.own_workdir = spec.workdir is None
        self.workdir = spec.workdir or Path(tempfile.mkdtemp(prefix="startlab-quicnet-"))
        # The host monitor over the path's life; after exit, `host_flags` holds its verdict
        # ({'delay': [...], 'rate': [...]}, empty lists: the host was punctual).
        self.monitor: HostMonitor | None = None
        self.host_flags: dict[str, list[str]] = {"delay": [], "rate": []}

    # -- construction --------------------------------------------------------------------

    def __enter__(self) -> "QuicNet":
        try:
            self.up()
        except BaseException:
            self.down()
            self.remove_workdir()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()
        self.remove_workdir()

    def up(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not clock.is_virtual():      # exact timers there: nothing to monitor but the guest's CPU
            self.monitor = HostMonitor(self.workdir / "host-monitor").start()
        self.ln = ln = self._stack.enter_context(line_net(offload=self.spec.offloads))
        p = ln.instance.prefix
        self.client, self.server = ln.h1, ln.h2
        self.client_intf, self.server_intf = f"{p}cl1-eth0", f"{p}sv1-eth0"
        if self.spec.rtt_ms > 0:
            if clock.is_virtual():
                self.line = NetemDelay()
            else:
                self.line = DelayLine()
                self.line.tuning_flags = tuning_for(host.current()).delayline_flags()
            one_way = self.spec.rtt_ms / 1e3 / 2
            rate = self.spec.rate_bps or 1e9
            self.line.start(ln.core, ln.core_a, ln.core_b, one_way, one_way, rate, rate,
                            self.workdir / "delayline", ln.instance)
        else:
            check_cmd(ln.core, f"ip link add {p}br type bridge")
            for intf in (ln.core_a, ln.core_b):
                check_cmd(ln.core, f"ip link set {intf} master {p}br")
            check_cmd(ln.core, f"ip link set {p}br up")
        if self.spec.rate_bps:
            rate = self.spec.rate_bps
            limit = self.spec.limit_bytes or max(208 * FRAME, int(rate * 0.010 / 8))
            check_cmd(ln.core, f"tc qdisc replace dev {ln.core_a} {self._tbf_parent()} tbf rate {int(rate)}bit "
                               f"burst {tbf_burst_bytes(rate, self.spec.offloads)} limit {limit}")
            self._netem_holds(limit)
        # Forwarding starts once the line's packet sockets are bound; a ping through it proves it.
        deadline = time.monotonic() + 5
        while self.server.cmd(f"ping -c1 -W1 {CLIENT_IP} >/dev/null && echo ok").strip() != "ok":
            if time.monotonic() > deadline:
                raise RuntimeError("no ping through the path within 5 s")

    def _tbf_parent(self) -> str:
        """Where the bottleneck's tbf sits on the core's egress toward the client: the root,
        or under that egress's netem (delayed, then shaped: the same path)."""
        if not isinstance(self.line, NetemDelay):
            return "root"
        assert self.ln is not None
        netem = [q for q in json.loads(check_cmd(self.ln.core, f"tc -j qdisc show dev {self.ln.core_a} root"))
                 if q.get("kind") == "netem"]
        return f"parent {netem[0]['handle']}1"

    def _netem_holds(self, tbf_limit_bytes: int) -> None:
        """A netem's limit counts the packets of its child qdisc too: raised so that only the
        tbf's own queue limit drops. (Measured: with netem's limit at 1000, a 4240-frame tbf
        queue lost datagrams, and HyStart++ on it met a loss before its CSS ended.)"""
        if not isinstance(self.line, NetemDelay):
            return
        assert self.ln is not None
        delay_us = round(self.spec.rtt_ms * 1e3 / 2)
        held = NETEM_OWN_LIMIT + tbf_limit_bytes // MIN_FRAME
        check_cmd(self.ln.core, f"tc qdisc change dev {self.ln.core_a} root netem delay {delay_us}us limit {held}")

    def set_rate(self, rate_bps: float, limit_bytes: int | None = None) -> None:
        """Change the bottleneck's rate (and queue) while the path is up: a path that
        changed between two connections."""
        if not self.spec.rate_bps or self.ln is None:
            raise RuntimeError("this path has no bottleneck to change (PathSpec.rate_bps)")
        limit = limit_bytes or self.spec.limit_bytes or max(208 * FRAME, int(rate_bps * 0.010 / 8))
        check_cmd(self.ln.core, f"tc qdisc change dev {self.ln.core_a} {self._tbf_parent()} tbf rate {int(rate_bps)}bit "
                                f"burst {tbf_burst_bytes(rate_bps, self.spec.offloads)} limit {limit}")
        self._netem_holds(limit)

    # -- processes -----------------------------------------------------------------------

    def popen(self, node, argv: list[str], **kw) -> subprocess.Popen:
        """Start `argv` on `node` (registered with the path's instance, stopped on exit)."""
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = node.popen(argv, **kw)
        assert self.ln is not None
        self.ln.instance.add_process(p.pid, Path(argv[0]).name)
        self.procs.append(p)
        return p

    @staticmethod
    def stop(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def start_server(self, args: list[str], stats: Path, log: Path) -> subprocess.Popen:
        """The QUIC server on SERVER_IP:4433; returns once it listens."""
        err = open(log, "w")
        p = self.popen(self.server, [str(SERVER_BIN), "--listen", f"{SERVER_IP}:4433",
                                     "--stats", str(stats), *args],
                       stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if "listening on" in log.read_text():
                return p
            if p.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()}")
            time.sleep(0.02)
        raise RuntimeError("server did not start listening")

    def fetch(self, size: str, args: list[str] = (), timeout: float = 120) -> dict:
        """One client fetch; its JSON (raises with the client's message on failure)."""
        cpu0 = clock.cpu_times()
        p = self.popen(self.client, [str(CLIENT_BIN), "--server", f"{SERVER_IP}:4433",
                                     "--size", size, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=timeout)
        if clock.is_virtual():
            self.fetch_busy.append(clock.guest_cpu(cpu0, clock.cpu_times())["busy_fraction"] or 0.0)
        if p.returncode != 0:
            raise RuntimeError(f"client failed ({p.returncode}): {err.strip()} {out.strip()}")
        return json.loads(out)

    def start_capture(self, node, intf: str, path: Path, snap: int = 128, immediate: bool = False) -> subprocess.Popen:
        """tcpdump on `intf`; `immediate`: every packet handed over as it arrives (a capture
        shorter than libpcap's one-second block timeout is otherwise lost whole when stopped)."""
        err = path.with_suffix(".err")
        p = self.popen(node, ["tcpdump", "-i", intf, "-s", str(snap), "-n", "-U", "-w", str(path),
                              "--time-stamp-precision", "nano", *(["--immediate-mode"] if immediate else []), "udp"],
                       stdout=subprocess.DEVNULL, stderr=open(err, "w"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if "listening on" in err.read_text():
                return p
            if p.poll() is not None:
                raise RuntimeError(f"tcpdump exited: {err.read_text()}")
            time.sleep(0.02)
        raise RuntimeError("tcpdump did not start")

    def stop_capture(self, p: subprocess.Popen) -> None:
        time.sleep(0.2)                   # let the last frames reach the file
        self.stop(p, signal.SIGINT)

    # -- teardown ------------------------------------------------------------------------

    def down(self) -> None:
        for p in reversed(self.procs):
            self.stop(p)
        self.procs.clear()
        delay_stats = []
        if isinstance(self.line, DelayLine) and self.line.proc is not None:
            delay_stats.append(self.line.stop())
        self.line = None
        if clock.is_virtual():
            self.host_flags = {"delay": clock.saturation_flags(max(self.fetch_busy, default=None)), "rate": []}
        if self.monitor is not None:
            timing = self.monitor.stop()
            self.monitor = None
            tbf = ([{"direction": "down", "rate_bps": self.spec.rate_bps, "frame_bytes": FRAME,
                     "burst_bytes": tbf_burst_bytes(self.spec.rate_bps, self.spec.offloads)}]
                   if self.spec.rate_bps else [])
            self.host_flags = {"delay": delay_flags(timing, delay_stats), "rate": rate_flags(timing, tbf)}
        self._stack.close()               # the network and its instance
        self.ln = None

    def remove_workdir(self) -> None:
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# -- captures ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Datagram:
    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    length: int          # UDP payload bytes (from the UDP header: true even when snapped)
    long_header: bool    # QUIC long header (handshake) rather than a 1-RTT packet


def read_udp_pcap(path: Path) -> list[Datagram]:
    """IPv4/UDP datagrams of a capture (wire/pcap.py), in file order."""
    return [Datagram(d.ts, pcap.dotted(d.src), pcap.dotted(d.dst), d.sport, d.dport, d.length,
                     bool(d.first_byte & 0x80)) for d in pcap.udp_datagrams(path)]


def first_flight(datagrams: list[Datagram], server: str, full_size: int, rtt_s: float,
                 path_rtt_s: float | None = None) -> dict:
    """The server's first flight of response data, as seen at its interface.

    It starts with the first full-size 1-RTT datagram of the server and ends before the
    first datagram the client sends at least 0.9 × `rtt_s` (the handshake RTT) later, or
    `path_rtt_s` (the path's own RTT, where known) if that is earlier: no acknowledgement of
    data can come earlier, while the client may still acknowledge handshake-time packets
    (after its 25 ms ack delay) within the flight. The path's RTT bounds it when the
    handshake took longer than the path (endpoints slow to answer): acknowledgements of
    data then come back before 0.9 × the handshake's RTT (measured: a 62.6 ms handshake on
    a 50 ms path, the first data acknowledged 50.5 ms into the flight). Times are relative
    to the first datagram of the flight.
    """
    server_out = [d for d in datagrams if d.src == server]
    start = next((d.ts for d in server_out if not d.long_header and d.length >= full_size), None)
    if start is None:
        raise ValueError("no full-size response datagram in the capture")
    earliest = min(0.9 * rtt_s, path_rtt_s if path_rtt_s is not None else float("inf"))
    acks = [d.ts for d in datagrams if d.src != server and d.ts >= start + earliest]
    end = acks[0] if acks else float("inf")
    flight = [d for d in server_out if start <= d.ts < end and not d.long_header]
    times = [d.ts - start for d in flight]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # The initial burst: datagrams before the first gap of 100 µs or more.
    burst = next((i + 1 for i, g in enumerate(gaps) if g >= 100e-6), len(flight))
    return {
        "datagrams": len(flight),
        "bytes": sum(d.length for d in flight),
        "initial_burst": burst,
        "initial_burst_span_us": times[burst - 1] * 1e6 if burst else 0.0,
        "span_ms": times[-1] * 1e3 if times else 0.0,
        "first_ack_ms": (end - start) * 1e3 if acks else None,
        "release_ms": sorted({round(t * 1e3, 1) for t in times}),
        "times_ms": [round(t * 1e3, 3) for t in times],
    }


def bursts(times: list[float], gap_s: float = 100e-6) -> list[int]:
    """The sizes of the runs of datagrams that left less than `gap_s` apart (a burst: what a
    sender released at once, as first_flight's initial burst counts it)."""
    sizes: list[int] = []
    for i, t in enumerate(times):
        if i and t - times[i - 1] < gap_s:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


def first_rounds(datagrams: list[Datagram], server: str, full_size: int, rtt_s: float, rounds: int = 3) -> list[dict]:
    """The server's 1-RTT datagrams in its first `rounds` round trips, from its first
    full-size response datagram, each round one path RTT long (`rtt_s`, the path's: in the
    first rounds the queue is short, so a round's acknowledgements return about one path
    RTT after its data). Per round: datagrams, bytes, the sending span, the bursts (bursts())
    and their largest, and the median gap between bursts: a paced sender spreads its
    window in small bursts over the round; an unpaced one sends it as acknowledgements
    arrive, or at once."""
    server_out = [d for d in datagrams if d.src == server and not d.long_header]
    start = next((d.ts for d in server_out if d.length >= full_size), None)
    if start is None:
        raise ValueError("no full-size response datagram in the capture")
    out = []
    for k in range(rounds):
        times = [d.ts - start for d in server_out if k * rtt_s <= d.ts - start < (k + 1) * rtt_s]
        sizes = bursts(times)
        ends = [times[sum(sizes[:i + 1]) - 1] for i in range(len(sizes))]
        starts = [times[sum(sizes[:i])] for i in range(len(sizes))]
        gaps = sorted(b - a for a, b in zip(ends, starts[1:]))
        out.append({"round": k + 1, "datagrams": len(times),
                    "bytes": sum(d.length for d in server_out if k * rtt_s <= d.ts - start < (k + 1) * rtt_s),
                    "span_ms": round((times[-1] - times[0]) * 1e3, 3) if times else 0.0,
                    "bursts": len(sizes), "largest_burst": max(sizes, default=0),
                    "median_gap_ms": round(gaps[len(gaps) // 2] * 1e3, 3) if gaps else None})
    return out


def rounds_paced(rounds: list[dict], rtt_s: float) -> bool:
    """Did the sender pace the rounds after its first (first_rounds())? A paced sender
    (RFC 9002 7.7) spreads each window over most of an RTT in small bursts; one that is
    not sends it as acknowledgements arrive, or in a few bursts. Lenient on both: each round
    spread over at least a quarter of the RTT, its largest burst at most a quarter of it."""
    later = rounds[1:]
    return bool(later) and all(r["span_ms"] >= rtt_s * 1e3 / 4 and 4 * r["largest_burst"] <= r["datagrams"]
                               for r in later)
