"""PIE (RFC 8033) under tbf: a drop (or mark) probability steered every `tupdate_ms` (15)
toward a queueing delay of `target_ms` (15), the delay estimated from the departure rate."""
from __future__ import annotations

from links.shapers.aqm import KernelAqm


class Pie(KernelAqm):
    name = qdisc = "pie"


SHAPER = Pie
