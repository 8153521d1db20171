"""How a bottleneck link shapes: one queue per direction of every router–core–router hop.

A Shaper puts the queue on the path and says where its packets can be seen arriving and
leaving (so a run captures both sides and counts every drop exactly), and reads the
queue's counters. `Tbf` is the first implementation: tc tbf on the router's egress into
the core, with an optional child qdisc under its class (the hook for a priority queue or a
classifier). Others (a queue inside the delay element, trace-driven rates) add a class
here and leave the network builder alone.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field

from topologies.delay import AF13, QUEUE_POLICIES, LineQueue
from topologies.hostfit import EmulatorTuning
from topologies.names import PathNames
from topologies.profiles import LinkProfile


@dataclass(frozen=True)
class Queue:
    """One bottleneck queue as installed: where, which direction, with what settings, and
    the (node, interface) pairs where its arriving and departing packets pass."""
    node: str
    intf: str
    direction: str              # 'down' (server → client) or 'up'
    hop: int                    # router k → core k → router k+1
    settings: dict = field(hash=False)
    before: tuple[str, str] = ("", "")
    after: tuple[str, str] = ("", "")

    def as_dict(self) -> dict:
        return {**self.settings, "node": self.node, "intf": self.intf, "direction": self.direction,
                "hop": self.hop, "shaper": self.settings.get("shaper")}


class Shaper(ABC):
    """Puts a profile's bottleneck queue on a hop and reads its counters."""
    name: str = ""
    delay_backend: str | None = None      # the delay element it needs, if it lives there

    def delay_options(self, hop: int) -> dict:
        """Keyword options for the delay element of `hop` (a queue that lives inside it)."""
        return {}

    def describe(self) -> dict:
        return {"kind": self.name}

    # -- how a user names it: a scenario's `shaper:` section and the command line's --shaper
    @classmethod
    def from_fields(cls, fields) -> "Shaper":
        """The shaper a scenario's `shaper:` section (config.yamlfile.Fields) declares."""
        fields.unknown({"kind"})
        return cls()

    @classmethod
    def cli_forms(cls) -> list[str]:
        """The spellings `--shaper` accepts for this kind."""
        return [cls.name]

    @classmethod
    def from_cli(cls, text: str) -> "Shaper":
        return cls()

    @abstractmethod
    def install(self, net, names: PathNames, profile: LinkProfile, hop: int, direction: str) -> Queue:
        """Shape `direction` of hop `hop` to the profile's rate and buffer."""

    @abstractmethod
    def counters(self, net, queue: Queue) -> dict[str, int]:
        """{'sent_bytes', 'sent_pkts', 'dropped'} of the queue so far (link-layer bytes)."""


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
        if self.child:
            net.check(node, " ".join(["tc", "qdisc", "add", "dev", intf, "parent", "1:1", "handle", "10:",
                                      *self.child]))
        return Queue(node=router, intf=intf, direction=direction, hop=hop,
                     settings={"shaper": self.name, **s.as_dict(), "child": list(self.child)},
                     before=(router, arriving), after=(router, intf))

    def counters(self, net, queue: Queue) -> dict[str, int]:
        return tbf_counters(net.host(queue.node).cmd(f"tc -s qdisc show dev {queue.intf}"))


class DelayLineQueue(Shaper):
    """The bottleneck queue inside startlab's delay line, in front of its delay (as
    mahimahi's mm-link sits before mm-delay): the profile's rate and buffer, and a drop
    policy tbf cannot offer — `droptail`, `pushout` (a full buffer drops a queued
    low-priority frame, DSCP in `low_dscp`, before anything else: TCP Fast Start's router,
    §3.2) or `red`. The delay line serialises frames at the rate and never reorders.
    """
    name = "delayline"
    delay_backend = "delayline"

    def __init__(self, policy: str = "droptail", low_dscp: tuple[int, ...] = (AF13,)):
        self.policy = policy
        self.low_dscp = tuple(low_dscp)
        self._queues: dict[tuple[int, str], LineQueue] = {}

    def describe(self) -> dict:
        return {"kind": self.name, "policy": self.policy, "low_dscp": list(self.low_dscp)}

    @classmethod
    def from_fields(cls, fields) -> "DelayLineQueue":
        """`{kind: delayline, policy: droptail|pushout|red, low_dscp: [14]}`."""
        fields.unknown({"kind", "policy", "low_dscp"})
        policy = fields.text("policy", "droptail", choices=list(QUEUE_POLICIES))
        low = fields.list("low_dscp", [AF13])
        if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 63 for d in low):
            raise fields.error("low_dscp", f"DSCP values are whole numbers 0..63, got {low}")
        return cls(policy=policy, low_dscp=tuple(low))

    @classmethod
    def cli_forms(cls) -> list[str]:
        return [cls.name, *(f"{cls.name}:{p}" for p in QUEUE_POLICIES)]

    @classmethod
    def from_cli(cls, text: str) -> "DelayLineQueue":
        return cls(policy=text.partition(":")[2] or "droptail")

    @staticmethod
    def line_direction(direction: str) -> str:
        """The delay line's a→b runs client → server (its a side faces the clients)."""
        return "ab" if direction == "up" else "ba"

    def install(self, net, names, profile, hop, direction) -> Queue:
        queue = LineQueue(rate_bps=profile.rate_bps(direction), limit_bytes=profile.buffer_bytes(direction),
                          policy=self.policy, low_dscp=self.low_dscp)
        self._queues[(hop, direction)] = queue
        west, east = names.router(hop), names.router(hop + 1)
        toward_core = (east, names.facing(east, "client")) if direction == "down" else (west, names.facing(west, "server"))
        from_core = (west, names.facing(west, "server")) if direction == "down" else (east, names.facing(east, "client"))
        return Queue(node=names.core(hop), intf=names.core_intf(hop, "client" if direction == "down" else "server"),
                     direction=direction, hop=hop,
                     settings={"shaper": self.name, "rate_bps": queue.rate_bps, "limit_bytes": queue.limit_bytes,
                               "buffer_packets": profile.buffer_packets(direction), "policy": queue.policy,
                               "low_dscp": list(queue.low_dscp), "line_direction": self.line_direction(direction)},
                     before=toward_core, after=from_core)

    def delay_options(self, hop: int) -> dict:
        return {"queue_ab": self._queues.get((hop, "up")), "queue_ba": self._queues.get((hop, "down"))}

    def counters(self, net, queue: Queue) -> dict[str, int]:
        side = {"ab": "a_to_b", "ba": "b_to_a"}[queue.settings["line_direction"]]     # the snapshot's names
        q = (net.delay_element(queue.node).snapshot().get(side) or {}).get("queue") or {}
        return {"sent_bytes": int(q.get("sent_bytes", 0)), "sent_pkts": int(q.get("sent", 0)),
                "dropped": int(q.get("dropped", 0))}


# Every shaper kind, by name: the scenario parser, `fidelity --shaper` and the docs read this.
SHAPERS: dict[str, type[Shaper]] = {cls.name: cls for cls in (Tbf, DelayLineQueue)}


def cli_choices() -> list[str]:
    return [form for cls in SHAPERS.values() for form in cls.cli_forms()]


def from_cli(text: str) -> Shaper:
    """The shaper `--shaper TEXT` names (TEXT is one of cli_choices())."""
    return SHAPERS[text.partition(":")[0]].from_cli(text)
