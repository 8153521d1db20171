"""Round-trip times with ping, for the fidelity check and every network a campaign builds."""
from __future__ import annotations

import math
import re
import statistics

from machine.host import HostTiming

# A base RTT is what was configured when its mean is within max(0.5 ms, 1 %) of it.
RTT_TOLERANCE_MS = 0.5
RTT_TOLERANCE_REL = 0.01
# A base RTT's mean off by a tail: at most this many of its pings late (one stall holds up
# the pings due while it lasts: one or two at 10 ms spacing for stalls up to 15 ms), or
# this share of them.
PING_TAIL_MIN, PING_TAIL_SHARE = 2, 0.1
# A default ping on the wire: 56 + ICMP 8 + IPv4 20 + Ethernet 14 bytes.
PING_FRAME_BYTES = 98


def rtt_tolerance_ms(configured_ms: float) -> float:
    return max(RTT_TOLERANCE_MS, RTT_TOLERANCE_REL * configured_ms)


def rtt_matches(measured_ms: float, configured_ms: float) -> bool:
    return abs(measured_ms - configured_ms) <= rtt_tolerance_ms(configured_ms)


def late_tail(rtts: list[float], expected_ms: float, exact_mean_ms: float | None = None) -> dict:
    """The pings later than the tolerance allows and the mean of the others. A mean pulled off
    by one or two pings a host stall held up (a tail) is not a path whose delay is off (every
    ping): ping_tail_flags tells the two apart with the host's figures. The
    others' mean comes from ping's exact mean where given (printed samples are truncated,
    to whole ms from 100 ms on)."""
    tol = rtt_tolerance_ms(expected_ms)
    late = [r for r in rtts if r - expected_ms > tol]
    rest = len(rtts) - len(late)
    if not rest:
        rest_mean = None
    elif exact_mean_ms is None:
        rest_mean = statistics.fmean(r for r in rtts if r - expected_ms <= tol)
    else:
        rest_mean = (exact_mean_ms * len(rtts) - sum(late)) / rest
    return {"late": len(late), "late_max_ms": round(max(late, default=expected_ms) - expected_ms, 3),
            "rest_mean_ms": None if rest_mean is None else round(rest_mean, 3)}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def ping_output(node, ip: str, count: int, interval_s: float, size: int | None = None,
                timestamps: bool = False) -> str:
    """ping's output; `timestamps`: each answer prefixed with its arrival time (ping -D)."""
    size_arg = f" -s {size}" if size is not None else ""
    return node.cmd(f"ping -n{' -D' if timestamps else ''} -c {count} -i {interval_s} -W 5{size_arg} {ip}")


def ping_rtts(node, ip: str, count: int, interval_s: float, size: int | None = None) -> list[float]:
    """RTTs in ms of `count` pings from `node` to `ip` (the answered ones). ping prints each
    to 3 significant digits (whole milliseconds from 100 ms on); summary() is exact to 1 µs."""
    return samples(ping_output(node, ip, count, interval_s, size))


def samples(out: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", out)]


def timed_samples(out: str) -> list[tuple[float, float]]:
    """(arrival, Unix s; RTT, ms) of every answered ping of `ping -D` output."""
    return [(float(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"^\[([\d.]+)\].*?time=([\d.]+) ms", out, re.MULTILINE)]


def summary(out: str) -> dict[str, float] | None:
    """min/avg/max of ping's closing line ("rtt min/avg/max/mdev = a/b/c/d ms"), in µs steps."""
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    return {"min": float(m.group(1)), "avg": float(m.group(2)), "max": float(m.group(3))} if m else None


def rtt_figures(rtts: list[float], configured_ms: float, exact: dict[str, float] | None = None,
                queued_ms: float = 0.0) -> dict:
    """Mean, p99 and minimum of RTT samples; mean and minimum from ping's exact summary when
    given. Expected: the configured RTT plus the ping's time in the path's queues."""
    expected = round(configured_ms + queued_ms, 3)
    return {"rtt_configured_ms": configured_ms, "rtt_expected_ms": expected,
            "rtt_mean_ms": round(exact["avg"] if exact else statistics.fmean(rtts), 3),
            "rtt_p99_ms": round(percentile(rtts, 99), 3),
            "rtt_min_ms": round(exact["min"] if exact else min(rtts), 3), "rtt_samples": len(rtts),
            "rtt_late": late_tail(rtts, expected, exact["avg"] if exact else None)}


def path_rtt(node, ip: str, configured_ms: float, count: int = 20, queued_ms: float = 0.0) -> dict:
    """Base RTT of a freshly built path: one warm-up ping, then `count` spaced so they
    never queue behind each other. Recorded in every run's meta.json. `queued_ms`: the time
    a lone ping spends in the path's queues (Network.lone_frame_queue_ms)."""
    ping_output(node, ip, 1, 0.2)
    out = ping_output(node, ip, count, max(0.01, min(0.05, configured_ms / 10000)))
    rtts = samples(out)
    if not rtts:
        raise RuntimeError(f"the path to {ip} does not answer pings")
    return rtt_figures(rtts, configured_ms, summary(out), queued_ms)


def pair_rtts(net, rtts_ms: dict[tuple[int, int], float], count: int = 10) -> dict[str, dict]:
    """Base RTT of every (client i, server j) pair with a declared RTT of its own (a
    multi-RTT path: web sessions' hosts), each with `ok` = within the tolerance of the
    expected RTT (the drawn one plus the ping's time in the queues)."""
    n = net.names
    queued_ms = net.lone_frame_queue_ms(PING_FRAME_BYTES)
    out = {}
    for (i, j), rtt in sorted(rtts_ms.items()):
        fig = path_rtt(net.host(n.client(i)), n.server_ip(j), rtt, count, queued_ms)
        out[f"cl{i}-sv{j}"] = {**fig, "ok": rtt_matches(fig["rtt_mean_ms"], fig["rtt_expected_ms"])}
    return out


def ping_tail_flags(figures: dict, monitor: HostTiming | None) -> list[str]:
    """Why a base RTT's mean (rtt_figures) is off while the path is not: a tail
    of a few pings (PING_TAIL_MIN, or PING_TAIL_SHARE of them), each late by no more than
    the longest timer wake-up the monitor measured over the same window, and the other
    pings' mean as declared. The mean of 10-100 pings carries one stall of the host; the
    percentiles the other flags read do not. Empty: the host does not explain it."""
    tail = figures.get("rtt_late") or {}
    expected = figures["rtt_expected_ms"]
    if monitor is None or not tail.get("late") or tail.get("rest_mean_ms") is None:
        return []
    stall_ms = (monitor.timer_wakeup_us.get("max") or 0) / 1000
    few = tail["late"] <= max(PING_TAIL_MIN, math.ceil(PING_TAIL_SHARE * figures["rtt_samples"]))
    if not (few and tail["late_max_ms"] <= stall_ms + rtt_tolerance_ms(expected)
            and rtt_matches(tail["rest_mean_ms"], expected)):
        return []
    return [f"{tail['late']} of {figures['rtt_samples']} pings late by up to {tail['late_max_ms']:.1f} ms, "
            f"within the host's longest timer wake-up meanwhile ({stall_ms:.1f} ms; {monitor.describe()}); "
            f"the other pings' mean {tail['rest_mean_ms']} ms is as declared ({expected} ms): a host stall"]
