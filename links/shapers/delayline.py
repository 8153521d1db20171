"""The bottleneck queue inside the delay line, with drop policies tbf cannot offer."""
from __future__ import annotations

from links.delay import AF13, CODEL_POLICIES, LINE_DIRECTION, QUEUE_POLICIES, LineQueue
from links.shapers import Queue, Shaper

# The delay line's AQM policies: their two times (scenario field → default ms), RFC 8289's
# (fq_codel's flows each run CoDel: RFC 8290) and RFC 8033's; each also takes `ecn` (mark
# ECN-capable packets CE instead of dropping).
AQM_TIMES = {"codel": {"target_ms": 5.0, "interval_ms": 100.0},
             "fq_codel": {"target_ms": 5.0, "interval_ms": 100.0},
             "pie": {"target_ms": 15.0, "tupdate_ms": 15.0}}
AQM_FIELDS = {"target_ms", "interval_ms", "tupdate_ms", "ecn"}


class DelayLineQueue(Shaper):
    """The bottleneck queue inside startlab's delay line, in front of its delay (as
    mahimahi's mm-link sits before mm-delay): the profile's rate and buffer, and a drop
    policy tbf cannot offer — `droptail`, `pushout` (a full buffer drops a queued
    low-priority frame, DSCP in `low_dscp`, before anything else: TCP Fast Start's router,
    §3.2), `red`, `codel` (RFC 8289: `target_ms` 5, `interval_ms` 100), `fq_codel` (RFC 8290:
    a CoDel queue per flow, with CoDel's times, served by deficit round robin with a
    quantum of 1514 bytes over 1024 hashed flow queues) or `pie` (RFC 8033: `target_ms` 15,
    `tupdate_ms` 15), the AQMs written from their RFCs for kernels without the qdiscs (this
    project's real-clock hosts) and for trace links, each with `ecn: true` to mark instead
    of dropping. The delay line serialises frames at the rate, or sends them
    at a trace link's delivery opportunities (links/traces.py), loses frames at random where
    the profile says so, and never reorders (fq_codel: never within a flow).
    """
    name = "delayline"
    delay_backend = "delayline"
    full_link_model = True

    def __init__(self, policy: str = "droptail", low_dscp: tuple[int, ...] = (AF13,), **aqm: float | bool):
        self.policy = policy
        self.low_dscp = tuple(low_dscp)
        # An AQM policy's times and ECN, its RFC's defaults unless given.
        self.aqm: dict = ({**AQM_TIMES[policy], "ecn": False, **aqm} if policy in AQM_TIMES else {})
        self._queues: dict[tuple[int, str], LineQueue] = {}

    def describe(self) -> dict:
        return {"kind": self.name, "policy": self.policy, "low_dscp": list(self.low_dscp), **self.aqm}

    @classmethod
    def from_fields(cls, fields) -> "DelayLineQueue":
        """`{kind: delayline, policy: droptail|pushout|red|codel|pie|fq_codel, low_dscp: [14]}`;
        codel and fq_codel also take `target_ms`, `interval_ms` and `ecn`, pie `target_ms`,
        `tupdate_ms` and `ecn`."""
        fields.unknown({"kind", "policy", "low_dscp", *AQM_FIELDS})
        policy = fields.text("policy", "droptail", choices=list(QUEUE_POLICIES))
        low = fields.list("low_dscp", [AF13])
        if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 63 for d in low):
            raise fields.error("low_dscp", f"DSCP values are whole numbers 0..63, got {low}")
        times = AQM_TIMES.get(policy, {})
        allowed = {*times, "ecn"} if times else set()
        for key in sorted(AQM_FIELDS - allowed):
            if fields.has(key):
                raise fields.error(key, f"{key} does not apply to policy {policy} "
                                        f"(codel and fq_codel take target_ms, interval_ms, ecn; pie target_ms, "
                                        f"tupdate_ms, ecn)")
        aqm = {k: fields.number(k, default, low=0.01, high=10000.0) for k, default in times.items()}
        if policy in CODEL_POLICIES and aqm["interval_ms"] <= aqm["target_ms"]:
            raise fields.error("interval_ms", f"CoDel's interval must exceed its target ({aqm['target_ms']} ms), "
                                              f"got {aqm['interval_ms']}")
        if times:
            aqm["ecn"] = fields.flag("ecn", False)
        return cls(policy=policy, low_dscp=tuple(low), **aqm)

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
        aqm = (*(round(self.aqm[k] * 1000) for k in AQM_TIMES[self.policy]), self.aqm["ecn"]) if self.aqm else None
        queue = LineQueue(rate_bps=profile.rate_bps(direction), limit_bytes=profile.buffer_bytes(direction),
                          policy=self.policy, low_dscp=self.low_dscp, aqm=aqm, trace=profile.trace_path(direction),
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
                               "aqm": {k: v for k, v in self.describe().items() if k in AQM_FIELDS} or None,
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
