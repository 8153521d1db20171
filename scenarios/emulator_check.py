"""Fidelity check of one profile: does the emulator deliver the rate, delay and queue it
claims, and does it lose or reorder nothing of its own?

The emulator is judged by what it controls, measured with witnesses that do not adapt:
  - rate, each direction: a saturating UDP stream (1.5 × the rate) through the
    bottleneck; the link-layer bytes arriving at the receiver's interface per second
    (a least-squares slope over many readings) against the configured rate;
  - base RTT: ping on the idle path against the configured RTT;
  - queue: ping while each direction's queue is full, against the base RTT plus the
    buffer's drain time (limit − one frame) ÷ rate;
  - the delay element: its own drops and lateness, and the UDP stream's reordering.
A TCP flow's goodput is reported as information only: it measures TCP as much as the
emulator (spurious timeouts on GPRS, recovery bursts on satellite paths).
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from machine.errors import UserError
from hosts.apps import Iperf3Server, iperf3_reverse_client
from machine import host
from machine.host import HostTiming
from hosts.ping import (PING_FRAME_BYTES, percentile, ping_output, ping_rtts, ping_tail_flags, rtt_figures,
                        rtt_matches, samples, summary, timed_samples)
from hosts.process import NodeProcess
from links.hostfit import LATE_P99_US, EmulatorTuning, delay_flags, rate_flags, verdict
from topologies.network import Network
from links.profiles import LinkProfile
from links.shapers import Shaper
from wire.tcpip import ETH_HEADER

RATE_TOLERANCE = 0.01                 # delivered rate within 1 % of the configured one
QUEUE_TOLERANCE_FRAMES = 1.0          # loaded RTT within one frame's drain time (or the bucket's) …
QUEUE_TOLERANCE_REL = 0.02            # … + 2 % of the expected loaded RTT
FLOOD_FACTOR = 1.5                    # the UDP stream offers 1.5 × the rate: the queue stays full
UDP_PORT = 5211
DATAGRAM = 1472                       # one MTU-sized frame per datagram (1500-byte MTU)
FRAGMENTED_ABOVE_BPS = 200e6          # faster: 10-frame datagrams, so one process can saturate
MEASURE_FRAMES = 300                  # the rate is read over at least this many frames' time …
MEASURE_MIN_S = 3.0                   # … and at least this long
SAMPLES = 40                          # rx counter readings over that time
STEP_GUARD_S = 0.002                  # a delay step this close to a ping's round trip leaves it out
SATURATED_DROP_SHARE = 0.1            # a full queue drops ~1/3 of a 1.5x stream; less: not full


def _rx_bytes(node, intf: str) -> int:
    for line in node.cmd("cat /proc/net/dev").splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == intf:
            return int(counters.split()[0])
    raise RuntimeError(f"interface {intf} not found in {node.name}")


def slope_bps(samples: list[tuple[float, int]]) -> float:
    """Least-squares rate (bit/s) through (time, byte counter) readings: one reading's
    frame-sized quantisation no longer decides the figure."""
    t = np.array([s[0] for s in samples])
    b = np.array([s[1] for s in samples], dtype=float)
    return float(np.polyfit(t - t[0], b, 1)[0] * 8)


def flood(net: Network, prof: LinkProfile, direction: str, workdir: Path, pings_interval_s: float) -> dict:
    """Saturate `direction` with UDP; measure the delivered rate at the receiver and the RTT
    of pings that cross the full queue, judged against `prof` (the declared profile)."""
    n = net.names
    rate = prof.rate_bps(direction)
    frame = prof.mtu + ETH_HEADER
    frame_s = frame * 8 / rate
    limit = prof.buffer_bytes(direction)
    fill_s = limit * 8 / (rate * (FLOOD_FACTOR - 1)) + 2 * prof.rtt_s
    measure_s = max(MEASURE_MIN_S, MEASURE_FRAMES * frame_s)
    length = DATAGRAM * 10 if rate > FRAGMENTED_ABOVE_BPS else DATAGRAM
    # iperf3 -R: the server (sv1) sends to the client (down); without it the client sends (up).
    client, server = net.host(n.client(1)), net.host(n.server(1))
    receiver = client if direction == "down" else server
    receiver_intf = n.host_intf(receiver.name)
    srv = Iperf3Server(server, workdir, net.instance, port=UDP_PORT)
    # The stream outlasts the fill and the measurement; it ends by itself so that iperf3
    # exchanges the receiver's figures (reordering) in its report.
    total_s = 2 * fill_s + 2 + math.ceil(measure_s) + 2
    argv = ["iperf3", "-c", n.server_ip(1), "-p", str(UDP_PORT), "-u", "-b", f"{int(rate * FLOOD_FACTOR)}",
            "-l", str(length), "-t", f"{total_s:.1f}", "-J", *(["-R"] if direction == "down" else [])]
    cli = NodeProcess(client, argv, net.instance, f"udp flood {direction}", log_path=workdir / f"flood-{direction}.json")
    pinger = None
    try:
        _wait_until_dropping(net, direction, 2 * fill_s + 2)
        pinger = NodeProcess(client, ["ping", "-n", *(["-D"] if net.profile.has_delay_trace else []),
                                      "-i", f"{pings_interval_s}", "-w", str(math.ceil(measure_s)), "-W", "10",
                                      n.server_ip(1)], net.instance, "ping under load",
                             log_path=workdir / f"ping-loaded-{direction}.log")
        queue = net.queue(direction)
        before = net.shaper.counters(net, queue)
        host_before = net.monitor.snapshot() if net.monitor else None
        readings = []
        t_end = time.monotonic() + measure_s
        while time.monotonic() < t_end:
            readings.append((time.monotonic(), _rx_bytes(receiver, receiver_intf)))
            time.sleep(measure_s / SAMPLES)
        readings.append((time.monotonic(), _rx_bytes(receiver, receiver_intf)))
        delivered = slope_bps(readings)
        after = net.shaper.counters(net, queue)
        # The host over exactly the measured window: a burst of stalls there, not the
        # network's whole life, is what moves this direction's figures.
        window = host.interval(host_before, net.monitor.snapshot()) if host_before else None
        tbf = [q for q in net.tbf_settings() if q.get("direction") == direction]
        window_flags = delay_flags(window, None) + rate_flags(window, tbf)
        pinger.wait(timeout=measure_s + 30)
        loaded = (untraced(net, timed_samples(pinger.output())) if net.profile.has_delay_trace else
                  [float(x.split("time=")[1].split()[0]) for x in pinger.output().splitlines() if "time=" in x])
        if not cli.running():
            raise RuntimeError(f"the UDP stream ({direction}) ended before the measurement did")
        cli.wait(timeout=total_s + 30)
    finally:
        if pinger is not None:
            pinger.stop()
        cli.stop()
        srv.stop()
    try:
        text = cli.output()
        report = json.loads(text[text.index("{"):])      # after iperf3's warnings, if any
        # Reordering is counted per stream (the receiver's figures, also for the sender's report).
        out_of_order = sum(int(st["udp"]["out_of_order"]) for st in report["end"]["streams"])
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"the UDP stream ({direction}) failed: {cli.output()[-300:]}") from exc
    # A probe fits into the full queue only when a frame has just left: it waits for the
    # rest, (limit − one frame) ÷ rate. The shaper's bucket may run up to its burst ahead.
    expected_loaded = prof.rtt_ms + (limit - frame) * 8 / rate * 1000
    applied_burst = net.queue(direction).settings.get("burst_bytes") or prof.tbf_burst_bytes(direction)
    burst_s = applied_burst * 8 / rate
    # Full throughout: the queue kept dropping (a third of a 1.5x stream) the whole time. A
    # generator that could not keep up (CPU) would make the figures its own, not the link's.
    sent, dropped = after["sent_pkts"] - before["sent_pkts"], after["dropped"] - before["dropped"]
    return {"rate_bps": delivered, "rate_error": delivered / rate - 1, "measure_s": round(measure_s, 2),
            "saturated": dropped >= SATURATED_DROP_SHARE * sent, "queue_sent_pkts": sent, "queue_dropped_pkts": dropped,
            "datagram_bytes": length, "out_of_order": out_of_order, "host_flags": window_flags,
            "rtt_loaded_ms": round(statistics.fmean(loaded), 3) if loaded else None,
            "rtt_loaded_samples": len(loaded), "rtt_loaded_expected_ms": round(expected_loaded, 3),
            "queue_tolerance_ms": round(max(QUEUE_TOLERANCE_FRAMES * frame_s, burst_s) * 1000
                                        + QUEUE_TOLERANCE_REL * expected_loaded, 3)}


def untraced(net: Network, timed: list[tuple[float, float]]) -> list[float]:
    """RTT samples (arrival Unix s, ms) of a path whose delay steps (a delay trace), each
    less the extra delay of the step it was sent in: what the fixed path gave it. A sample
    whose round trip a step falls into is left out (its two halves had different steps)."""
    unix_to_mono = time.time() - time.monotonic()
    out = []
    for arrival, rtt_ms in timed:
        sent = arrival - unix_to_mono - rtt_ms / 1000
        if net.next_delay_step_s(sent) > rtt_ms / 1000 + STEP_GUARD_S:
            out.append(rtt_ms - (net.rtt_at_ms(sent) - net.profile.rtt_ms))
    return out


def _wait_until_dropping(net: Network, direction: str, timeout_s: float) -> None:
    """Block until the queue of `direction` drops: then it is full and stays full."""
    queue = net.queue(direction)
    start = net.shaper.counters(net, queue)["dropped"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if net.shaper.counters(net, queue)["dropped"] > start:
            return
    raise GeneratorStarved(f"the UDP stream did not fill the {direction} queue within {timeout_s:.0f} s")


class GeneratorStarved(RuntimeError):
    """The witness could not load the link: a verdict on the host, not a crash."""


def starved(prof: LinkProfile, direction: str, why: str) -> dict:
    """A flood's figures when its generator could not fill the queue (every check fails)."""
    return {"rate_bps": 0.0, "rate_error": -1.0, "measure_s": 0.0, "saturated": False, "queue_sent_pkts": 0,
            "queue_dropped_pkts": 0, "datagram_bytes": 0, "out_of_order": 0, "rtt_loaded_ms": None,
            "rtt_loaded_samples": 0, "rtt_loaded_expected_ms": None, "queue_tolerance_ms": None, "error": why,
            "host_flags": []}


