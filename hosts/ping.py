"""Round-trip times with ping, for the fidelity check and every network a campaign builds."""
from __future__ import annotations

import re
import statistics


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def ping_rtts(node, ip: str, count: int, interval_s: float, size: int | None = None) -> list[float]:
    """RTTs in ms of `count` pings from `node` to `ip` (the answered ones)."""
    size_arg = f" -s {size}" if size is not None else ""
    out = node.cmd(f"ping -n -c {count} -i {interval_s} -W 5{size_arg} {ip}")
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", out)]


def rtt_figures(rtts: list[float], configured_ms: float) -> dict:
    return {"rtt_configured_ms": configured_ms, "rtt_mean_ms": round(statistics.fmean(rtts), 3),
            "rtt_p99_ms": round(percentile(rtts, 99), 3), "rtt_min_ms": round(min(rtts), 3),
            "rtt_samples": len(rtts)}


def path_rtt(node, ip: str, configured_ms: float, samples: int = 20) -> dict:
    """Base RTT of a freshly built path: one warm-up ping, then `samples` spaced so they
    never queue behind each other. Recorded in every run's meta.json."""
    ping_rtts(node, ip, 1, 0.2)
    rtts = ping_rtts(node, ip, samples, max(0.01, min(0.05, configured_ms / 10000)))
    if not rtts:
        raise RuntimeError(f"the path to {ip} does not answer pings")
    return rtt_figures(rtts, configured_ms)
