"""tc htb with one class at the profile's rate and a packet FIFO of the profile's buffer
under it: the shaper of many testbeds (and an example of a shaper plugin). Placed where
tbf is, on the router's egress into the core; its bucket is sized like tbf's from the
host's measured wake-ups, since htb's watchdog wakes as late."""
from __future__ import annotations

from links.shapers import Queue, Shaper
from links.shapers.tbf import tbf_counters


class Htb(Shaper):
    name = "htb"

    def install(self, net, names, profile, hop, direction) -> Queue:
        router = names.router(hop + 1 if direction == "down" else hop)
        intf = names.egress(router, direction)
        arriving = names.facing(router, "server" if direction == "down" else "client")
        tuning = getattr(net, "tuning", None)
        burst = tuning.tbf_burst_bytes(profile, direction) if tuning else profile.tbf_burst_bytes(direction)
        rate = int(round(profile.rate_bps(direction)))
        node = net.host(router)
        net.check(node, f"tc qdisc replace dev {intf} root handle 1: htb default 1")
        net.check(node, f"tc class add dev {intf} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
                        f"burst {burst} cburst {burst}")
        net.check(node, f"tc qdisc add dev {intf} parent 1:1 handle 10: pfifo limit {profile.buffer_packets(direction)}")
        settings = {"shaper": self.name, "node": router, "intf": intf, "direction": direction, "rate_bps": rate,
                    "burst_bytes": burst, "buffer_packets": profile.buffer_packets(direction)}
        return Queue(node=router, intf=intf, direction=direction, hop=hop, settings=settings,
                     before=(router, arriving), after=(router, intf))

    def counters(self, net, queue: Queue) -> dict[str, int]:
        # The root's line: htb counts its classes' sends and the FIFO's drops.
        return tbf_counters(net.host(queue.node).cmd(f"tc -s qdisc show dev {queue.intf}"))

    def set_rate(self, net, queue: Queue, rate_bps: float, burst_bytes: int, buffer_pkts: int) -> None:
        rate, burst = int(round(rate_bps)), burst_bytes
        node = net.host(queue.node)
        net.check(node, f"tc class change dev {queue.intf} parent 1: classid 1:1 htb "
                        f"rate {rate}bit ceil {rate}bit burst {burst} cburst {burst}")
        net.check(node, f"tc qdisc change dev {queue.intf} parent 1:1 handle 10: pfifo limit {buffer_pkts}")


SHAPER = Htb
