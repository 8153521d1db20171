"""The bottleneck queue inside the delay line, with drop policies tbf cannot offer."""
from __future__ import annotations

from links.delay import AF13, LINE_DIRECTION, QUEUE_POLICIES, LineQueue
from links.shapers import Queue, Shaper

CODEL_DEFAULT = (5.0, 100.0, False)     # RFC 8289: target 5 ms, interval 100 ms; no ECN


class DelayLineQueue(Shaper):
    """The bottleneck queue inside startlab's delay line, in front of its delay (as
    mahimahi's mm-link sits before mm-delay): the profile's rate and buffer, and a drop
    policy tbf cannot offer — `droptail`, `pushout` (a full buffer drops a queued
    low-priority frame, DSCP in `low_dscp`, before anything else: TCP Fast Start's router,
    §3.2), `red`, or `codel` (RFC 8289, written from its pseudocode: for kernels without
    sch_codel, such as this project's real-clock hosts, and for trace links; `target_ms`
    5 and `interval_ms` 100 by default, `ecn: true` marks instead of dropping). The delay line serialises frames at the rate, or sends them at a trace
    link's delivery opportunities (links/traces.py), loses frames at random where the profile
    says so, and never reorders.
    """
    name = "delayline"
    delay_backend = "delayline"
    full_link_model = True

    def __init__(self, policy: str = "droptail", low_dscp: tuple[int, ...] = (AF13,),
                 codel: tuple[float, float, bool] | None = None):
        self.policy = policy
        self.low_dscp = tuple(low_dscp)
        # CoDel's (target_ms, interval_ms, ecn), RFC 8289's defaults unless given.
        self.codel = (codel or CODEL_DEFAULT) if policy == "codel" else None
        self._queues: dict[tuple[int, str], LineQueue] = {}

    def describe(self) -> dict:
        codel = dict(zip(("target_ms", "interval_ms", "ecn"), self.codel)) if self.codel else {}
        return {"kind": self.name, "policy": self.policy, "low_dscp": list(self.low_dscp), **codel}

    @classmethod
    def from_fields(cls, fields) -> "DelayLineQueue":
        """`{kind: delayline, policy: droptail|pushout|red|codel, low_dscp: [14]}`; codel
        also takes `target_ms`, `interval_ms` and `ecn`."""
        fields.unknown({"kind", "policy", "low_dscp", "target_ms", "interval_ms", "ecn"})
        policy = fields.text("policy", "droptail", choices=list(QUEUE_POLICIES))
        low = fields.list("low_dscp", [AF13])
        if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 63 for d in low):
            raise fields.error("low_dscp", f"DSCP values are whole numbers 0..63, got {low}")
        codel = None
        if policy == "codel":
            target = fields.number("target_ms", CODEL_DEFAULT[0], low=0.01, high=10000.0)
            interval = fields.number("interval_ms", CODEL_DEFAULT[1], low=0.01, high=10000.0)
            if interval <= target:
                raise fields.error("interval_ms", f"CoDel's interval must exceed its target ({target} ms), got {interval}")
            codel = (target, interval, fields.flag("ecn", False))
        else:
            for key in ("target_ms", "interval_ms", "ecn"):
                if fields.has(key):
                    raise fields.error(key, f"{key} applies to policy codel only (this queue's policy is {policy})")
        return cls(policy=policy, low_dscp=tuple(low), codel=codel)

    @classmethod
    def cli_forms(cls) -> list[str]:
        return [cls.name, *(f"{cls.name}:{p}" for p in QUEUE_POLICIES)]

    @classmethod
    def from_cli(cls, text: str) -> "DelayLineQueue":
        return cls(policy=text.partition(":")[2] or "droptail")

    @staticmethod
    def line_direction(direction: str) -> str:
        """The delay line's side a `direction` ('up'/'down') runs on (links.delay.LINE_DIRECTION)."""
        return LINE_DIRECTION[direction]

    def install(self, net, names, profile, hop, direction) -> Queue:
        codel = (round(self.codel[0] * 1000), round(self.codel[1] * 1000), self.codel[2]) if self.codel else None
        queue = LineQueue(rate_bps=profile.rate_bps(direction), limit_bytes=profile.buffer_bytes(direction),
                          policy=self.policy, low_dscp=self.low_dscp, codel=codel, trace=profile.trace_path(direction),
                          opportunity_bytes=profile.frame_bytes, loss=profile.loss(direction))
        self._queues[(hop, direction)] = queue
        west, east = names.router(hop), names.router(hop + 1)
        toward_core = (east, names.facing(east, "client")) if direction == "down" else (west, names.facing(west, "server"))
        from_core = (west, names.facing(west, "server")) if direction == "down" else (east, names.facing(east, "client"))
        return Queue(node=names.core(hop), intf=names.core_intf(hop, "client" if direction == "down" else "server"),
                     direction=direction, hop=hop,
                     settings={"shaper": self.name, "rate_bps": queue.rate_bps, "limit_bytes": queue.limit_bytes,
                               "buffer_packets": profile.buffer_packets(direction), "policy": queue.policy,
                               "low_dscp": list(queue.low_dscp), "line_direction": self.line_direction(direction),
                               "codel": self.describe() if self.codel else None,
                               "trace": str(queue.trace) if queue.trace else None,
                               "opportunity_bytes": queue.opportunity_bytes if queue.trace else None, "loss": queue.loss},
                     before=toward_core, after=from_core)

    def lone_frame_delay_s(self, queue: Queue, frame_bytes: int) -> float:
        """The line's queue departs every frame its wire time after it starts."""
        return frame_bytes * 8 / queue.settings["rate_bps"]

    def delay_options(self, hop: int) -> dict:
        return {"queue_ab": self._queues.get((hop, "up")), "queue_ba": self._queues.get((hop, "down"))}

    @staticmethod
    def queue_stats(net, queue: Queue) -> dict:
        """The line's counters of `queue` now (its snapshot names the sides a_to_b, b_to_a)."""
        side = {"ab": "a_to_b", "ba": "b_to_a"}[queue.settings["line_direction"]]
        return (net.delay_element(queue.node).snapshot().get(side) or {}).get("queue") or {}

    def counters(self, net, queue: Queue) -> dict[str, int]:
        q = self.queue_stats(net, queue)
        return {"sent_bytes": int(q.get("sent_bytes", 0)), "sent_pkts": int(q.get("sent", 0)),
                "dropped": int(q.get("dropped", 0)), "marked": int(q.get("marks", 0))}


SHAPER = DelayLineQueue
