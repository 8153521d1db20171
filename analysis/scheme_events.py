"""A scheme's own decisions on the captures' time axis: the phase changes of Careful Resume
and HyStart++, Rapid Start's loss and the end of its recovery, SEARCH's and SUSS's exits
and SUSS's choice at each round's tail, as the run's record keeps them per connection
(meta.json `server_counters`, each scheme's log under its name, times from BPF's
CLOCK_MONOTONIC clock).

The run's `clock` (the monotonic and the wall clock read together) maps them onto the
captures' wall-clock time. Only a connection's decisions are shown, not its per-round
bookkeeping (Rapid Start's and SUSS's round starts, SEARCH's checks).
"""
from __future__ import annotations

from typing import Any, Optional

BOOKKEEPING = {"round", "check"}


def label(event: dict[str, Any]) -> Optional[str]:
    """What a logged event says, short (None: bookkeeping, not shown)."""
    if "new" in event:                                # a phase change (Careful Resume, HyStart++)
        return str(event["new"]).replace("_", " ")
    name = event.get("event")
    if name is None or name in BOOKKEEPING:
        return None
    if name == "tail":                                # SUSS's decision for the round
        return f"{event.get('growth')}x" if event.get("growth") else "SUSS off"
    return f"{name} ({event['why']})" if event.get("why") else str(name)


def connection_events(meta: dict[str, Any], start_s: float, end_s: float) -> list[tuple[float, str]]:
    """(seconds since `start_s`, label) of every logged decision of a connection of the
    run's server parts that falls within [start_s, end_s] of the captures' clock, in order.
    Empty for a run without a clock (recorded before it was kept) or without such logs."""
    clock = meta.get("clock")
    if not clock:
        return []
    offset = float(clock["realtime_s"]) - float(clock["monotonic_s"])
    out = []
    for counters in (meta.get("server_counters") or {}).values():
        for logs in (counters or {}).values() if isinstance(counters, dict) else ():
            if not isinstance(logs, list):
                continue
            for log in logs:
                for event in (log.get("events") or []) if isinstance(log, dict) else ():
                    text = label(event) if "t_ns" in event else None
                    at = event["t_ns"] / 1e9 + offset if text else None
                    if at is not None and start_s <= at <= end_s:
                        out.append((at - start_s, text))
    return sorted(out)
