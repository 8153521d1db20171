"""The standing queue a bottleneck's discipline lets a bulk flow build, measured by pings.

One bulk CUBIC flow (iperf3, server to client) fills the bottleneck; after it has settled,
pings every 50 ms sample the path's RTT, whose excess over the profile's base RTT is the
queueing delay a packet arriving then meets (the sojourn it will have, serialisation
included). Over the same seconds the down queue's counters give what the discipline did:
drops, and with ECN, marks. Pings are not ECN-capable, so a marking queue still drops a
ping whose turn came with a signal due: `pings_lost` says how many were.

Used by the AQM tests (a FIFO fills, CoDel holds its target) and by the benchmark that
sets the delay line's AQMs beside the kernel's on the same path
(benchmarks/aqm_kernel.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from hosts.apps import Iperf3Server
from hosts.ping import percentile, ping_rtts
from hosts.process import NodeProcess
from links.profiles import LinkProfile
from links.shapers import Shaper
from topologies.endhosts import set_ecn
from topologies.network import Network

PING_INTERVAL_S = 0.05


@dataclass(frozen=True)
class StandingQueue:
    """RTT percentiles under the flow (ms), pings sent and lost, the down queue's counters
    over the ping window, and its settings as installed."""
    rtt_ms: dict[str, float]
    pings: int
    pings_lost: int
    counters: dict[str, int]
    settings: dict

    def queueing_ms(self, base_rtt_ms: float) -> dict[str, float]:
        """The RTT percentiles less the path's base RTT: the queueing delay a ping met."""
        return {k: round(v - base_rtt_ms, 3) for k, v in self.rtt_ms.items()}


def standing_queue(workdir: Path, profile: LinkProfile, shaper: Shaper, ecn: bool,
                   settle_s: float = 4.0, pings: int = 80) -> StandingQueue:
    """Run the bulk flow for `settle_s` then `pings` pings' time, and measure (above). `ecn`:
    the client asks for ECN (the server's default accepts), so the flow's data is
    ECN-capable."""
    seconds = settle_s + pings * PING_INTERVAL_S + 1
    with Network(profile, workdir, shaper=shaper) as net:
        n = net.names
        client = net.host(n.client(1))
        set_ecn(client, "on" if ecn else "accept")
        down = next(q for q in net.queues if q.direction == "down")
        server = Iperf3Server(net.host(n.server(1)), workdir, net.instance)
        flow = NodeProcess(client, ["iperf3", "-c", n.server_ip(1), "-R", "-t", f"{seconds:.0f}"], net.instance,
                           "iperf3 bulk", log_path=workdir / "bulk.log")
        try:
            time.sleep(settle_s)
            before = net.shaper.counters(net, down)
            rtts = ping_rtts(client, n.server_ip(1), count=pings, interval_s=PING_INTERVAL_S)
            after = net.shaper.counters(net, down)
        finally:
            flow.stop()
            server.stop()
    if not rtts:
        raise RuntimeError(f"{workdir}: no ping answered under the bulk flow")
    return StandingQueue(rtt_ms={f"p{q}": percentile(rtts, q) for q in (10, 50, 90, 99)}, pings=pings,
                         pings_lost=pings - len(rtts), counters={k: after[k] - before[k] for k in after},
                         settings=down.settings)