def bulk_goodput_bps(net: Network, seconds: float, omit_s: float, workdir: Path) -> dict:
    """Downstream iperf3 TCP goodput at the receiver, warm-up omitted (information only)."""
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
        # Every second's rate, the omitted ones too, so a reader sees where the ramp ends.
        per_second = [round(iv["sum"]["bits_per_second"] / 1e6, 3) for iv in report["intervals"]]
        return {"goodput_bps": sum(iv["bytes"] for iv in counted) * 8 / seconds_counted,
                "retransmits": report["end"]["sum_sent"].get("retransmits"),
                "omitted_s": omit_s, "per_second_mbps": per_second}
    finally:
        server.stop()


def measure(profile: LinkProfile, *, delay_backend: str = "auto", pings: int = 200,
            workdir: Path | None = None, built: LinkProfile | None = None, tcp: bool = True,
            shaper: Shaper | None = None, tuning: EmulatorTuning | None = None,
            monitor_hog: tuple[int, int] | None = None) -> dict:
    """Run the fidelity check; returns the figures docs/design.md names (and more).

    `built`: the profile actually emulated when it differs from the one judged against
    (a test builds a path 5 % off and sees the check fail). Application logs and the delay
    element's counters go to `workdir`; without one to a temporary directory, removed after.
    """
    if (built or profile).is_trace or (built or profile).loss_down or (built or profile).loss_up:
        # A fixed rate's checks (rate within 1 %, every drop a full queue's) would misjudge a
        # trace link's varying rate and a lossy link's random drops.
        raise UserError(f"this check is for fixed-rate links: profile {profile.name} is a trace or lossy link "
                        "(a trace link's check is scenarios/trace_fidelity.py; a lossy fixed-rate link has none yet)")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="startlab-fidelity-") as tmp:
            return _measure(profile, built or profile, delay_backend, pings, Path(tmp), tcp, shaper, tuning, monitor_hog)
    return _measure(profile, built or profile, delay_backend, pings, Path(workdir), tcp, shaper, tuning, monitor_hog)


