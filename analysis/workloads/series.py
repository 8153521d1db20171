"""The competing workload's throughput series, one time base for every transport: both
flows' rolling one-RTT rates sampled from LEAD_S before the short flow's start (a plot shows
the long flow alone first) to one window after its last byte."""
from __future__ import annotations

from typing import Optional

import numpy as np

from analysis import flows

LEAD_S = 1.0
STEP_S = 0.005
MAX_SAMPLES = 5000


def sample_times(first: float, syn: float, end: float, rtt_s: float) -> np.ndarray:
    """The series' instants: every STEP_S (coarser when that gives more than MAX_SAMPLES),
    from LEAD_S before `syn` (never before the capture's `first` packet) to `end` + one RTT."""
    t0, t1 = max(first, syn - LEAD_S), end + rtt_s
    step = max(STEP_S, (t1 - t0) / MAX_SAMPLES)
    return np.arange(t0, t1 + step / 2, step)


def long_tcp(pk, long: Optional[tuple[int, int]], rtt_s: float, at: np.ndarray) -> tuple[np.ndarray, Optional[float]]:
    """The long TCP flow's rolling rate at `at`, and when it had started (flows.startup)."""
    mbps = flows.flow_rolling_mbps(pk, long[0] if long else None, long[1] if long else 0, rtt_s, at)
    if not long:
        return mbps, None
    first = float(pk["ts"][flows.flow_mask(pk, long[0], long[1])].min())
    return mbps, flows.startup(first, lambda t: flows.flow_rolling_mbps(pk, long[0], long[1], rtt_s, t), STEP_S)


def long_dip(before_bytes: int, during_bytes: int, syn: float, end: float) -> dict:
    """The long flow's rate over the LEAD_S before `syn` against its rate from `syn` to `end`
    (flows.dip), from the bytes it delivered in each."""
    return flows.dip(before_bytes * 8 / LEAD_S, during_bytes * 8 / max(end - syn, 1e-9))


def block(t: np.ndarray, syn: float, short_mbps: np.ndarray, long_mbps: np.ndarray, rtt_s: float,
          long_start: Optional[float]) -> dict:
    """The series as metrics.json keeps it: times from `syn`, rates in Mbit/s."""
    return {"t": np.round(t - syn, 6).tolist(), "short_mbps": np.round(short_mbps, 3).tolist(),
            "long_mbps": np.round(long_mbps, 3).tolist(), "window_s": rtt_s, "long_start": long_start}
