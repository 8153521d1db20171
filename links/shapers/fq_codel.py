"""FQ-CoDel (RFC 8290) under tbf: flows hashed into queues served by deficit round robin,
new flows first, each queue with CoDel's `target_ms` (5) and `interval_ms` (100)."""
from __future__ import annotations

from links.shapers.aqm import KernelAqm


class FqCodel(KernelAqm):
    name = qdisc = "fq_codel"


SHAPER = FqCodel
