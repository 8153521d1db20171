"""What a QUIC sender did, from its server's qlog (wire/qlog.py): where its slow start
ended, at what window, and whether packets were already being lost; and its window over
time. The wire shows none of this (QUIC is encrypted); the qlog is the sender's own record,
written only when a run asks for it (the competing workload's `qlog`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from wire import qlog

MAX_POINTS = 2000


def slow_start_end(server_line: dict) -> str:
    """How the server's line says the connection left slow start: "hint" (Blitzstart started
    in congestion avoidance), "delay" (HybridSlowStart) or "loss"."""
    if server_line.get("hint_applied"):
        return "hint"
    return "delay" if server_line.get("hystart_exit") else "loss"


def sender_trace(path: Path, start_unix_s: float, origin_ts: float, ended_by: str) -> dict[str, Any]:
    """The sender's slow-start exit and cwnd series, times in seconds from `origin_ts`
    (unix seconds; the connection's qlog counts from its `start_unix_s`).

    The exit is the first state with ssthresh; `exit.by` is `ended_by` (slow_start_end);
    `exit.lost_before` counts packets declared lost that had been sent before the exit:
    drops in slow start, which a delay exit came too late to prevent."""
    _, events = qlog.read(path)
    shift = start_unix_s - origin_ts
    states = qlog.recovery_states(events)
    lost = qlog.lost_packets(events)
    exit_state = next((s for s in states if s.get("ssthresh") is not None), None)
    exit_block: Optional[dict[str, Any]] = None
    if exit_state is not None:
        t_exit = exit_state["time_ms"]
        exit_block = {"t_s": round(shift + t_exit / 1e3, 6), "cwnd_bytes": exit_state.get("congestion_window"),
                      "by": ended_by,
                      "latest_rtt_ms": exit_state.get("latest_rtt"), "min_rtt_ms": exit_state.get("min_rtt"),
                      "lost_before": sum(1 for p in lost if p["sent_ms"] is not None and p["sent_ms"] < t_exit)}
    with_cwnd = [s for s in states if "congestion_window" in s]
    stride = max(1, -(-len(with_cwnd) // MAX_POINTS))
    kept = with_cwnd[::stride]
    return {"exit": exit_block, "lost_packets": len(lost),
            "cwnd": {"t": np.round([shift + s["time_ms"] / 1e3 for s in kept], 6).tolist(),
                     "bytes": [s["congestion_window"] for s in kept], "stride": stride}}