def _measure(profile: LinkProfile, built: LinkProfile, delay_backend: str, pings: int, workdir: Path,
             tcp: bool, shaper: Shaper | None, tuning: EmulatorTuning | None,
             monitor_hog: tuple[int, int] | None) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # The TCP count starts after slow start and its first loss recovery (information only).
    omit_s, seconds = max(2.0, 10 * profile.rtt_s), max(5.0, 20 * profile.rtt_s)
    floods = {}
    with Network(built, workdir, delay_backend=delay_backend, shaper=shaper, tuning=tuning,
                 monitor_hog=monitor_hog) as net:
        n = net.names
        client = net.host(n.client(1))
        # One warm-up ping, then the measured ones, spaced so they never queue behind each other.
        ping_rtts(client, n.server_ip(1), 1, 0.2)
        interval = max(0.01, min(0.05, profile.rtt_s / 10))
        traced = built.has_delay_trace
        before = net.monitor.snapshot() if net.monitor else None
        out = ping_output(client, n.server_ip(1), pings, interval, timestamps=traced)
        ping_window = host.interval(before, net.monitor.snapshot()) if net.monitor else None
        # A path whose delay steps: each sample less its step's extra delay, held to rtt_ms.
        rtts, exact = (untraced(net, timed_samples(out)), None) if traced else (samples(out), summary(out))
        for direction in ("down", "up"):
            # Loaded pings 5 per RTT, never faster than every 10 ms. One more try if the
            # stream could not keep the queue full (a busy machine starves the generator).
            for attempt in range(2):
                try:
                    floods[direction] = flood(net, profile, direction, workdir, max(0.01, min(0.2, profile.rtt_s / 5)))
                except GeneratorStarved as exc:
                    floods[direction] = starved(profile, direction, str(exc))
                floods[direction]["attempts"] = attempt + 1
                if floods[direction]["saturated"]:
                    break
        bulk = bulk_goodput_bps(net, seconds, omit_s, workdir) if tcp else None
        backend = net.delay_backend_name
        queued_ms = net.lone_frame_queue_ms(PING_FRAME_BYTES)
        queue_drops = net.queue_drops()
        shaper_name = net.shaper.describe()
        tuning = net.tuning
    delay_stats = net.delay_stats
    if len(rtts) < pings * (0.9 if built.has_delay_trace else 0.99):
        raise RuntimeError(f"only {len(rtts)} of {pings} pings were answered")
    result = judge(profile, backend, rtts, floods, bulk, delay_stats, queue_drops,
                   {"setup_s": net.timings.get("setup_s", 0), "teardown_s": net.timings.get("teardown_s", 0),
                    "wall_s": time.monotonic() - t0}, exact["avg"] if exact else None, queued_ms)
    result["shaper"] = shaper_name
    calibration = tuning.host if tuning else None
    # The base RTT's mean pulled off by a stall of the host while the pings ran is the host's.
    tail = ping_tail_flags(rtt_figures(rtts, profile.rtt_ms, exact, queued_ms), ping_window) \
        if not result["checks"]["rtt"] else []
    explain(result, profile, calibration, net.host_timing, net.host_flags() + tail)
    result["emulator_tuning"] = tuning.as_record() if tuning else None
    return result


