"""The bottleneck queue: tc tbf on a router's egress into the core, one per direction."""
from __future__ import annotations

from dataclasses import dataclass, asdict

from topologies.profiles import LinkProfile


@dataclass(frozen=True)
class TbfSettings:
    """What is applied to one interface; recorded in each run's meta.json."""
    node: str
    intf: str
    direction: str          # 'down' (server → client) or 'up'
    rate_bps: float
    burst_bytes: int
    limit_bytes: int
    buffer_packets: int

    def command(self) -> list[str]:
        return ["tc", "qdisc", "replace", "dev", self.intf, "root", "tbf",
                "rate", f"{int(round(self.rate_bps))}bit",
                "burst", str(self.burst_bytes), "limit", str(self.limit_bytes)]

    def as_dict(self) -> dict:
        return asdict(self)


def tbf_for(profile: LinkProfile, node: str, intf: str, direction: str) -> TbfSettings:
    return TbfSettings(node=node, intf=intf, direction=direction,
                       rate_bps=profile.rate_bps(direction),
                       burst_bytes=profile.tbf_burst_bytes(direction),
                       limit_bytes=profile.buffer_bytes(direction),
                       buffer_packets=profile.buffer_packets(direction))


def tbf_counters(show_output: str) -> dict[str, int]:
    """Bytes and packets the queue sent and packets it dropped, from `tc -s qdisc show dev X`
    output ("Sent 1234 bytes 56 pkt (dropped 7, overlimits 8 requeues 0)")."""
    for token_line in show_output.splitlines():
        words = token_line.replace(",", " ").replace("(", " ").split()
        if words[:1] == ["Sent"] and "dropped" in words:
            return {"sent_bytes": int(words[1]), "sent_pkts": int(words[3]),
                    "dropped": int(words[words.index("dropped") + 1])}
    return {"sent_bytes": 0, "sent_pkts": 0, "dropped": 0}


def tbf_drops(show_output: str) -> int:
    """Packets dropped by the queue, from `tc -s qdisc show dev X` output."""
    for token_line in show_output.splitlines():
        token_line = token_line.strip()
        if token_line.startswith("Sent") and "dropped" in token_line:
            after = token_line.split("dropped", 1)[1].strip()
            return int(after.split(",")[0].split()[0])
    return 0
