"""The kernel's AQM qdiscs as the bottleneck's queue: CoDel, FQ-CoDel, PIE and CAKE under tbf.

tbf gives every AQM the same rate limiter, so that what differs between two runs is the
queue alone: the AQM is tbf's child (class 1:1), holding the packets tbf has no tokens for
yet, and it measures their sojourn time as they leave it, as it would on a router whose
link drains it. CAKE's own shaper is therefore not used (`cake unlimited`): tbf shapes,
CAKE queues. Each qdisc's buffer is the profile's, in packets. `ecn: true` has the AQM mark
ECN-capable packets instead of dropping them (CAKE always does).

These qdiscs are modules of Debian's stock kernels, which the virtual clock's guest runs
(`--clock virtual`); a kernel without one refuses the run with the reason. Each run's
meta.json keeps the qdisc's options as the kernel reports them (`tc -j qdisc show`), not
as asked.
"""
from __future__ import annotations

import json
import os

from links.shapers import Queue
from links.shapers.tbf import Tbf
from machine.errors import UserError

# Per qdisc: its parameters (scenario field → (tc keyword, unit, default)) as RFC 8289,
# RFC 8290, RFC 8033 and CAKE's defaults give them. CAKE's `rtt` sets its target and
# interval together (target = rtt / 20).
QDISCS: dict[str, dict[str, tuple[str, str, float]]] = {
    "codel": {"target_ms": ("target", "ms", 5.0), "interval_ms": ("interval", "ms", 100.0)},
    "fq_codel": {"target_ms": ("target", "ms", 5.0), "interval_ms": ("interval", "ms", 100.0)},
    "pie": {"target_ms": ("target", "ms", 15.0), "tupdate_ms": ("tupdate", "ms", 15.0)},
    "cake": {"rtt_ms": ("rtt", "ms", 100.0)},
}


def marks(qdiscs: list[dict]) -> int:
    """ECN marks of the AQM, from `tc -s -j qdisc show`'s objects (codel, fq_codel and pie
    count `ecn_mark`, CAKE per tin)."""
    total = 0
    for q in qdiscs:
        total += int(q.get("ecn_mark", 0) or 0)
        total += sum(int(t.get("ecn_marked_packets", 0) or 0) for t in q.get("tins", []) or [])
    return total


# Per qdisc: its counters of packets dropped because its buffer was full (`tc -s -j`), not
# by its control law. CAKE does not count them apart.
OVERFLOW_COUNTERS = {"codel": ("drop_overlimit",), "fq_codel": ("drop_overlimit", "drop_overmemory"),
                     "pie": ("overlimit",)}


def overflows(qdiscs: list[dict]) -> int:
    """Packets the AQMs among `qdiscs` dropped because their buffer was full."""
    return sum(int(q.get(key, 0) or 0) for q in qdiscs for key in OVERFLOW_COUNTERS.get(q.get("kind"), ()))


class KernelAqm(Tbf):
    """tbf at the profile's rate with the kernel's `qdisc` as its queue."""
    qdisc = ""

    def __init__(self, ecn: bool = False, **params: float):
        spec = QDISCS[self.qdisc]
        self.ecn = ecn or self.qdisc == "cake"
        self.params = {k: float(params.get(k, default)) for k, (_, _, default) in spec.items()}
        super().__init__(child=self.child_args(limit=None))

    def child_args(self, limit: tuple[int, int] | None) -> tuple[str, ...]:
        """The qdisc's tc arguments; `limit` its buffer (packets, bytes). CAKE bounds its
        memory instead (`memlimit`, counted as the kernel allocates it, so the profile's
        bytes hold fewer full-size packets there than its packet count says)."""
        args = [self.qdisc]
        if self.qdisc == "cake":
            args += ["unlimited", "besteffort"] + (["memlimit", str(limit[1])] if limit else [])
        elif limit:
            args += ["limit", str(limit[0])]
        for key, (word, unit, _) in QDISCS[self.qdisc].items():
            args += [word, f"{self.params[key]:g}{unit}"]
        if self.qdisc != "cake":
            args.append("ecn" if self.ecn else "noecn")
        return tuple(args)

    def child_for(self, profile, direction: str) -> tuple[str, ...]:
        """The AQM with the queue's buffer as its limit."""
        return self.child_args((profile.buffer_packets(direction), profile.buffer_bytes(direction)))

    def describe(self) -> dict:
        return {"kind": self.name, **self.params, "ecn": self.ecn}

    @classmethod
    def from_fields(cls, fields) -> "KernelAqm":
        """`{kind: codel, target_ms: 5, interval_ms: 100, ecn: false}` and the like."""
        spec = QDISCS[cls.qdisc]
        fields.unknown({"kind", "ecn", *spec})
        params = {k: fields.number(k, default, low=0.01, high=10000.0) for k, (_, _, default) in spec.items()}
        return cls(ecn=fields.flag("ecn", False), **params)

    def install(self, net, names, profile, hop, direction) -> Queue:
        from machine.capabilities import probe_qdisc
        if not probe_qdisc(self.qdisc):
            raise UserError(f"the {self.name} shaper needs the kernel's sch_{self.qdisc}, which this kernel "
                            f"({os.uname().release}) does not have; Debian's stock kernels do: run it on the "
                            "virtual clock (--clock virtual), whose guest runs one")
        queue = super().install(net, names, profile, hop, direction)
        shown = json.loads(net.host(queue.node).cmd(f"tc -j qdisc show dev {queue.intf}") or "[]")
        read_back = next((q.get("options", {}) for q in shown if q.get("kind") == self.qdisc), None)
        if read_back is None:
            raise UserError(f"{queue.node}:{queue.intf}: tc shows no {self.qdisc} under tbf after installing it")
        return Queue(node=queue.node, intf=queue.intf, direction=direction, hop=hop,
                     settings={**queue.settings, "shaper": self.name, "qdisc": self.qdisc,
                               "qdisc_options": read_back},
                     before=queue.before, after=queue.after)

    def counters(self, net, queue: Queue) -> dict[str, int]:
        """tbf's counters (its drops include the AQM's), the AQM's ECN marks and, where it
        counts them apart, its drops of a full buffer (the rest are its control law's)."""
        base = super().counters(net, queue)
        shown = json.loads(net.host(queue.node).cmd(f"tc -s -j qdisc show dev {queue.intf}") or "[]")
        aqm = [q for q in shown if q.get("kind") == self.qdisc]
        overflowed = {"overflowed": overflows(aqm)} if self.qdisc in OVERFLOW_COUNTERS else {}
        return {**base, "marked": marks(aqm), **overflowed}

    def set_rate(self, net, queue: Queue, rate_bps: float, burst_bytes: int, buffer_pkts: int) -> None:
        raise UserError(f"the {self.name} shaper does not change its rate during a run (tbf and htb do)")