def explain(result: dict, profile: LinkProfile, calibration: HostTiming | None, monitor: HostTiming | None,
            flags: list[str]) -> None:
    """Record the host's figures and, when a check failed, the host property that broke it:
    what the run's monitor flagged, else what the calibration predicted, else nothing known
    (then the emulator itself is suspect)."""
    prediction = verdict(profile, calibration) if calibration else None
    flags = flags + [f"while measuring {d}: {x}" for d, f in result["floods"].items()
                     for x in f.get("host_flags") or [] if x not in flags]
    result["host"] = {"calibration": _brief(calibration), "monitor": _brief(monitor), "flags": flags,
                      "verdict": prediction.as_record() if prediction else None}
    if result["ok"]:
        result["explanation"] = ""
        return
    failed = [k for k, v in result["checks"].items() if not v]
    starved_dirs = [d for d, f in result["floods"].items() if f.get("error") or not f["saturated"]]
    causes = list(flags)
    if starved_dirs:
        causes.append("the UDP generator could not fill the " + " and ".join(starved_dirs)
                      + " queue: the host lacks CPU for this rate")
    if prediction is not None and not prediction.ok:
        causes.append("predicted by the host calibration: " + prediction.reason)
    if not causes and monitor is not None:
        causes.append(f"no host cause measured ({monitor.describe()}): the emulator is suspect")
    result["explanation"] = f"{', '.join(failed)}: " + "; ".join(causes)


