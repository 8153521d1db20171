"""Competing flows (Blitzstart §2/§4): a long bulk flow fills the bottleneck, then the flow
under test fetches one object over HTTP/1.1 while the long flow keeps running.

The long flow runs its own variant (`long_variant`; by default the papers' CUBIC with
IW10, set explicitly — never whatever the machine's kernel default is), installed on its
server and client like any variant, and both flows' congestion control is verified from
the kernel and their initial windows from the captures in every run.

With `long_load` > 0 the competing traffic is instead an offered load: `long_streams` bulk
TCP flows rate-limited together to long_load × the bottleneck rate by a token bucket on
the long flows' server (the Quick-Start paper's loaded-link experiments, Figs. 4, 5 and
8). The bucket paces the aggregate smoothly — iperf3's own -b catches up in line-rate
bursts, which a router's peak-utilisation estimate rightly reads as a full link — and its
queue back-pressures the senders in their own stack, so the load loses nothing before the
bottleneck. The fetch starts once the flows have run `settle_s`. The bottleneck queue's
counters over the fetch (from its start to the end of the tail) give the link's
utilisation and drop rate in that time, for every run.

On a trace link "filled" and the link's utilisation are against what the trace offered in
the same window (the trace on the host's clock, links/traces.TraceClock), not its mean: an
outage is not an empty link. Just before the fetch, parts that take their hint from the
moment set it (session.before_fetch: Blitzstart's oracle).

Hosts: cl1 ← sv1 is the flow under test (its server, client and the routers get the
variant), cl2 ← sv2 the long flow, as in the paper's four-host setup.

`transport` chooses the applications (hosts/workloads/competing_apps.py): `tcp` (lighttpd,
curl, iperf3; the kernel's TCP as the variants configure it), `quic` (startlab's QUIC
server and client for both flows, configured by QUIC variants: the paper's own setup) or
`stack` (a third-party QUIC stack's own server and client for the flow under test, the
long flow kernel TCP's: hosts/stacks).
Everything else — filling the link, the timing, captures, checks — is one code path.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from config.params import Param
from hosts.apps import make_object
from hosts.variants import Variant
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult
from hosts.workloads.competing_apps import TRANSPORTS, apps_for
from topologies.endhosts import EndHostDefaults
from links.shapers.tbf import TbfSettings
from machine.shell import check_cmd


def tx_bytes(node, intf: str) -> int:
    """Bytes sent by an interface (from the node's own /proc/net/dev)."""
    for line in node.cmd("cat /proc/net/dev").splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == intf:
            return int(counters.split()[8])
    raise WorkloadError(f"interface {intf} not found in {node.name}")


def wait_until_filled(router, intf: str, offered_bps: Callable[[float, float], float], rtt_s: float,
                      p: dict) -> float:
    """Block until the queue's egress has carried ≥ fill_fraction of what the link offered
    over a window (its rate; on a trace link what the trace offered in that window).

    Returns the seconds it took; raises WorkloadError if the long flow never fills the link.
    """
    window = max(0.5, p["fill_window_rtts"] * rtt_s)
    start = time.monotonic()
    time.sleep(p["fill_min_s"])
    samples: list[tuple[float, int]] = []
    while time.monotonic() - start < p["fill_timeout_s"]:
        now = time.monotonic()
        samples.append((now, tx_bytes(router, intf)))
        while len(samples) > 2 and samples[1][0] <= now - window:
            samples.pop(0)
        t0, b0 = samples[0]
        if now - t0 >= window * 0.98:
            rate, offered = (samples[-1][1] - b0) * 8 / (now - t0), offered_bps(t0, now)
            if offered > 0 and rate >= p["fill_fraction"] * offered:
                return now - start
        time.sleep(0.05)
    raise WorkloadError(f"the long flow did not fill the bottleneck ({p['fill_fraction']:.0%} of what it "
                        f"offered for {window:.2f} s) within {p['fill_timeout_s']:g} s")


def offered_rate(session) -> Callable[[float, float], float]:
    """The downstream bottleneck's rate between two moments: its trace's on a trace link,
    else the rate the link has now (a run may have changed it, Network.set_rate)."""
    clock = session.trace_clock("down")
    if clock is not None:
        return clock.rate_bps
    rate = session.net.rate_bps("down")
    return lambda t0, t1: rate


def load_shaper(node, intf: str, prof, load: float) -> TbfSettings:
    """The token bucket limiting a node's egress to `load` × the profile's downstream rate."""
    rate = load * prof.rate_bps("down")
    burst = prof.tbf_burst_bytes("down")
    return TbfSettings(node=node.name, intf=intf, direction="down", rate_bps=rate, burst_bytes=burst,
                       limit_bytes=max(4 * burst, int(rate * prof.rtt_s / 8)), buffer_packets=0)


def queue_counts(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """What the downstream queue did between two readings: packets sent, dropped, dropped
    because its buffer was full (None where the queue does not count them apart: an AQM's
    other drops are its control law's) and marked CE (an AQM with ECN, instead of a drop)."""
    def diff(key: str) -> int:
        return sum(after[i].get(key, 0) - before[i].get(key, 0) for i in after)
    apart = all("overflowed" in after[i] for i in after)
    return {"sent_bytes": diff("sent_bytes"), "sent_pkts": diff("sent_pkts"), "dropped_pkts": diff("dropped"),
            "overflowed_pkts": diff("overflowed") if apart else None, "marked_pkts": diff("marked")}


def link_use(before: dict[str, dict], after: dict[str, dict], t0: float, t1: float,
             offered_bps: Callable[[float, float], float]) -> dict:
    """The queue's counts (queue_counts), utilisation (bits it sent ÷ the bits the link
    offered from `t0` to `t1`, offered_rate's) and drop rate (packets it dropped ÷ packets
    that arrived at it) between two readings taken then."""
    counts = queue_counts(before, after)
    pkts, drops = counts["sent_pkts"], counts["dropped_pkts"]
    offered_bits = offered_bps(t0, t1) * (t1 - t0)
    return {"seconds": t1 - t0, **counts,
            "utilisation": counts["sent_bytes"] * 8 / offered_bits if offered_bits > 0 else None,
            "drop_rate": drops / (pkts + drops) if pkts + drops else 0.0}


class Competing(Workload):
    name = "competing"
    summary = "one object fetched over HTTP/1.1 while a long bulk flow fills the bottleneck (Blitzstart §4)"
    reads_ecn = True
    params = {
        "fill_fraction": Param(0.95, "utilisation of the bottleneck that counts as filled", low=0.5, high=1.0),
        "fill_window_rtts": Param(4.0, "… sustained over this many RTTs (at least 0.5 s)", low=1, high=1000),
        "fill_min_s": Param(1.0, "the long flow runs at least this long first", low=0, high=600),
        "fill_timeout_s": Param(60.0, "error if the link is not filled by then", low=1, high=3600),
        "tail_rtts": Param(2.0, "the long flow outlives the short one by this many RTTs", low=0, high=1000),
        "long_flow": Param(True, "run the long flow (false: the flow under test alone)"),
        "long_variant": Param("cubic-iw10", "variant of the long flow's server and client", kind="variant"),
        "long_load": Param(0.0, "> 0: the long flows offer this share of the bottleneck rate", low=0.0, high=1.0),
        "long_streams": Param(1, "… over this many TCP connections", low=1, high=64, integer=True),
        "settle_s": Param(3.0, "… for this long before the fetch", low=0, high=600),
        "transport": Param("tcp", "applications: tcp (lighttpd, curl, iperf3), quic (startlab's QUIC endpoints "
                                  "for both flows; quic-* variants, long_variant too) or stack (a third-party QUIC "
                                  "stack's programs for the flow under test, e.g. quicgo-reno; the long flow TCP)",
                           choices=TRANSPORTS),
        "qlog": Param(False, "transport quic: both servers write each connection's qlog into the run's qlog/ "
                             "(cwnd, RTT, pacing rate, every packet: ~2 MB per second of a 50 Mbit/s flow)"),
        "prior_bytes": Param(0, "> 0: the flow under test first fetches this many bytes from the same server "
                                "(what a scheme with saved path state observes), alone on the path", low=0,
                             high=10 ** 10, integer=True),
        "pause_s": Param(1.0, "… then idles this long before the measured fetch", low=0, high=3600),
        "rate_factor": Param(1.0, "… and in the pause the bottleneck's rate becomes this share of the profile's "
                                  "(1: unchanged); with a first fetch the long flow, if any, also arrives in the "
                                  "pause", low=0.01, high=1.0),
    }

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        if params["rate_factor"] != 1.0 and not params["prior_bytes"]:
            return "rate_factor", "a change between two fetches needs a first fetch: prior_bytes > 0"
        if params["transport"] == "quic" and params["long_streams"] != 1:
            return "long_streams", "a QUIC long flow is one connection: long_streams must be 1"
        if params["qlog"] and params["transport"] != "quic":
            return "qlog", "qlog is QUIC's: it needs transport: quic (a stack's qlog is always written)"
        if params["transport"] == "stack" and params["prior_bytes"]:
            return "prior_bytes", "transport stack runs one fetch: prior_bytes must be 0"
        return None

    def check_variant(self, params: dict, variant: Variant, param: Optional[str] = None) -> Optional[str]:
        """A variant's sender must run the scenario's transport: QUIC variants need the QUIC
        applications (transport quic), and over QUIC the long flow is QUIC too (the paper);
        a stack's variants need transport stack, whose long flow is kernel TCP's."""
        if param == "long_variant" and not params["long_flow"]:
            return None
        # Over transport stack the flow under test is a stack's, the long flow kernel TCP's.
        long_of_stack = param == "long_variant" and params["transport"] == "stack"
        wanted = "tcp" if long_of_stack else params["transport"]
        have = sender_transport(variant)
        if have == wanted:
            return None
        if wanted == "quic":
            return "not a QUIC variant, and the workload's transport is quic (e.g. quic-cubic-iw32)"
        if wanted == "stack":
            return "not a QUIC stack's variant, and the workload's transport is stack (e.g. quicgo-reno)"
        if long_of_stack:
            return "over transport stack the long flow is kernel TCP's (e.g. cubic-iw10)"
        what = "a QUIC stack's variant" if have == "stack" else "a QUIC variant"
        return f"{what}: it needs the workload's transport: {have}"

    def hosts(self, params: dict) -> HostNeeds:
        return HostNeeds(pairs=2)

    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        n, prof = session.names, session.profile
        client, server = session.host(n.client(1)), session.host(n.server(1))
        long_client, long_server = session.host(n.client(2)), session.host(n.server(2))
        down = session.net.queue("down")
        docroot = session.scratch / "www"
        url_path = make_object(docroot, size_bytes)
        # Generous: ten times the ideal transfer time plus slow start on the longest paths.
        transfer_timeout = 30 + 10 * (size_bytes * 8 / prof.rate_bps("down")) + 50 * prof.rtt_s
        t = session.timings
        apps = apps_for(params["transport"], qlog=params["qlog"])
        long_flow = params["long_flow"]

        session.install_under_test(server=[server], client=[client])
        if long_flow:
            session.install(params["long_variant"], server=[long_server], client=[long_client])
        apps.serve_short(session, server, docroot)
        if long_flow:
            apps.serve_long(session, long_server)
        session.capture_standard(apps.capture_filter)
        shaper = None
        if long_flow and params["long_load"]:
            shaper = load_shaper(long_server, n.host_intf(long_server.name), prof, params["long_load"])
        session.flow("short", server, client, apps.short_port, size_bytes, report=apps.report("short"))
        if long_flow:
            session.flow("long", long_server, long_client, apps.long_port,
                         paced_by="the offered load's token bucket on its server" if shaper else "",
                         report=apps.report("long"))
        session.ready()
        run_before = session.queue_counters("down")

        if params["prior_bytes"]:
            t0 = time.monotonic()
            prior_path = make_object(docroot, params["prior_bytes"])
            prior_timeout = 30 + 10 * (params["prior_bytes"] * 8 / prof.rate_bps("down")) + 50 * prof.rtt_s
            apps.fetch(session, client, prior_path, params["prior_bytes"], prior_timeout, prior=True)
            t["traffic_prior_s"] = time.monotonic() - t0
            time.sleep(params["pause_s"])
            if params["rate_factor"] != 1.0:
                session.net.set_rate("down", prof.rate_bps("down") * params["rate_factor"])
        offered = offered_rate(session)
        if long_flow:
            t1 = time.monotonic()
            if shaper:
                check_cmd(long_server, " ".join(shaper.command()))
                session.adopt("the load's token bucket", _Undo(long_server, f"tc qdisc del dev {shaper.intf} root"))
            long_proc = session.adopt("the long flow", apps.start_long(
                session, long_client, params["fill_timeout_s"] + transfer_timeout + 60, params["long_streams"]))
            if shaper:
                time.sleep(params["settle_s"])
            else:
                t["fill_s"] = wait_until_filled(session.host(down.node), down.intf, offered, prof.rtt_s, params)
            if not long_proc.running():
                raise WorkloadError(f"the long flow ended early: {long_proc.output()[-300:]}")
            t["traffic_long_before_short_s"] = time.monotonic() - t1
        session.before_fetch()
        t2 = time.monotonic()
        measured_after = time.time()
        queue_before = session.queue_counters("down")
        app = apps.fetch(session, client, url_path, size_bytes, transfer_timeout)
        t["traffic_short_s"] = time.monotonic() - t2
        time.sleep(max(0.2, params["tail_rtts"] * prof.rtt_s))
        queue_after = session.queue_counters("down")
        use = link_use(queue_before, queue_after, t2, time.monotonic(), offered)
        spec = competing_spec(apps, size_bytes, long_flow, prof.rtt_s, prof.rate_bps("down"))
        if params["prior_bytes"]:
            # The analysis takes the short flow's connection that began after this moment.
            spec["short"].update(prior_bytes=params["prior_bytes"], after_unix_s=measured_after)
        return WorkloadResult(
            spec=spec,
            app=app,
            extra={"link_use": use, "queue_run": queue_counts(run_before, queue_after),
                   "load_shaper": shaper.as_dict() if shaper else None})


def sender_transport(variant: Variant) -> str:
    """What the variant's sender runs: 'tcp' (the kernel's), 'quic' (startlab's QUIC
    endpoint) or 'stack' (a third-party QUIC stack)."""
    return variant.declared("server", EndHostDefaults()).transport


def competing_spec(apps, size_bytes: int, long_flow: bool, rtt_s: float, rate_bps: float) -> dict:
    """What the analysis needs to find the run's flows: ports, size, and for QUIC the
    endpoints' report files (its FCT and counters come from them). A TCP run's spec has
    no transport key, as runs recorded before QUIC existed."""
    files = apps.spec()
    spec = {"short": {"server_port": apps.short_port, "size_bytes": size_bytes, **files.get("short", {})},
            "long": {"server_port": apps.long_port, **files.get("long", {})} if long_flow else None,
            "rtt_s": rtt_s, "rate_bps": rate_bps}
    if apps.transport != "tcp":
        spec["transport"] = apps.transport
    return spec


class _Undo:
    """A configuration command to run at teardown."""

    def __init__(self, node, command: str):
        self.node, self.command = node, command

    def stop(self) -> None:
        self.node.cmd(self.command)


WORKLOAD = Competing()
