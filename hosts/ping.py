"""Round-trip times with ping, for the fidelity check and every network a campaign builds."""
from __future__ import annotations

import re
import statistics

# A base RTT is what was configured when its mean is within max(0.5 ms, 1 %) of it.
RTT_TOLERANCE_MS = 0.5
RTT_TOLERANCE_REL = 0.01
# A default ping on the wire: 56 + ICMP 8 + IPv4 20 + Ethernet 14 bytes.
PING_FRAME_BYTES = 98


def rtt_matches(measured_ms: float, configured_ms: float) -> bool:
    return abs(measured_ms - configured_ms) <= max(RTT_TOLERANCE_MS, RTT_TOLERANCE_REL * configured_ms)


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
    return {"rtt_configured_ms": configured_ms, "rtt_expected_ms": round(configured_ms + queued_ms, 3),
            "rtt_mean_ms": round(exact["avg"] if exact else statistics.fmean(rtts), 3),
            "rtt_p99_ms": round(percentile(rtts, 99), 3),
            "rtt_min_ms": round(exact["min"] if exact else min(rtts), 3), "rtt_samples": len(rtts)}


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