def _brief(timing: HostTiming | None) -> dict | None:
    return timing.brief() if timing is not None else None


def judge(profile: LinkProfile, backend: str | None, rtts: list[float], floods: dict, bulk: dict | None,
          delay_stats: list[dict], queue_drops: dict, timings: dict, rtt_exact_mean: float | None = None,
          queued_ms: float = 0.0) -> dict:
    """The figures and the verdict (pure: unit-tested on made-up measurements). The base RTT
    is the mean of ping's exact summary where given (each sample is printed in whole ms from
    100 ms on) and is held to the configured RTT plus `queued_ms`, the time a lone ping frame
    spends in the path's queues both ways (Network.lone_frame_queue_ms: its wire time in
    the delay line's queue, 1.05 ms on a T1, more than the tolerance there; none in tbf's)."""
    rtt_cfg = profile.rtt_ms
    rtt_expected = rtt_cfg + queued_ms
    rtt_mean = rtt_exact_mean if rtt_exact_mean is not None else statistics.fmean(rtts)
    ideal = profile.goodput_ideal_bps("down")
    delay_drops = sum(int(s.get("drops") or 0) for s in delay_stats)
    lateness = [s.get("lateness_us") or {} for s in delay_stats]
    late_p99 = max((x.get("p99") or 0 for x in lateness), default=0)
    checks = {
        "rate_down": floods["down"]["saturated"] and abs(floods["down"]["rate_error"]) <= RATE_TOLERANCE,
        "rate_up": floods["up"]["saturated"] and abs(floods["up"]["rate_error"]) <= RATE_TOLERANCE,
        "rtt": rtt_matches(rtt_mean, rtt_expected),
        "queue_down": _queue_ok(floods["down"]),
        "queue_up": _queue_ok(floods["up"]),
        "delay_drops": delay_drops == 0,
        "delay_lateness": late_p99 <= LATE_P99_US,
        "reordering": all(f["out_of_order"] == 0 for f in floods.values()),
    }
    result = {
        "profile": profile.name,
        "delay_backend": backend,
        "rtt_configured_ms": rtt_cfg,
        "rtt_expected_ms": round(rtt_expected, 3),
        "rtt_mean_ms": round(rtt_mean, 3),
        "rtt_p99_ms": round(percentile(rtts, 99), 3),
        "rtt_min_ms": round(min(rtts), 3),
        "rtt_samples": len(rtts),
        "rate_configured_mbps": profile.down_mbps,
        "rate_down_mbps": round(floods["down"]["rate_bps"] / 1e6, 4),
        "rate_up_configured_mbps": profile.up_mbps,
        "rate_up_mbps": round(floods["up"]["rate_bps"] / 1e6, 4),
        "rate_down_error": round(floods["down"]["rate_error"], 5),
        "rate_up_error": round(floods["up"]["rate_error"], 5),
        "rtt_loaded_down_ms": floods["down"]["rtt_loaded_ms"],
        "rtt_loaded_down_expected_ms": floods["down"]["rtt_loaded_expected_ms"],
        "rtt_loaded_up_ms": floods["up"]["rtt_loaded_ms"],
        "rtt_loaded_up_expected_ms": floods["up"]["rtt_loaded_expected_ms"],
        "udp_out_of_order": {d: f["out_of_order"] for d, f in floods.items()},
        "floods": floods,
        "goodput_mbps": round(bulk["goodput_bps"] / 1e6, 3) if bulk else None,
        "goodput_ideal_mbps": round(ideal / 1e6, 3),
        "goodput_fraction": round(bulk["goodput_bps"] / ideal, 4) if bulk else None,
        "tcp_retransmits": bulk["retransmits"] if bulk else None,
        "goodput_omitted_s": bulk.get("omitted_s") if bulk else None,
        "goodput_per_second_mbps": bulk.get("per_second_mbps") if bulk else None,
        "queue_drops": queue_drops,
        "delay_drops": delay_drops,
        "delay_reorders_seen": sum(int(s.get("reorders") or 0) for s in delay_stats),
        "delay_lateness_us": lateness,
        "delay_lateness_p99_us": late_p99,
        "delay_cpu_cores": [round(s["cpu_s"] / s["lifetime_s"], 3) if s.get("cpu_s") is not None
                            and s.get("lifetime_s") else None for s in delay_stats],
        **{k: round(v, 3) for k, v in timings.items()},
        "checks": checks,
    }
    result["ok"] = all(checks.values())
    return result


