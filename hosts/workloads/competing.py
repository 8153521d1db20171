"""Competing flows (Blitzstart §2/§4): a long CUBIC bulk flow fills the bottleneck, then the
flow under test fetches one object over HTTP/1.1 while the long flow keeps running.

With `long_load` > 0 the competing traffic is instead an offered load: `long_streams` bulk
TCP flows rate-limited together to long_load × the bottleneck rate by a token bucket on
the long flows' server (the Quick-Start paper's loaded-link experiments, Figs. 4, 5 and
8). The bucket paces the aggregate smoothly — iperf3's own -b catches up in line-rate
bursts, which a router's peak-utilisation estimate rightly reads as a full link — and its
queue back-pressures the senders in their own stack, so the load loses nothing before the
bottleneck. The fetch starts once the flows have run `settle_s`. The bottleneck queue's
counters over the fetch (from its start to the end of the tail) give the link's
utilisation and drop rate in that time, for every run.

Host roles: cl1 ← sv1 is the flow under test (its server gets the variant), cl2 ← sv2 is
the long flow with the kernel default (CUBIC, IW10), as in the paper's four-host setup.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, asdict
from pathlib import Path

from hosts.apps import HTTP_PORT, Iperf3Server, Lighttpd, curl_fetch, iperf3_reverse_client, make_object
from hosts.capture import start_captures
from hosts.implementations.base import InstallContext
from hosts.variants import Variant
from topologies.bottleneck import TbfSettings
from topologies.path import CLIENT_NET, SERVER_NET, GATEWAY_HOST
from topologies.shell import check_cmd

# Capture points (file → where): both sides of the downstream bottleneck queue, and
# the clients' switch uplink, where the paper measured fairness.
CAPTURE_POINTS = ("cap-client.pcap", "cap-bneck-in.pcap", "cap-bneck-out.pcap")


class WorkloadError(RuntimeError):
    pass


@dataclass
class CompetingParams:
    fill_fraction: float = 0.95      # utilisation of the bottleneck that counts as filled …
    fill_window_rtts: float = 4.0    # … sustained over this many RTTs (at least 0.5 s)
    fill_min_s: float = 1.0          # the long flow runs at least this long first
    fill_timeout_s: float = 60.0
    tail_rtts: float = 2.0           # the long flow outlives the short one by this much
    long_flow: bool = True
    long_load: float = 0.0           # > 0: the long flows offer this share of the bottleneck rate …
    long_streams: int = 1            # … over this many TCP connections …
    settle_s: float = 3.0            # … for this long before the fetch (long_load 0: fill the link)

    def as_dict(self) -> dict:
        return asdict(self)


def tx_bytes(node, intf: str) -> int:
    """Bytes sent by an interface (from the node's own /proc/net/dev)."""
    for line in node.cmd("cat /proc/net/dev").splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == intf:
            return int(counters.split()[8])
    raise WorkloadError(f"interface {intf} not found in {node.name}")


def wait_until_filled(router, intf: str, rate_bps: float, rtt_s: float, p: CompetingParams) -> float:
    """Block until the queue's egress has carried ≥ fill_fraction of its rate over a window.

    Returns the seconds it took; raises WorkloadError if the long flow never fills the link.
    """
    window = max(0.5, p.fill_window_rtts * rtt_s)
    start = time.monotonic()
    time.sleep(p.fill_min_s)
    samples: list[tuple[float, int]] = []
    while time.monotonic() - start < p.fill_timeout_s:
        now = time.monotonic()
        samples.append((now, tx_bytes(router, intf)))
        while len(samples) > 2 and samples[1][0] <= now - window:
            samples.pop(0)
        t0, b0 = samples[0]
        if now - t0 >= window * 0.98:
            rate = (samples[-1][1] - b0) * 8 / (now - t0)
            if rate >= p.fill_fraction * rate_bps:
                return now - start
        time.sleep(0.05)
    raise WorkloadError(f"the long flow did not fill the bottleneck ({p.fill_fraction:.0%} of "
                        f"{rate_bps / 1e6:g} Mbit/s for {window:.2f} s) within {p.fill_timeout_s:g} s")


def load_shaper(node, prof, load: float) -> TbfSettings:
    """The token bucket limiting a node's egress to `load` × the profile's downstream rate."""
    intf = next(i.name for i in node.intfList() if i.name != "lo")
    rate = load * prof.rate_bps("down")
    burst = prof.tbf_burst_bytes("down")
    return TbfSettings(node=node.name, intf=intf, direction="down", rate_bps=rate, burst_bytes=burst,
                       limit_bytes=max(4 * burst, int(rate * prof.rtt_s / 8)), buffer_packets=0)


def _link_use(before: dict[str, dict], after: dict[str, dict], seconds: float, rate_bps: float) -> dict:
    """Utilisation (bytes the downstream queue sent ÷ what its rate allows in `seconds`) and
    drop rate (packets it dropped ÷ packets that arrived at it) between two readings."""
    sent = sum(after[i]["sent_bytes"] - before[i]["sent_bytes"] for i in after)
    pkts = sum(after[i]["sent_pkts"] - before[i]["sent_pkts"] for i in after)
    drops = sum(after[i]["dropped"] - before[i]["dropped"] for i in after)
    return {"seconds": seconds, "sent_bytes": sent, "sent_pkts": pkts, "dropped_pkts": drops,
            "utilisation": sent * 8 / (rate_bps * seconds) if seconds > 0 else None,
            "drop_rate": drops / (pkts + drops) if pkts + drops else 0.0}


def run_competing(net, variant: Variant, size_bytes: int, workdir: Path, docroot: Path,
                  params: CompetingParams) -> dict:
    """One run: returns what the applications reported plus timings; captures land in workdir."""
    n, prof, inst = net.names, net.profile, net.instance
    client, server = net.host(n.client(1)), net.host(n.server(1))
    long_client, long_server = net.host(n.client(2)), net.host(n.server(2))
    first, last = net.host(n.router(1)), net.host(n.router(n.routers))
    routers = [net.host(r) for r in n.routers_list()]
    ctx = {client.name: InstallContext(gateway=f"{CLIENT_NET}.{GATEWAY_HOST}", peer_net=f"{SERVER_NET}.0/24",
                                       rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s, instance=inst),
           server.name: InstallContext(gateway=f"{SERVER_NET}.{GATEWAY_HOST}", peer_net=f"{CLIENT_NET}.0/24",
                                       rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s, instance=inst)}
    for r in routers:
        ctx[r.name] = InstallContext(rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s, instance=inst)
    roles = {"server": [server], "client": [client], "router": routers}
    url_path = make_object(docroot, size_bytes)
    # Generous: ten times the ideal transfer time plus slow start on the longest paths.
    transfer_timeout = 30 + 10 * (size_bytes * 8 / prof.rate_bps("down")) + 50 * prof.rtt_s
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    variant.install(roles, ctx)
    servers, captures, long_proc = [], [], None
    router_counters: dict[str, dict] = {}
    link_use: dict = {}
    shaper = load_shaper(long_server, prof, params.long_load) if params.long_flow and params.long_load else None
    try:
        servers.append(Lighttpd(server, n.server_ip(1), docroot, workdir, inst))
        if params.long_flow:
            servers.append(Iperf3Server(long_server, workdir, inst))
        captures = start_captures([
            (first, f"{n.router(1)}-eth0", workdir / CAPTURE_POINTS[0]),
            (last, f"{n.router(n.routers)}-eth1", workdir / CAPTURE_POINTS[1]),
            (last, f"{n.router(n.routers)}-eth0", workdir / CAPTURE_POINTS[2]),
        ], inst)
        timings["setup_s"] = time.monotonic() - t0
        if params.long_flow:
            t1 = time.monotonic()
            if shaper:
                check_cmd(long_server, " ".join(shaper.command()))
            long_proc = iperf3_reverse_client(long_client, n.server_ip(2),
                                              params.fill_timeout_s + transfer_timeout + 60, workdir, inst,
                                              streams=params.long_streams)
            if shaper:
                time.sleep(params.settle_s)
            else:
                timings["fill_s"] = wait_until_filled(last, f"{n.router(n.routers)}-eth0",
                                                      prof.rate_bps("down"), prof.rtt_s, params)
            if not long_proc.running():
                raise WorkloadError(f"the long flow ended early: {long_proc.output()[-300:]}")
            timings["long_before_short_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        queue_before = net.queue_counters("down")
        curl = curl_fetch(client, f"http://{n.server_ip(1)}:{HTTP_PORT}{url_path}", workdir, inst,
                          transfer_timeout)
        timings["short_s"] = time.monotonic() - t2
        if curl.get("http_code") != 200 or int(curl.get("size_download", -1)) != size_bytes:
            raise WorkloadError(f"the fetch returned {curl}, expected {size_bytes} bytes with status 200")
        time.sleep(max(0.2, params.tail_rtts * prof.rtt_s))
        link_use = _link_use(queue_before, net.queue_counters("down"), time.monotonic() - t2,
                             prof.rate_bps("down"))
    finally:
        t3 = time.monotonic()
        if long_proc is not None:
            long_proc.stop()
        if shaper:
            long_server.cmd(f"tc qdisc del dev {shaper.intf} root")
        capture_stats = [c.stop() for c in captures]
        for s in servers:
            s.stop()
        try:
            router_counters = variant.counters(roles, ctx, "router")   # remove takes them away
        finally:
            variant.remove(roles, ctx)
        timings["stop_s"] = time.monotonic() - t3
    lost_in_capture = [c for c in capture_stats if c.get("dropped_by_kernel")]
    if lost_in_capture:
        raise WorkloadError(f"tcpdump lost packets, the captures are not exact: {lost_in_capture}")
    return {"curl": curl, "captures": capture_stats, "timings": timings, "router_counters": router_counters,
            "link_use": link_use, "load_shaper": shaper.as_dict() if shaper else None,
            "spec": {"short": {"server_port": HTTP_PORT, "size_bytes": size_bytes},
                     "long": {"server_port": 5201} if params.long_flow else None,
                     "rtt_s": prof.rtt_s, "rate_bps": prof.rate_bps("down")}}
