"""CAKE under tbf, its own shaper off (`unlimited`, `besteffort`): per-flow fair queueing
with COBALT (CoDel and BLUE) on each flow, tuned by `rtt_ms` (100; target = rtt / 20);
it marks ECN-capable packets."""
from __future__ import annotations

from links.shapers.aqm import KernelAqm


class Cake(KernelAqm):
    name = qdisc = "cake"


SHAPER = Cake