def _queue_ok(f: dict) -> bool:
    if f["rtt_loaded_ms"] is None or not f["saturated"]:
        return False
    return abs(f["rtt_loaded_ms"] - f["rtt_loaded_expected_ms"]) <= f["queue_tolerance_ms"]


def print_result(r: dict) -> None:
    """The verdict for people: each figure against what it should be."""
    mark = {True: "ok", False: "NOT ok"}
    c = r["checks"]
    print(f"profile {r['profile']} (delay: {r['delay_backend']})")
    print(f"  rate down  {r['rate_down_mbps']:.4g} of {r['rate_configured_mbps']:g} Mbit/s "
          f"({100 * r['rate_down_error']:+.2f} %, tolerance ±{100 * RATE_TOLERANCE:g} %)  {mark[c['rate_down']]}")
    print(f"  rate up    {r['rate_up_mbps']:.4g} of {r['rate_up_configured_mbps']:g} Mbit/s "
          f"({100 * r['rate_up_error']:+.2f} %)  {mark[c['rate_up']]}")
    print(f"  RTT idle   mean {r['rtt_mean_ms']} ms, p99 {r['rtt_p99_ms']} ms over {r['rtt_samples']} pings, "
          f"configured {r['rtt_configured_ms']} ms  {mark[c['rtt']]}")
    for d in ("down", "up"):
        f = r["floods"][d]
        if not f["saturated"]:
            print(f"  the UDP stream could not keep the {d} queue full ({f['queue_dropped_pkts']} drops of "
                  f"{f['queue_sent_pkts']} sent): the machine is too busy to measure that direction")
        print(f"  RTT {d:<4}   with the {d} queue full: {f['rtt_loaded_ms']} ms, expected "
              f"{f['rtt_loaded_expected_ms']} ± {f['queue_tolerance_ms']} ms  {mark[c['queue_' + d]]}")
    print(f"  delay element: drops {r['delay_drops']}, lateness p99 {r['delay_lateness_p99_us']} us "
          f"(≤ {LATE_P99_US})  {mark[c['delay_drops'] and c['delay_lateness']]}; UDP out of order "
          f"{r['udp_out_of_order']}  {mark[c['reordering']]}")
    if r["goodput_mbps"] is not None:
        print(f"  (information) TCP goodput {r['goodput_mbps']} of ideal {r['goodput_ideal_mbps']} Mbit/s "
              f"({100 * r['goodput_fraction']:.1f} %)")
        if r.get("goodput_per_second_mbps"):
            print(f"    each second, the first {r['goodput_omitted_s']:g} s not counted: "
                  f"{' '.join(f'{x:g}' for x in r['goodput_per_second_mbps'])} Mbit/s")
    host = r.get("host") or {}
    for what in ("calibration", "monitor"):
        if host.get(what):
            t = HostTiming.from_record(host[what])
            print(f"  host ({'before the check, CPUs idle and busy' if what == 'calibration' else 'during the check'}): "
                  f"{t.describe()}")
    print(f"  {'ok' if r['ok'] else 'NOT ok: ' + r.get('explanation', '')}")
