"""A scheme's own decisions on the captures' time axis: the phase changes of Careful Resume
and HyStart++, Rapid Start's loss and the end of its recovery, SEARCH's and SUSS's exits
and SUSS's choice at each round's tail, as the run's record keeps them per connection
(TCP: meta.json `server_counters`, each scheme's log under its name, times from BPF's
CLOCK_MONOTONIC clock; QUIC: the measured connection's Careful Resume phases in the
metrics, on the wall clock).

The run's `clock` (the monotonic and the wall clock read together) maps them onto the
captures' wall-clock time. Only a connection's decisions are shown, not its per-round
bookkeeping (Rapid Start's and SUSS's round starts, SEARCH's checks).
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

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


def _bpf_events(meta: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every event of every connection log of the run's server parts (TCP: the logs its BPF
    schemes keep, under the scheme's name in each part's counters)."""
    parts = (c for c in (meta.get("server_counters") or {}).values() if isinstance(c, dict))
    logs = (log for part in parts for logs in part.values() if isinstance(logs, list)
            for log in logs if isinstance(log, dict))
    return (event for log in logs for event in log.get("events") or [])


def decisions(meta: dict[str, Any], metrics: dict[str, Any]) -> list[tuple[float, str]]:
    """(wall-clock seconds, label) of every decision the run's server parts logged: TCP's
    from BPF's monotonic clock mapped by the run's `clock` (none without it: runs recorded
    before it was kept), QUIC's from the measured connection's server line, whose Careful
    Resume phases carry wall-clock times (`endpoint.careful_resume` in the metrics)."""
    out = []
    clock = meta.get("clock")
    if clock:
        offset = float(clock["realtime_s"]) - float(clock["monotonic_s"])
        out += [(e["t_ns"] / 1e9 + offset, text) for e in _bpf_events(meta)
                if "t_ns" in e and (text := label(e))]
    quic = ((metrics.get("short") or {}).get("endpoint") or {}).get("careful_resume") or {}
    out += [(float(e["t_unix_s"]), text) for e in quic.get("events") or [] if (text := label(e))]
    return out


def connection_events(meta: dict[str, Any], metrics: dict[str, Any], start_s: float,
                      end_s: float) -> list[tuple[float, str]]:
    """(seconds since `start_s`, label) of the run's logged decisions that fall within
    [start_s, end_s] of the captures' clock (the measured connection's), in order."""
    return sorted((at - start_s, text) for at, text in decisions(meta, metrics) if start_s <= at <= end_s)
