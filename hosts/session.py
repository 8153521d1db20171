"""A run session: everything one run needs around its workload, torn down whatever happens.

    with RunSession(net, variant, workdir, scratch, lookup) as session:
        result = workload.run(session, params, size_bytes)
    meta.update(session.record())

The session hands the workload its hosts and their install contexts, installs variants on
host roles and removes them again, starts and stops servers, processes and captures,
watches the congestion control each declared flow's sockets run (read from the kernel;
for a QUIC flow, which the kernel cannot see, from its endpoint's own report), reads the
routers' and the queues' counters and the delay element's figures over the run. Teardown
runs on every exit path, in the reverse order of setup; a capture that lost packets fails
the run, because its losses would no longer be exact.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from hosts.capture import drain, not_exact, start_captures
from hosts.implementations.base import InstallContext
from hosts.process import NodeProcess, wait_until
from hosts.quic_endpoints import controller_kind, server_connections
from hosts.variants import Variant
from hosts.workloads.base import WorkloadError
from machine import host
from results.schema import CAPTURE_FILES
from links import delay
from links.hostfit import delay_flags, rate_flags

log = logging.getLogger("startlab.session")
SOCKET_WATCH = Path(__file__).resolve().with_name("socket_watch.py")
SOCKET_WATCH_INTERVAL_S = 0.01


@dataclass
class Flow:
    """A flow the workload declares: who sends to whom on which server port, what its
    sender's variant claims it runs, and (after the run) what the kernel showed."""
    name: str
    sender: str
    receiver: str
    server_port: int
    variant: Optional[str]
    declared_cc: list[str]
    declared_iw: Optional[int]
    size_bytes: Optional[int] = None
    observed_cc: list[str] = field(default_factory=list)
    connections_seen: int = 0
    note: str = ""                       # why a declared figure is not checked, if it is not
    transport: str = "tcp"               # what the sender's variant declares
    observed_by: str = "kernel"          # where observed_cc comes from: 'kernel' (sock_diag), 'endpoint' or 'stack'
    report: str = ""                     # the endpoint's report file (in the run directory), for QUIC
    # Where each connection's first slow start ended, as the kernel showed it (socket_watch's
    # ss_exit: time, cwnd, ssthresh, CA state and retransmissions then; None: never).
    ss_exits: list = field(default_factory=list)
    # The end hosts ask for ECN (the network's ecn "on"): a TCP flow's handshake on the wire
    # must then negotiate it (analysis/flow_checks.py).
    declared_ecn: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


