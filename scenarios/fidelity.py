"""Fidelity check of one profile: does the emulated path deliver the RTT and rate it claims?

Builds the path, measures base RTT with ping and bulk downstream goodput with iperf3
through the bottleneck, reads the delay element's own drop counter, and judges:
RTT mean within max(0.5 ms, 1 %) of the configured RTT, goodput ≥ 98 % of the
payload-limited ideal, zero drops in the delay element.
"""
from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from hosts.apps import Iperf3Server, iperf3_reverse_client
from topologies.network import Network
from topologies.profiles import LinkProfile

RTT_TOLERANCE_MS = 0.5
RTT_TOLERANCE_REL = 0.01
GOODPUT_MIN_FRACTION = 0.98


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def ping_rtts(client, server_ip: str, count: int, interval_s: float) -> list[float]:
    out = client.cmd(f"ping -n -c {count} -i {interval_s} -W 5 {server_ip}")
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", out)]


def bulk_goodput_bps(net: Network, seconds: float, omit_s: float, workdir: Path) -> dict:
    """Downstream iperf3 (server sends) goodput measured at the receiver, warm-up omitted."""
    n = net.names
    server = Iperf3Server(net.host(n.server(1)), workdir, net.instance)
    try:
        cli = iperf3_reverse_client(net.host(n.client(1)), n.server_ip(1), seconds, workdir, net.instance,
                                    omit_s=omit_s, interval_s=1)
        rc = cli.wait(timeout=seconds + omit_s + 30)
        cli.stop()
        if rc != 0:
            raise RuntimeError(f"iperf3 failed (exit {rc}): {cli.output()[-500:]}")
        report = json.loads(cli.output())
        # From the intervals, not iperf3's end summary: with --omit and -R its summary
        # divides all received bytes by the non-omitted time (over 100 % on deep buffers).
        counted = [iv["sum"] for iv in report["intervals"] if not iv["sum"].get("omitted")]
        seconds_counted = sum(iv["seconds"] for iv in counted)
        if seconds_counted <= 0:
            raise RuntimeError("iperf3 reported no measured interval")
        return {"goodput_bps": sum(iv["bytes"] for iv in counted) * 8 / seconds_counted,
                "retransmits": report["end"]["sum_sent"].get("retransmits")}
    finally:
        server.stop()


def measure(profile: LinkProfile, *, delay_backend: str = "auto", pings: int = 200,
            workdir: Path | None = None) -> dict:
    """Run the fidelity check; returns the figures DESIGN.md names (and a few more).

    Application logs and the delay element's counters go to `workdir`; without one they
    go to a temporary directory that is removed afterwards (the figures are returned).
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="startlab-fidelity-") as tmp:
            return _measure(profile, delay_backend, pings, Path(tmp))
    return _measure(profile, delay_backend, pings, Path(workdir))


def _measure(profile: LinkProfile, delay_backend: str, pings: int, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    rtt_cfg_ms = profile.rtt_ms
    # The count starts after slow start and its first loss recovery are over: data held
    # back in the receiver during a recovery reaches the application in one burst, so an
    # interval boundary inside a recovery would count it at several times the link rate
    # (geo-sat with 10 RTTs of warm-up read 108 % of the ideal goodput).
    omit_s = max(2.0, 20 * profile.rtt_s)
    seconds = max(8.0, 30 * profile.rtt_s)
    t0 = time.monotonic()
    with Network(profile, workdir, delay_backend=delay_backend) as net:
        n = net.names
        client = net.host(n.client(1))
        # One warm-up ping, then the measured ones, spaced so they never queue behind each other.
        ping_rtts(client, n.server_ip(1), 1, 0.2)
        interval = max(0.01, min(0.05, profile.rtt_s / 10))
        rtts = ping_rtts(client, n.server_ip(1), pings, interval)
        bulk = bulk_goodput_bps(net, seconds, omit_s, workdir)
        backend = net.delay_backend_name
        queue_drops = net.queue_drops()
    delay_stats = net.delay_stats
    if len(rtts) < pings * 0.99:
        raise RuntimeError(f"only {len(rtts)} of {pings} pings were answered")
    rtt_mean = statistics.fmean(rtts)
    ideal = profile.goodput_ideal_bps("down")
    delay_drops = sum(int(s.get("drops") or 0) for s in delay_stats)
    rtt_ok = abs(rtt_mean - rtt_cfg_ms) <= max(RTT_TOLERANCE_MS, RTT_TOLERANCE_REL * rtt_cfg_ms)
    goodput_ok = bulk["goodput_bps"] >= GOODPUT_MIN_FRACTION * ideal
    result = {
        "profile": profile.name,
        "delay_backend": backend,
        "rtt_configured_ms": rtt_cfg_ms,
        "rtt_mean_ms": round(rtt_mean, 3),
        "rtt_p99_ms": round(percentile(rtts, 99), 3),
        "rtt_min_ms": round(min(rtts), 3),
        "rtt_samples": len(rtts),
        "rate_configured_mbps": profile.down_mbps,
        "goodput_mbps": round(bulk["goodput_bps"] / 1e6, 3),
        "goodput_ideal_mbps": round(ideal / 1e6, 3),
        "goodput_fraction": round(bulk["goodput_bps"] / ideal, 4),
        "tcp_retransmits": bulk["retransmits"],
        "queue_drops": queue_drops,
        "delay_drops": delay_drops,
        "delay_reorders": sum(int(s.get("reorders") or 0) for s in delay_stats),
        "delay_lateness_us": [s.get("lateness_us") for s in delay_stats],
        "delay_cpu_s": [s.get("cpu_s") for s in delay_stats],
        "delay_cpu_cores": [round(s["cpu_s"] / s["lifetime_s"], 3) if s.get("cpu_s") is not None
                            and s.get("lifetime_s") else None for s in delay_stats],
        "setup_s": round(net.timings.get("setup_s", 0), 3),
        "teardown_s": round(net.timings.get("teardown_s", 0), 3),
        "wall_s": round(time.monotonic() - t0, 2),
        "checks": {"rtt": rtt_ok, "goodput": goodput_ok, "delay_drops": delay_drops == 0},
    }
    result["ok"] = all(result["checks"].values())
    return result
