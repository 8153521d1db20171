"""CoDel (RFC 8289) under tbf: drops, or with `ecn: true` marks, once packets' sojourn time
has stayed above `target_ms` (5) for an `interval_ms` (100), ever more often while it stays."""
from __future__ import annotations

from links.shapers.aqm import KernelAqm


class Codel(KernelAqm):
    name = qdisc = "codel"


SHAPER = Codel