class RunSession:
    """One run's hosts, variants, processes, captures, counters and teardown."""

    def __init__(self, net, variant: Variant, workdir: Path, scratch: Path,
                 lookup: Optional[Callable[[str], Variant]] = None, rep: int = 1):
        self.net = net
        # The run's repetition (1-based), handed by the runner: seeded workloads draw anew
        # per repetition and alike across variants.
        self.rep = int(rep)
        self.variant = variant
        self.workdir = Path(workdir)
        self.scratch = Path(scratch)          # files the applications serve (not results)
        self.lookup = lookup or (lambda name: (_ for _ in ()).throw(KeyError(name)))
        self.timings: dict[str, float] = {}
        self.flows: list[Flow] = []
        self._installed: list[tuple[Variant, dict[str, list]]] = []
        self._on_node: dict[str, tuple[Variant, str]] = {}       # node name → (variant, role)
        self._stoppers: list[tuple[str, Any]] = []              # (what, object with .stop())
        self._captures: list = []
        self._watches: dict[tuple[str, int], NodeProcess] = {}
        self._record: dict[str, Any] = {}
        self._trace_clocks: dict[str, Any] = {}
        self._before_fetch: dict[str, dict] = {}                # node → what its part set
        self._t0 = 0.0

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> "RunSession":
        self._t0 = time.monotonic()
        self._rates_from = len(getattr(self.net, "rate_changes", []))
        self._delay_before = self.net.delay_snapshot()
        self._drops_before = self.net.queue_drops()
        monitor = getattr(self.net, "monitor", None)
        self._host_before = monitor.snapshot() if monitor is not None else None
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        problems = self._teardown()
        if exc_type is None and problems:
            raise WorkloadError("; ".join(problems))
        if problems:
            log.warning("while tearing down after %s: %s", exc_type.__name__, "; ".join(problems))
        return False

    def ready(self) -> None:
        """Call when setup is done and traffic starts: the setup time is recorded."""
        self.timings["setup_s"] = time.monotonic() - self._t0

    # -- hosts ------------------------------------------------------------------------------
    @property
    def profile(self):
        return self.net.profile

    @property
    def names(self):
        return self.net.names

    @property
    def instance(self):
        return self.net.instance

    def host(self, name: str):
        return self.net.host(name)

    def context(self, node) -> InstallContext:
        """What an implementation installed on `node` may know about the path."""
        n, prof = self.names, self.profile
        gateway = peer = None
        if node.name in n.clients() + n.servers():
            side = n.side_of(node.name)
            gateway, peer = n.gateway(side), n.subnet("server" if side == "client" else "client")
        return InstallContext(gateway=gateway, peer_net=peer, rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s,
                              profile=prof.name, access=prof.access, mtu=prof.mtu, instance=self.instance,
                              defaults=self.net.defaults, trace_clock=self.trace_clock("down"))

    def trace_clock(self, direction: str):
        """`direction`'s bottleneck trace against the host's clock (None at a fixed rate);
        read from the running link once."""
        if direction not in self._trace_clocks:
            self._trace_clocks[direction] = self.net.trace_clock(direction)
        return self._trace_clocks[direction]

    # -- variants -------------------------------------------------------------------------
    def install(self, variant: Variant | str, *, server=(), client=(), router=()) -> Variant:
        """Install `variant` (an object or a name the scenario knows) on these nodes."""
        if isinstance(variant, str):
            variant = self.lookup(variant)
        roles = {"server": list(server), "client": list(client), "router": list(router)}
        for role, nodes in roles.items():
            for node in nodes:
                if node.name in self._on_node and role != "router":
                    raise WorkloadError(f"{node.name} already has variant {self._on_node[node.name][0].name}")
        contexts = {node.name: self.context(node) for nodes in roles.values() for node in nodes}
        variant.install(roles, contexts)
        self._installed.append((variant, roles))
        for role, nodes in roles.items():
            for node in nodes:
                self._on_node.setdefault(node.name, (variant, role))
        return variant

    def before_fetch(self) -> None:
        """Call just before the flow under test starts: parts that take something from the
        moment (a hint of what a trace link offers next) set it now; recorded per node."""
        for variant, roles in self._installed:
            contexts = {node.name: self.context(node) for nodes in roles.values() for node in nodes}
            for node, what in variant.before_fetch(roles, contexts).items():
                self._before_fetch[node] = what

    def install_under_test(self, *, server=(), client=()) -> Variant:
        """The run's variant on these end hosts and on every router of the path."""
        routers = [self.host(r) for r in self.names.routers_list()]
        return self.install(self.variant, server=server, client=client, router=routers)

    # -- processes and captures ---------------------------------------------------------
    def adopt(self, what: str, thing):
        """Stop `thing` (anything with .stop()) at teardown; returns it."""
        self._stoppers.append((what, thing))
        return thing

    def spawn(self, node, argv: list[str], what: str, log_name: str) -> NodeProcess:
        """Start a program in `node`, logging to workdir/log_name, stopped at teardown."""
        return self.adopt(what, NodeProcess(node, argv, self.instance, what, log_path=self.workdir / log_name))

    def capture_standard(self, bpf_filter: str = "tcp") -> None:
        """tcpdump at the standard capture points (Network.capture_points); `bpf_filter`
        "tcp or udp" for QUIC flows."""
        points = self.net.capture_points()
        self.capture([(self.host(points[k][0]), points[k][1], self.workdir / f)
                      for k, f in CAPTURE_FILES.items()], bpf_filter)

    def capture(self, specs: list[tuple], bpf_filter: str = "tcp") -> None:
        """Start [(node, interface, path)] captures and wait until each listens."""
        self._captures += start_captures(specs, self.instance, bpf_filter)

    # -- flows -----------------------------------------------------------------------------
    def flow(self, name: str, sender, receiver, server_port: int, size_bytes: Optional[int] = None,
             paced_by: str = "", report: Optional[Path] = None) -> Flow:
        """Declare a flow before its traffic starts: what its sender's variant claims it runs
        is recorded, and the sender's sockets on `server_port` are watched from now on.
        `paced_by` names what else limits the flow's sending rate on the wire (e.g. a token
        bucket on its sender): its first flight then says nothing about the initial window,
        which is recorded as not checked, with that reason. A flow whose variant declares a
        QUIC endpoint is observed through that endpoint's `report` (its server's per-connection
        lines, read at teardown) instead of the kernel, which cannot see it."""
        variant, role = self._on_node.get(sender.name, (None, "server"))
        if variant is not None:
            declared = variant.declared(role, self.net.defaults)
        else:
            from hosts.implementations.base import Declared
            declared = Declared(cc=(self.net.defaults.cc,), iw=self.net.defaults.iw)
        flow = Flow(name=name, sender=sender.name, receiver=receiver.name, server_port=server_port,
                    variant=variant.name if variant else None, declared_cc=list(declared.cc),
                    declared_iw=None if paced_by else declared.iw, size_bytes=size_bytes,
                    note=f"initial window not checked: the flow is paced by {paced_by}" if paced_by else "",
                    transport=declared.transport,
                    declared_ecn=declared.transport == "tcp" and self.net.defaults.ecn == "on")
        if declared.transport == "stack":
            # A third-party stack reports no controller per connection: the run records the
            # one its server was started with, and checks its start against its own qlog.
            if report is None:
                raise WorkloadError(f"flow {name}: {sender.name}'s variant {flow.variant} runs a QUIC stack, "
                                    "but the workload runs no stack for it (transport: stack)")
            flow.observed_by, flow.report = "stack", str(report)
            flow.note = "controller as its server was started (the stack reports none); start checked on its qlog"
        elif declared.transport == "quic":
            if report is None:
                raise WorkloadError(f"flow {name}: {sender.name}'s variant {flow.variant} runs a QUIC endpoint, "
                                    "but the workload runs no QUIC application for it")
            flow.observed_by, flow.report = "endpoint", Path(report).name
        elif report is not None:
            raise WorkloadError(f"flow {name}: a QUIC endpoint runs for it, but {sender.name}'s variant "
                                f"{flow.variant} declares the kernel's TCP")
        self.flows.append(flow)
        if flow.transport == "tcp":
            self._watch(sender, server_port)
        return flow

    def endpoint_args(self, node, role: str) -> list[str]:
        """Arguments of the user-space endpoint the variant installed on `node` configures
        for `role`; an error if that variant has none there (its connections are the
        kernel's, and a QUIC application would run undeclared defaults)."""
        variant, _ = self._on_node.get(node.name, (None, role))
        args = variant.endpoint_args(role, self.context(node)) if variant else None
        if args is None:
            raise WorkloadError(f"{node.name}: variant {variant.name if variant else '(none)'} has no QUIC "
                                f"endpoint part for role {role}: use a quic-* variant with transport quic")
        return args

    def _watch(self, node, port: int) -> None:
        if (node.name, port) in self._watches:
            return
        proc = NodeProcess(node, [sys.executable, str(SOCKET_WATCH), str(port), str(SOCKET_WATCH_INTERVAL_S),
                                  str(self.workdir / f"sockets-{node.name}-{port}.json")],
                           self.instance, f"socket watch {port}", log_path=self.workdir / f"sockets-{node.name}-{port}.log")
        self._watches[(node.name, port)] = proc
        if not wait_until(lambda: "watching" in proc.output() or not proc.running(), 10) or not proc.running():
            raise WorkloadError(f"the socket watch in {node.name} did not start: {proc.output()[-300:]}")

    def _observed(self) -> None:
        """Stop the socket watches and note per flow the congestion controls seen."""
        seen: dict[tuple[str, int], dict] = {}
        for (node, port), proc in self._watches.items():
            proc.stop(grace_s=3.0)
            path = self.workdir / f"sockets-{node}-{port}.json"
            try:
                seen[(node, port)] = json.loads(path.read_text())
            except (OSError, ValueError):
                seen[(node, port)] = {"connections": []}
        for flow in self.flows:
            if flow.observed_by == "stack":
                flow.observed_cc, flow.connections_seen = list(flow.declared_cc), 1
                continue
            if flow.observed_by == "endpoint":
                lines = server_connections(self.workdir / flow.report)
                flow.observed_cc = sorted({controller_kind(c) for c in lines})
                flow.connections_seen = len(lines)
                continue
            conns = seen.get((flow.sender, flow.server_port), {}).get("connections", [])
            flow.observed_cc = sorted({cc for c in conns for cc in c.get("cc", [])})
            flow.connections_seen = len(conns)
            flow.ss_exits = [c.get("ss_exit") for c in conns]

    # -- counters ----------------------------------------------------------------------------
    def queue_counters(self, direction: str) -> dict[str, dict[str, int]]:
        return self.net.queue_counters(direction)

    # -- teardown and record -------------------------------------------------------------
    def _teardown(self) -> list[str]:
        t0 = time.monotonic()
        problems: list[str] = []

        def attempt(what: str, action: Callable[[], Any]) -> Any:
            try:
                return action()
            except Exception as exc:           # keep tearing down; report what failed
                problems.append(f"{what}: {exc}")
                return None

        for what, thing in reversed(self._stoppers):
            attempt(f"stopping {what}", thing.stop)
        attempt("draining the captures", lambda: drain(self._captures))
        stats = [attempt("stopping a capture", c.stop) for c in self._captures]
        attempt("reading the socket watch", self._observed)
        if hasattr(self.net, "close_sockets"):
            # Before the schemes go: no connection of this run reaches the next one.
            attempt("closing the run's sockets", self.net.close_sockets)
        if hasattr(self.net, "restore_rates"):
            attempt("restoring the bottleneck's rate", self.net.restore_rates)
        counters: dict[str, dict[str, dict]] = {"router": {}, "server": {}}
        for variant, roles in self._installed:
            contexts = {node.name: self.context(node) for nodes in roles.values() for node in nodes}
            for role, found in counters.items():
                found.update(attempt(f"reading {variant.name}'s {role} counters",
                                     lambda: variant.counters(roles, contexts, role)) or {})
        for variant, roles in reversed(self._installed):
            contexts = {node.name: self.context(node) for nodes in roles.values() for node in nodes}
            attempt(f"removing {variant.name}", lambda: variant.remove(roles, contexts))
        self._installed = []
        delay_after = attempt("reading the delay element", self.net.delay_snapshot) or []
        host_after = (attempt("reading the host monitor", self.net.monitor.snapshot)
                      if self._host_before is not None else None)
        drops_after = attempt("reading the queues", self.net.queue_drops) or {}
        self.timings["stop_s"] = time.monotonic() - t0
        lost = not_exact(stats)
        if lost:
            problems.append(f"tcpdump lost packets, the captures are not exact: {lost}")
        self._record = {
            "captures": [s for s in stats if s],
            "router_counters": counters["router"],
            "server_counters": counters["server"],
            "queue_drops": {k: drops_after[k] - self._drops_before.get(k, 0) for k in drops_after},
            "emulator": [delay.interval_figures(b, a) for b, a in zip(self._delay_before, delay_after)],
            # read together: maps the schemes' event times (BPF's ktime, CLOCK_MONOTONIC)
            # onto the captures' (the wall clock)
            "clock": {"monotonic_s": time.monotonic(), "realtime_s": time.time()},
        }
        monitor = host.interval(self._host_before, host_after) if host_after else None
        by_kind = {"delay": delay_flags(monitor, self._record["emulator"]),
                   "rate": rate_flags(monitor, self.net.tbf_settings())}
        self._record["host_check"] = {"monitor": monitor.brief() if monitor else None,
                                      "flags": by_kind["delay"] + by_kind["rate"], "flags_by_kind": by_kind}
        return problems

    def record(self) -> dict[str, Any]:
        """What the session knows of the run, for meta.json (after the `with` block)."""
        # This run's rate changes (Network.set_rate), the restore at its end included.
        rates = getattr(self.net, "rate_changes", [])[getattr(self, "_rates_from", 0):]
        # A path whose delay steps (a delay trace): the extra delays this run got, and when.
        end = (self._record.get("clock") or {}).get("monotonic_s", time.monotonic())
        steps = self.net.delay_steps(self._t0, end) if hasattr(self.net, "delay_steps") else []
        return {**self._record, "timings": self.timings, "flows": [f.as_dict() for f in self.flows],
                **({"rate_changes": rates} if rates else {}),
                **({"delay_steps": steps} if steps else {}),
                **({"before_fetch": self._before_fetch} if self._before_fetch else {})}
