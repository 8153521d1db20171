"""tc tbf on the router's egress into the core: the default bottleneck."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from links.hostfit import EmulatorTuning
from links.profiles import LinkProfile
from links.shapers import Queue, Shaper


@dataclass(frozen=True)
class TbfSettings:
    """What is applied to one interface; recorded in each run's meta.json."""
    node: str
    intf: str
    direction: str
    rate_bps: float
    burst_bytes: int
    limit_bytes: int
    buffer_packets: int

    def command(self) -> list[str]:
        return ["tc", "qdisc", "replace", "dev", self.intf, "root", "handle", "1:", "tbf",
                "rate", f"{int(round(self.rate_bps))}bit",
                "burst", str(self.burst_bytes), "limit", str(self.limit_bytes)]

    def as_dict(self) -> dict:
        return asdict(self)


def tbf_counters(show_output: str) -> dict[str, int]:
    """Bytes and packets a qdisc sent and packets it dropped, from `tc -s qdisc show dev X`
    output ("Sent 1234 bytes 56 pkt (dropped 7, overlimits 8 requeues 0)"); the first
    (root) qdisc's line."""
    for token_line in show_output.splitlines():
        words = token_line.replace(",", " ").replace("(", " ").split()
        if words[:1] == ["Sent"] and "dropped" in words:
            return {"sent_bytes": int(words[1]), "sent_pkts": int(words[3]),
                    "dropped": int(words[words.index("dropped") + 1])}
    return {"sent_bytes": 0, "sent_pkts": 0, "dropped": 0}


class Tbf(Shaper):
    """tc tbf on the egress of the router into the core: the 'down' queue on the east
    router's client-facing interface, the 'up' queue on the west router's server-facing one.

    `child`: tc arguments of a qdisc to put under tbf's class 1:1 (e.g. a priority queue);
    empty: tbf's own byte FIFO.
    """
    name = "tbf"

    def __init__(self, child: tuple[str, ...] = ()):
        self.child = tuple(child)

    def settings(self, profile: LinkProfile, node: str, intf: str, direction: str,
                 tuning: EmulatorTuning | None = None) -> TbfSettings:
        burst = tuning.tbf_burst_bytes(profile, direction) if tuning else profile.tbf_burst_bytes(direction)
        return TbfSettings(node=node, intf=intf, direction=direction, rate_bps=profile.rate_bps(direction),
                           burst_bytes=burst,
                           limit_bytes=profile.buffer_bytes(direction),
                           buffer_packets=profile.buffer_packets(direction))

    def install(self, net, names, profile, hop, direction) -> Queue:
        router = names.router(hop + 1 if direction == "down" else hop)
        intf = names.egress(router, direction)
        arriving = names.facing(router, "server" if direction == "down" else "client")
        s = self.settings(profile, router, intf, direction, getattr(net, "tuning", None))
        node = net.host(router)
        net.check(node, " ".join(s.command()))
        child = self.child_for(profile, direction)
        if child:
            net.check(node, " ".join(["tc", "qdisc", "add", "dev", intf, "parent", "1:1", "handle", "10:",
                                      *child]))
        return Queue(node=router, intf=intf, direction=direction, hop=hop,
                     settings={"shaper": self.name, **s.as_dict(), "child": list(child)},
                     before=(router, arriving), after=(router, intf))

    def child_for(self, profile: LinkProfile, direction: str) -> tuple[str, ...]:
        """The child qdisc's tc arguments for one queue (a child sized by the queue's
        buffer overrides this)."""
        return self.child

    def counters(self, net, queue: Queue) -> dict[str, int]:
        return tbf_counters(net.host(queue.node).cmd(f"tc -s qdisc show dev {queue.intf}"))

    def set_rate(self, net, queue: Queue, rate_bps: float, burst_bytes: int, buffer_pkts: int) -> None:
        net.check(net.host(queue.node), f"tc qdisc change dev {queue.intf} root handle 1: tbf "
                                        f"rate {int(round(rate_bps))}bit burst {burst_bytes} "
                                        f"limit {buffer_pkts * net.profile.frame_bytes}")


SHAPER = Tbf
