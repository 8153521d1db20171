"""Builds a declared path topology into a running Mininet network and takes it down again.

Everything created is named with the instance prefix and recorded in the registry as it
is made, so an exception, Ctrl-C or SIGTERM at any point leaves nothing behind once the
`with` block exits, and `run.py clean` can remove what a killed process left.
"""
from __future__ import annotations

import dataclasses

import logging
import math
import os
import select
import signal
import time
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host
from mininet.nodelib import LinuxBridge

from machine import clock, host, registry
from machine.host import HostMonitor, HostTiming
from machine.capabilities import require_root, switch_kind
from machine.cpuset import own_cpus
from machine.errors import UserError
from links import delay, shapers, traces
from topologies import endhosts
from topologies.endhosts import EndHostDefaults
from links.hostfit import FIXED, EmulatorTuning, delay_flags, rate_flags, tuning_for
from topologies.names import PathNames, TOPOLOGIES
from topologies.path import PathTopo
from links.profiles import LinkProfile
from links.shapers import Queue, Shaper
from machine.shell import check_cmd

log = logging.getLogger("startlab.network")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found]


class Network:
    """One emulated path for one link profile.

    with Network(profile, workdir=...) as net:
        net.host(net.names.client(1)).cmd("ping ...")
    """

    def __init__(self, profile: LinkProfile, workdir: Path, *, pairs: int = 2,
                 delay_backend: str = "auto", offload: bool | None = None, shaper: Shaper | None = None,
                 defaults: EndHostDefaults | None = None,
                 pair_rtts_ms: dict[tuple[int, int], float] | None = None,
                 tuning: EmulatorTuning | None = None, monitor_hog: tuple[int, int] | None = None):
        self.profile = profile
        self.workdir = Path(workdir)
        self.pairs = pairs
        self.delay_preference = delay_backend
        # Packet-exact captures need one MTU per packet on the wire; profiles made for
        # rate ceilings turn segmentation offloads on.
        self.offload = profile.offload if offload is None else offload
        self.shaper = shaper or shapers.default_for([profile])
        self.defaults = defaults or EndHostDefaults()
        # (client i, server j) → that pair's base RTT; applied by the delay line in the core.
        self.pair_rtts_ms = dict(pair_rtts_ms or {})
        self.instance: registry.Instance | None = None
        self.names: PathNames | None = None
        self.net: Mininet | None = None
        self.delays: list[tuple[str, delay.DelayBackend]] = []
        self.switch_name: str | None = None        # 'ovs' or 'linux-bridge' (capabilities.switch_kind)
        self.queues: list[Queue] = []
        self.rate_changes: list[dict] = []          # set_rate() since the network was built, in order
        # Where the path's receive work and the delay line run (links.delay.cpu_plan).
        self.stack_cpus: list[int] = own_cpus()
        self.line_cpu: int | None = None
        self.delay_stats: list[dict] = []
        self.timings: dict[str, float] = {}
        # The emulator's timing parameters: from this host's calibration unless given
        # (hostfit.FIXED: the old constants, for before/after comparisons).
        self.tuning = tuning
        # The host monitor runs while the network exists; `monitor_hog` makes the host
        # unfit on purpose (tests of the flagged outcome).
        self.monitor_hog = monitor_hog
        self.monitor: HostMonitor | None = None
        self.monitor_start: dict | None = None
        self.host_timing: HostTiming | None = None

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "Network":
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def build(self) -> None:
        require_root()
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Fail before building anything if no delay element can be had.
        preference = self.delay_preference
        if self.pair_rtts_ms:
            if preference not in ("auto", "delayline"):
                raise UserError("per-pair RTTs are applied by the delay line, not by " + preference)
            preference = "delayline"
        if self.shaper.delay_backend:
            if preference not in ("auto", self.shaper.delay_backend):
                raise UserError(f"the {self.shaper.name} shaper lives in the {self.shaper.delay_backend} delay "
                                f"element, not {preference}")
            preference = self.shaper.delay_backend
        backends = [delay.choose_backend(preference) for _ in range(TOPOLOGIES[self.profile.topology] - 1)]
        # The delay line places itself by the same plan (links.delay.DelayLine's defaults).
        self.stack_cpus, self.line_cpu = delay.cpu_plan(own_cpus(), any(isinstance(e, delay.DelayLine)
                                                                         for e in backends))
        if self.tuning is None:
            # The virtual clock's timers are exact: nothing to calibrate, the profile's own bucket.
            self.tuning = FIXED if clock.is_virtual() else tuning_for(host.current())
        for element in backends:
            element.tuning_flags = self.tuning.delayline_flags()
        self.instance = registry.new_instance()
        if not clock.is_virtual():     # on the virtual clock the guest's CPU is measured per run
            self.monitor = HostMonitor(self.workdir, self.instance, hog=self.monitor_hog).start()
            self.monitor_start = self.monitor.snapshot()
        self.names = PathNames(self.instance.prefix, TOPOLOGIES[self.profile.topology], self.pairs)
        for side in ("client", "server"):             # root-namespace objects, by name
            self.instance.add_bridge(self.names.switch(side))
        setLogLevel("error")
        self.switch_name, switch_cls = switch_kind()
        switch_cls = switch_cls or LinuxBridge
        self.net = Mininet(topo=PathTopo(names=self.names), switch=switch_cls, host=Host,
                           link=Link, controller=None, build=False, autoSetMacs=False,
                           waitConnected=False)
        self.net.build()
        for node in self.net.hosts:
            self.instance.add_process(node.pid, f"shell {node.name}")
        for sw in self.net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    self.instance.add_link(intf.name)
        self.net.start()
        self._configure_interfaces()
        self._configure_routers()
        self._configure_end_hosts()
        self._configure_neighbours()
        self._configure_bottlenecks()
        self._configure_delays(backends)
        self.timings["setup_s"] = time.monotonic() - t0

    def teardown(self) -> None:
        t0 = time.monotonic()
        for name, element in self.delays:
            try:
                lifetime = time.monotonic() - self.timings.get("delay_started", time.monotonic())
                self.delay_stats.append({"core": name, "lifetime_s": round(lifetime, 3), **element.stop()})
            except Exception as exc:  # keep tearing down; report what failed
                log.warning("stopping the delay element on %s failed: %s", name, exc)
        self.delays = []
        if self.monitor is not None:
            try:
                self.host_timing = self.monitor.stop()
            except Exception as exc:
                log.warning("stopping the host monitor failed: %s", exc)
            self.monitor = None
        if self.net is not None:
            self.settle_shells()
            self.close_sockets()
            try:
                self.net.stop()
            except Exception as exc:
                log.warning("Mininet stop failed: %r", exc)
            self.net = None
        if self.instance is not None:
            self.instance.remove_all()
            self.instance = None
        self.timings["teardown_s"] = time.monotonic() - t0

    def settle_shells(self, timeout_s: float = 2.0) -> None:
        """Bring every node's shell back to its prompt. A signal that ends the run (Ctrl-C, or
        SIGTERM from a scheduler cancelling the task) can arrive while a command runs in a
        node; the node then still waits for that command's end and refuses the next one, so
        nothing more could run there and Mininet's stop would fail half-way (its shells, which
        as interactive shells ignore SIGTERM, would then each wait out the registry's grace).
        ^C ends the command as at a terminal, unless it ignores SIGINT, as everything started
        from a shell's background job does; then the shell's children are killed (at this point
        of the teardown nothing of the run is read from them any more)."""
        for node in [*self.net.controllers, *self.net.switches, *self.net.hosts]:
            if not node.waiting or node.shell is None or node.shell.poll() is not None:
                continue
            try:
                node.sendInt()
                if not self._prompt(node, timeout_s):
                    # A node's shell has no job control (no controlling terminal): what it runs
                    # are its children, the command among them.
                    for child in _children(node.shell.pid):
                        os.kill(child, signal.SIGKILL)
                    self._prompt(node, timeout_s)
            except OSError as exc:
                log.warning("ending the command in %s failed: %r", node.name, exc)
            if node.waiting:
                log.warning("the shell of %s did not come back to its prompt", node.name)
                node.waiting = False     # Mininet's stop ends the shell whatever it still runs

    @staticmethod
    def _prompt(node, timeout_s: float) -> bool:
        """Read the node's output until its shell prompts again (Mininet's prompt is the
        sentinel \\x7f); False if not within timeout_s. Read here, not by Mininet's monitor,
        which blocked in its read on a node whose command had ignored ^C."""
        fd, deadline = node.stdout.fileno(), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0] and b"\x7f" in os.read(fd, 4096):
                node.readbuf, node.waiting = "", False
                return True
        return False

    def close_sockets(self) -> None:
        """Destroy every TCP socket of the end hosts (ss -K, CONFIG_INET_DIAG_DESTROY).

        A connection the workload left (an orphan still retransmitting at cwnd 1 or sending
        its FIN) would otherwise outlive its run: the next run on this network would carry
        its packets over the bottleneck and see its socket, with the earlier run's scheme
        (measured: 273 of a Reno server's connections held an earlier run's Quick-Start CC
        for the first 17 s of a run); and it holds a scheme's congestion control (its
        struct_ops) for minutes."""
        for node in self.net.hosts:
            if node.shell is None or node.shell.poll() is not None:
                continue    # its shell was killed (a task cancelled whole): no command runs there, the namespace goes with its last process
            try:
                node.cmd("ss -K -t -a >/dev/null 2>&1")
            except Exception as exc:
                log.warning("closing the sockets of %s failed: %r", node.name, exc)

    # -- access ------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return self.net.get(name)

    @staticmethod
    def check(node, command: str) -> str:
        """Run a configuration command in a node; an error if it fails."""
        return check_cmd(node, command)

    def gateway_of(self, node_name: str) -> str:
        return self.names.gateway(self.names.side_of(node_name))

    def queue(self, direction: str) -> Queue:
        """The bottleneck queue of `direction` nearest the side that sends it: 'down' next to
        the servers (the one the competing flows share), 'up' next to the clients."""
        hop = self.names.routers - 1 if direction == "down" else 1
        return next(q for q in self.queues if q.direction == direction and q.hop == hop)

    def trace_clock(self, direction: str):
        """The trace that drains `direction`'s bottleneck, against the host's clock (None on
        a fixed-rate link): what the link offers between two moments."""
        q = self.queue(direction)
        if not q.settings.get("trace"):
            return None
        stats = self.shaper.queue_stats(self, q)
        return traces.TraceClock(traces.read(Path(q.settings["trace"])), stats["trace_epoch_mono_ns"] / 1e9,
                                 int(q.settings["opportunity_bytes"]))

    def capture_points(self) -> dict[str, tuple[str, str]]:
        """(node, interface) of the standard capture points: the clients' uplink (what the
        clients receive, as the paper measured fairness) and both sides of the downstream
        bottleneck queue (what arrived at it, what it let through)."""
        down = self.queue("down")
        first = self.names.router(1)
        return {"client": (first, self.names.facing(first, "client")),
                "bneck-in": down.before, "bneck-out": down.after}

    def upstream_capture_points(self) -> dict[str, tuple[str, str]]:
        """(node, interface) of the capture points for traffic the clients send: the
        servers' downlink (what the servers receive) and both sides of the upstream
        bottleneck queue — the mirror image of capture_points, for two-way workloads."""
        up = self.queue("up")
        last = self.names.router(self.names.routers)
        return {"server": (last, self.names.facing(last, "server")), "bneck-up-in": up.before,
                "bneck-up-out": up.after}

    def applied(self) -> dict:
        """The link parameters actually applied, for meta.json."""
        return {
            "profile": self.profile.as_dict(),
            "topology": self.profile.topology,
            "prefix": self.names.prefix if self.names else None,
            "shaper": self.shaper.describe(),
            "queues": [q.as_dict() for q in self.queues],
            "delay_backend": self.delay_backend_name,
            "switch": self.switch_name,
            "one_way_delay_s_per_core": self.profile.one_way_delay_s(self.names.routers - 1),
            "offload": self.offload,
            "end_hosts": self.defaults.as_dict(),
            "pair_rtts_ms": {f"cl{i}-sv{j}": rtt for (i, j), rtt in sorted(self.pair_rtts_ms.items())},
            "emulator_tuning": self.tuning.as_record() if self.tuning else None,
            "cpus": {"receive_work": self.stack_cpus, "delay_line": self.line_cpu},
        }

    def host_flags(self, what: str = "all", tail: bool = False) -> list[str]:
        """Why this network's timing cannot be trusted (after teardown: the monitor's whole
        window and the delay elements' final counters); empty when the host was fit.
        `what`: 'delay' (release times, RTTs), 'rate' (tbf's rates) or 'all'; `tail`: for a
        figure one late wake-up decides (links.hostfit.delay_flags)."""
        flags = []
        if what in ("delay", "all"):
            flags += delay_flags(self.host_timing, self.delay_stats, tail)
        if what in ("rate", "all"):
            flags += rate_flags(self.host_timing, self.tbf_settings())
        return flags

    def tbf_settings(self) -> list[dict]:
        """The token-bucket queues as applied (rate, bucket, frame size) for the host flags:
        every shaper that records a bucket (`burst_bytes`) loses rate to late wake-ups alike."""
        return [{**q.settings, "frame_bytes": self.profile.frame_bytes} for q in self.queues
                if "burst_bytes" in q.settings]

    @property
    def delay_backend_name(self) -> str | None:
        return self.delays[0][1].name if self.delays else None

    def _pair_delays(self, hops: int) -> dict:
        """The delay line's per-pair tables: each pair's RTT split over both directions and
        over the core hops, like the profile's own."""
        if not self.pair_rtts_ms:
            return {}
        n = self.names
        ab, ba = {}, {}
        for (i, j), rtt_ms in self.pair_rtts_ms.items():
            if not (1 <= i <= n.pairs and 1 <= j <= n.pairs):
                raise UserError(f"a per-pair RTT names client {i} / server {j}, but the network has {n.pairs} pairs")
            one_way = rtt_ms / 1000 / 2 / hops
            ab[(n.client_ip(i), n.server_ip(j))] = one_way
            ba[(n.server_ip(j), n.client_ip(i))] = one_way
        return {"pair_delays_ab": ab, "pair_delays_ba": ba}

    def _delay_traces(self, hop: int) -> dict:
        """The profile's delay traces, on the first core hop only (a path's handovers add
        their steps once, however many hops carry its fixed delay)."""
        if hop != 1 or not self.profile.has_delay_trace:
            return {}
        return {"delay_trace_ab": self.profile.delay_trace_path("up"),
                "delay_trace_ba": self.profile.delay_trace_path("down")}

    def extra_delay_ms(self, direction: str, at_s: float) -> float:
        """The delay trace's extra one-way delay of `direction` ('up'/'down') at monotonic
        `at_s` (0 without one): the profile's path at that moment is rtt_ms plus both."""
        if not self.profile.has_delay_trace or not self.delays:
            return 0.0
        return self.delays[0][1].extra_delay_ms(delay.LINE_DIRECTION[direction], at_s)

    def rtt_at_ms(self, at_s: float) -> float:
        """The path's base RTT at monotonic `at_s`: the profile's plus the delay traces' steps."""
        return self.profile.rtt_ms + self.extra_delay_ms("up", at_s) + self.extra_delay_ms("down", at_s)

    def next_delay_step_s(self, at_s: float) -> float:
        """Seconds from monotonic `at_s` to the delay traces' next step (inf without them)."""
        if not self.profile.has_delay_trace or not self.delays:
            return math.inf
        line = self.delays[0][1]
        return min(t.next_step_s(at_s - line.delay_trace_epoch) for t in line.delay_traces.values())

    def delay_steps(self, t0_s: float, t1_s: float) -> list[dict]:
        """The delay traces' extra delays from monotonic t0_s and at every step up to t1_s:
        what a run on this path got, for its meta.json ([] without delay traces)."""
        if not self.profile.has_delay_trace or not self.delays:
            return []
        out, t = [], t0_s
        while t <= t1_s:
            out.append({"at_monotonic_s": round(t, 6), "down_ms": self.extra_delay_ms("down", t),
                        "up_ms": self.extra_delay_ms("up", t), "rtt_ms": round(self.rtt_at_ms(t), 3)})
            t += self.next_delay_step_s(t) + 1e-6
        return out

    def lone_frame_queue_ms(self, frame_bytes: int) -> float:
        """How long a lone frame and its answer (a ping) spend in this path's bottleneck
        queues: every queue of both directions, as its shaper says (Shaper.lone_frame_delay_s)."""
        return sum(self.shaper.lone_frame_delay_s(q, frame_bytes) for q in self.queues) * 1000

    def set_rate(self, direction: str, rate_bps: float, buffer_pkts: int | None = None) -> None:
        """Change the bottleneck rate of `direction` now (a path that changed between two
        connections), recorded in applied()'s `rate_changes`. The buffer is kept unless
        `buffer_pkts` gives the new path's (a move to another access network changes both);
        the burst is sized for the new rate as for a path built at it (a burst sized for the
        old rate would let that many frames through at line rate after an idle spell)."""
        if rate_bps <= 0:
            raise UserError(f"a rate of {rate_bps:g} bit/s: it must be above 0")
        if buffer_pkts is not None and buffer_pkts < 1:
            raise UserError(f"a buffer of {buffer_pkts} packets: it must be at least 1")
        changed = dataclasses.replace(self.profile, **{f"{direction}_mbps": rate_bps / 1e6})
        burst = (self.tuning.tbf_burst_bytes(changed, direction) if self.tuning
                 else changed.tbf_burst_bytes(direction))
        buffer = self.buffer_packets(direction) if buffer_pkts is None else buffer_pkts
        for q in self.queues:
            if q.direction == direction:
                self.shaper.set_rate(self, q, rate_bps, burst, buffer)
        self.rate_changes.append({"direction": direction, "rate_bps": rate_bps, "burst_bytes": burst,
                                  "buffer_packets": buffer, "at_unix_s": time.time()})

    def _now(self, direction: str, field: str):
        """`field` of the bottleneck in `direction` now: the last set_rate's, else the
        profile's (LinkProfile has a method of the same name)."""
        changed = [c[field] for c in self.rate_changes if c["direction"] == direction]
        return changed[-1] if changed else getattr(self.profile, field)(direction)

    def rate_bps(self, direction: str) -> float:
        """The bottleneck's rate in `direction` now."""
        return self._now(direction, "rate_bps")

    def buffer_packets(self, direction: str) -> int:
        """The bottleneck's buffer in `direction` now (full-size frames)."""
        return self._now(direction, "buffer_packets")

    def restore_rates(self) -> None:
        """Back to the profile's rate and buffer in every direction a run changed: the network
        outlives the run, and the next run on it must get the path its profile declares."""
        for direction in dict.fromkeys(c["direction"] for c in self.rate_changes):
            rate, buffer = self.profile.rate_bps(direction), self.profile.buffer_packets(direction)
            if self.rate_bps(direction) != rate or self.buffer_packets(direction) != buffer:
                self.set_rate(direction, rate, buffer)
                self.rate_changes[-1]["restored"] = True

    def queue_counters(self, direction: str) -> dict[str, dict[str, int]]:
        """Sent bytes/packets and drops of each queue of `direction` so far (interface → counters)."""
        return {q.intf: self.shaper.counters(self, q) for q in self.queues if q.direction == direction}

    def queue_drops(self) -> dict[str, int]:
        """Drops counted by each queue so far (interface → packets)."""
        return {q.intf: self.shaper.counters(self, q)["dropped"] for q in self.queues}

    def delay_element(self, core: str) -> delay.DelayBackend:
        return dict(self.delays)[core]

    def delay_snapshot(self) -> list[dict]:
        """Cumulative counters of every delay element so far (see DelayBackend.snapshot)."""
        return [{"core": name, **element.snapshot()} for name, element in self.delays
                if hasattr(element, "snapshot")]

    # -- configuration steps ----------------------------------------------------------
    def _configure_interfaces(self) -> None:
        off = "on" if self.offload else "off"
        for node in self.net.hosts:
            check_cmd(node, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in node.intfList():
                if intf.name == "lo":
                    continue
                check_cmd(node, f"ip addr flush dev {intf.name}")
                # UDP segmentation too: a QUIC endpoint's GSO batch (up to 10 datagrams in one
                # skb) is cut into datagrams in its own stack, so the wire, the queue and the
                # captures see one datagram per packet.
                check_cmd(node, f"ethtool -K {intf.name} tso {off} gso {off} gro {off} "
                                f"tx-udp-segmentation {off} >/dev/null")
                check_cmd(node, f"ip link set {intf.name} up mtu {self.profile.mtu}")
                delay.set_single_cpu_rps(node, intf.name, self._rps_cpu(intf.name))
        for sw in self.net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    check_cmd(sw, f"ethtool -K {intf.name} tso {off} gso {off} gro {off} >/dev/null")
                    delay.set_single_cpu_rps(sw, intf.name, self._rps_cpu(intf.name))

    def _rps_cpu(self, intf: str) -> int:
        """The one CPU that handles frames arriving on `intf`.

        veth delivers a frame to the backlog of the sending CPU unless RPS steers it, so
        frames of one flow sent from different CPUs can overtake each other. One fixed CPU
        per interface keeps order; putting the client half of the path (clients, their
        switch, r1, the core's client-side port) on CPU 0 and the server half on CPU 1
        shares the per-packet work of high rates between two cores. The CPUs are those this
        process may use, so a lane's packets are handled on the lane's own CPUs.
        """
        cpus = self.stack_cpus          # a lane's CPUs in lanes, less the delay line's own
        n = self.names
        client_side = (n.client(""), n.switch("client") + "-", n.router(1) + "-", n.core_intf(1, "client"))
        return cpus[0] if intf.startswith(client_side) else cpus[-1]

    def _configure_routers(self) -> None:
        n = self.names
        for k in range(1, n.routers + 1):
            r = self.host(n.router(k))
            check_cmd(r, "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0")
            west = f"{n.gateway('client')}/24" if k == 1 else f"{n.segment_ip(k - 1, 2)}/24"
            east = f"{n.gateway('server')}/24" if k == n.routers else f"{n.segment_ip(k, 1)}/24"
            check_cmd(r, f"ip addr add {west} dev {n.facing(n.router(k), 'client')}")
            check_cmd(r, f"ip addr add {east} dev {n.facing(n.router(k), 'server')}")
            if k > 1:
                check_cmd(r, f"ip route add {n.subnet('client')} via {n.segment_ip(k - 1, 1)}")
            if k < n.routers:
                check_cmd(r, f"ip route add {n.subnet('server')} via {n.segment_ip(k, 2)}")

    def _configure_end_hosts(self) -> None:
        """Addresses, then the declared defaults on every end host: nothing inherited."""
        n = self.names
        for i in range(1, n.pairs + 1):
            check_cmd(self.host(n.client(i)), f"ip addr add {n.client_ip(i)}/24 dev {n.host_intf(n.client(i))}")
            check_cmd(self.host(n.server(i)), f"ip addr add {n.server_ip(i)}/24 dev {n.host_intf(n.server(i))}")
        for name in n.clients() + n.servers():
            endhosts.apply(self.host(name), self.defaults, self.gateway_of(name), self.instance)

    def _configure_neighbours(self) -> None:
        """Static ARP entries: no ARP exchange delays the first packet of a run."""
        addresses = []                                # (node, intf, ip, mac), read once
        for node in self.net.hosts:
            for intf in node.intfList():
                if intf.name == "lo":
                    continue
                words = check_cmd(node, f"ip -4 -o addr show dev {intf.name}").split()
                if "inet" in words:
                    addresses.append((node, intf.name, words[words.index("inet") + 1].split("/")[0], intf.MAC()))
        for node, intf, ip, _ in addresses:
            subnet = ip.rsplit(".", 1)[0]
            for peer, _, peer_ip, peer_mac in addresses:
                if peer is not node and peer_ip.rsplit(".", 1)[0] == subnet:
                    check_cmd(node, f"ip neigh replace {peer_ip} lladdr {peer_mac} dev {intf} nud permanent")

    def _configure_bottlenecks(self) -> None:
        refusal = shapers.refusal(self.shaper, self.profile)
        if refusal:
            raise UserError(refusal)
        for k in range(1, self.names.routers):
            for direction in ("up", "down"):
                self.queues.append(self.shaper.install(self, self.names, self.profile, k, direction))

    def _configure_delays(self, backends: list[delay.DelayBackend]) -> None:
        n = self.names
        one_way = self.profile.one_way_delay_s(n.routers - 1)
        for k, element in zip(range(1, n.routers), backends):
            core = self.host(n.core(k))
            element.start(core, n.core_intf(k, "client"), n.core_intf(k, "server"),
                          one_way, one_way, self.profile.rate_bps("up"), self.profile.rate_bps("down"),
                          self.workdir / f"delay-{n.core(k)}", self.instance, **self.shaper.delay_options(k),
                          **self._pair_delays(n.routers - 1), **self._delay_traces(k))
            self.delays.append((n.core(k), element))
        self.timings["delay_started"] = time.monotonic()
