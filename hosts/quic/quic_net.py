"""A server — middle — client path of plain network namespaces for checking the QUIC
endpoints on their own (first-flight timing, goodput, CPU), without Mininet.

```
stlq<tag>s [s0] ── veth ── [m0] stlq<tag>m [m1] ── veth ── [c0] stlq<tag>c
 10.78.0.1            bridge or delay line,             10.78.0.2
                      tbf on m1 (toward the client)
```

The middle namespace forwards at L2: a Linux bridge, or startlab's delay line when the
path has a delay (this kernel has no netem). The bottleneck is a tbf on the middle's
egress toward the client, never on an end host, so neither TCP nor QUIC is
back-pressured by its own qdisc. Namespaces and links are named `stlq<tag>…`; everything
is removed on exit, and only the processes started here are signalled, by PID.

Also: a reader for classic pcap files of Ethernet/IPv4/UDP (what the checks need from
tcpdump) and the first-flight summary of a server's response.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from links.delay import cpu_plan, summarize
from links.hostfit import delay_flags, rate_flags, tuning_for
from machine import host
from machine.cpuset import own_cpus
from machine.host import DELAYLINE_RT_PRIORITY, HostMonitor
from wire import pcap

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "target" / "release"
SERVER_BIN = RELEASE / "startlab-quic-server"
CLIENT_BIN = RELEASE / "startlab-quic-client"
DELAYLINE_BIN = RELEASE / "startlab-delayline"
SERVER_IP, CLIENT_IP = "10.78.0.1", "10.78.0.2"
FRAME = 1514                 # Ethernet frame of a 1500-byte IP packet


def run(argv: list[str], check: bool = True) -> str:
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


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
    tag: str = "0"
    rate_bps: float | None = None        # bottleneck toward the client (None: no tbf)
    rtt_ms: float = 0.0                  # added by the delay line (0: a bridge)
    limit_bytes: int | None = None       # tbf queue (default: 208 frames or 10 ms, more)
    offloads: bool = False               # tso/gso/gro and UDP segmentation on the veths
    workdir: Path | None = None          # logs and captures (default: a temporary directory
                                         # removed with the path)


class QuicNet:
    """Build with `with QuicNet(PathSpec(...)) as net:`; torn down on exit."""

    def __init__(self, spec: PathSpec) -> None:
        self.spec = spec
        t = f"stlq{spec.tag}"
        self.ns_server, self.ns_mid, self.ns_client = f"{t}s", f"{t}m", f"{t}c"
        self.if_s0, self.if_m0, self.if_m1, self.if_c0 = f"{t}s0", f"{t}m0", f"{t}m1", f"{t}c0"
        self.procs: list[subprocess.Popen] = []
        self.delayline: subprocess.Popen | None = None
        self.stack_cpus, self.line_cpu = cpu_plan(own_cpus(), True)
        self.own_workdir = spec.workdir is None
        self.workdir = spec.workdir or Path(tempfile.mkdtemp(prefix=f"{t}-"))
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

    def ns(self, name: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", name, *argv]

    def up(self) -> None:
        self.down()                       # a previous run's leftovers of the same tag
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.monitor = HostMonitor(self.workdir / "host-monitor").start()
        for n in (self.ns_server, self.ns_mid, self.ns_client):
            run(["ip", "netns", "add", n])
            run(self.ns(n, "ip", "link", "set", "lo", "up"))
            run(self.ns(n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"))
        run(["ip", "link", "add", self.if_s0, "netns", self.ns_server, "type", "veth",
             "peer", "name", self.if_m0, "netns", self.ns_mid])
        run(["ip", "link", "add", self.if_c0, "netns", self.ns_client, "type", "veth",
             "peer", "name", self.if_m1, "netns", self.ns_mid])
        off = "on" if self.spec.offloads else "off"
        for n, i in ((self.ns_server, self.if_s0), (self.ns_mid, self.if_m0),
                     (self.ns_mid, self.if_m1), (self.ns_client, self.if_c0)):
            run(self.ns(n, "ethtool", "-K", i, "tso", off, "gso", off, "gro", off,
                        "tx-udp-segmentation", off), check=False)
            # One receive CPU per veth: frames sent from two CPUs could otherwise overtake
            # each other in veth's per-CPU backlogs.
            run(self.ns(n, "sh", "-c", f"for q in /sys/class/net/{i}/queues/rx-*; do "
                                       f"echo {1 << self.stack_cpus[0]:x} > $q/rps_cpus; done"))
            run(self.ns(n, "ip", "link", "set", i, "up"))
        run(self.ns(self.ns_server, "ip", "addr", "add", f"{SERVER_IP}/24", "dev", self.if_s0))
        run(self.ns(self.ns_client, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", self.if_c0))
        mac_s = self.mac(self.ns_server, self.if_s0)
        mac_c = self.mac(self.ns_client, self.if_c0)
        # Static neighbours: no ARP exchange through the delay element.
        run(self.ns(self.ns_server, "ip", "neigh", "replace", CLIENT_IP, "lladdr", mac_c,
                    "dev", self.if_s0, "nud", "permanent"))
        run(self.ns(self.ns_client, "ip", "neigh", "replace", SERVER_IP, "lladdr", mac_s,
                    "dev", self.if_c0, "nud", "permanent"))
        if self.spec.rtt_ms > 0:
            self.start_delayline()
        else:
            run(self.ns(self.ns_mid, "ip", "link", "add", "br0", "type", "bridge"))
            for i in (self.if_m0, self.if_m1):
                run(self.ns(self.ns_mid, "ip", "link", "set", i, "master", "br0"))
            run(self.ns(self.ns_mid, "ip", "link", "set", "br0", "up"))
        if self.spec.rate_bps:
            rate = self.spec.rate_bps
            limit = self.spec.limit_bytes or max(208 * FRAME, int(rate * 0.010 / 8))
            run(self.ns(self.ns_mid, "tc", "qdisc", "replace", "dev", self.if_m1, "root", "tbf",
                        "rate", f"{int(rate)}bit", "burst", str(tbf_burst_bytes(rate, self.spec.offloads)),
                        "limit", str(limit)))

    def mac(self, ns: str, intf: str) -> str:
        return json.loads(run(self.ns(ns, "ip", "-j", "link", "show", "dev", intf)))[0]["address"]

    def start_delayline(self) -> None:
        if not DELAYLINE_BIN.exists():
            raise RuntimeError(f"{DELAYLINE_BIN} is not built (cargo build --release)")
        one_way_us = round(self.spec.rtt_ms * 1e3 / 2)
        ring = max(64 << 20, int(1.5 * (self.spec.rate_bps or 1e9) * self.spec.rtt_ms / 1e3 / 8) * 2)
        # As the dumbbell's line: its own CPU where there are two (links.delay.cpu_plan), the
        # spin window measured for this host, SCHED_RR.
        pin = ["--cpu-a", str(self.line_cpu), "--cpu-b", str(self.line_cpu)] if self.line_cpu is not None else []
        self.delayline = subprocess.Popen(
            self.ns(self.ns_mid, str(DELAYLINE_BIN), "--if-a", self.if_m0, "--if-b", self.if_m1,
                    "--delay-ab-us", str(one_way_us), "--delay-ba-us", str(one_way_us),
                    "--ring-ab-bytes", str(ring), "--ring-ba-bytes", str(ring),
                    "--stats", str(self.workdir / "delayline.json"), *pin,
                    *tuning_for(host.current()).delayline_flags()),
            stdout=subprocess.PIPE, stderr=open(self.workdir / "delayline.err", "w"))
        # No frame before the line says "ready" (its threads running): one read from its
        # sockets' queue later would count as the line's own lateness.
        ready, _, _ = select.select([self.delayline.stdout], [], [], 5.0)
        line = self.delayline.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            raise RuntimeError(f"delay line not ready: {line!r} {(self.workdir / 'delayline.err').read_text()}")
        # Its threads are up: all of them SCHED_RR (links.delay.DelayLine) before any frame,
        # the readiness ping's included (a frame handled at normal priority waits its turn).
        subprocess.run(["chrt", "-a", "-r", "-p", str(DELAYLINE_RT_PRIORITY), str(self.delayline.pid)],
                       check=True, capture_output=True)
        # Forwarding starts once both packet sockets are bound; a ping through it proves it.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.delayline.poll() is not None:
                raise RuntimeError(f"delay line exited: {(self.workdir / 'delayline.err').read_text()}")
            if subprocess.run(self.ns(self.ns_server, "ping", "-c1", "-W1", CLIENT_IP),
                              capture_output=True).returncode == 0:
                return
        raise RuntimeError("no ping through the delay line within 5 s")

    # -- processes -----------------------------------------------------------------------

    def popen(self, ns: str, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(self.ns(ns, *argv), **kw)
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
        p = self.popen(self.ns_server, [str(SERVER_BIN), "--listen", f"{SERVER_IP}:4433",
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
        p = self.popen(self.ns_client, [str(CLIENT_BIN), "--server", f"{SERVER_IP}:4433",
                                        "--size", size, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"client failed ({p.returncode}): {err.strip()} {out.strip()}")
        return json.loads(out)

    def start_capture(self, ns: str, intf: str, path: Path, snap: int = 128) -> subprocess.Popen:
        err = path.with_suffix(".err")
        p = self.popen(ns, ["tcpdump", "-i", intf, "-s", str(snap), "-n", "-U", "-w", str(path),
                            "--time-stamp-precision", "nano", "udp"],
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
        if self.delayline is not None:
            self.stop(self.delayline)
            if self.delayline.stdout is not None:
                self.delayline.stdout.close()
            self.delayline = None
            raw = self.delayline_stats()
            if raw is not None:
                delay_stats.append(summarize(raw, None))
        if self.monitor is not None:
            timing = self.monitor.stop()
            self.monitor = None
            tbf = ([{"direction": "down", "rate_bps": self.spec.rate_bps, "frame_bytes": FRAME,
                     "burst_bytes": tbf_burst_bytes(self.spec.rate_bps, self.spec.offloads)}]
                   if self.spec.rate_bps else [])
            self.host_flags = {"delay": delay_flags(timing, delay_stats), "rate": rate_flags(timing, tbf)}
        for n in (self.ns_server, self.ns_mid, self.ns_client):
            if Path(f"/run/netns/{n}").exists():
                run(["ip", "netns", "del", n], check=False)

    def remove_workdir(self) -> None:
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def delayline_stats(self) -> dict | None:
        """The delay line's final counters (written when it stops)."""
        p = self.workdir / "delayline.json"
        return json.loads(p.read_text()) if p.exists() else None


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


def first_flight(datagrams: list[Datagram], server: str, full_size: int, rtt_s: float) -> dict:
    """The server's first flight of response data, as seen at its interface.

    It starts with the first full-size 1-RTT datagram of the server and ends before the
    first datagram the client sends at least 0.9 × `rtt_s` (the handshake RTT) later: no
    acknowledgement of data can come earlier, while the client may still acknowledge
    handshake-time packets (after its 25 ms ack delay) within the flight. Times are
    relative to the first datagram of the flight.
    """
    server_out = [d for d in datagrams if d.src == server]
    start = next((d.ts for d in server_out if not d.long_header and d.length >= full_size), None)
    if start is None:
        raise ValueError("no full-size response datagram in the capture")
    acks = [d.ts for d in datagrams if d.src != server and d.ts >= start + 0.9 * rtt_s]
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
