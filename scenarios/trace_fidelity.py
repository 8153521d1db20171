"""`fidelity` of a trace link: does each direction deliver at its trace's opportunities?

A fixed rate's checks (emulator_check.py: rate within 1 %, loaded RTT of a full buffer) do
not apply to a link whose rate changes every millisecond. For each direction that follows a
trace, a UDP flood at 1.5 × the trace's busiest 100 ms keeps the bottleneck backlogged, and
a capture at the receiver gives when each frame left the queue (its arrival less the one-way
delay). The checks (links/traces.py departures_against):
- every frame, in the order they left, at or after an opportunity no earlier frame used
  (none early; frames a stall held back read as late);
- release lateness p99 within the delay element's tolerance;
- while backlogged, frames per 100 ms equal to the trace's opportunities then;
- no reordering; no drop in the delay element itself;
- random loss (loss_down / loss_up) within 4 standard deviations of its probability.
A direction at a fixed rate in a trace profile is not judged here (`fidelity` of a rate
profile is).
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from hosts.apps import Iperf3Server
from hosts.capture import Capture, drain
from hosts.process import NodeProcess
from links import traces
from links.hostfit import LATE_P99_US, EmulatorTuning
from links.profiles import LinkProfile
from links.delay import trace_epoch_s
from links.shapers import Shaper
from links.shapers.delayline import DelayLineQueue
from topologies.network import Network
from wire.pcap import udp_datagrams
from wire.tcpip import ETH_HEADER

FLOOD_FACTOR = 1.5           # × the trace's busiest 100 ms
WINDOW_S = 0.1
MEASURE_S = 4.0              # the flood runs this long once the queue drops
SETTLE_S = 0.3               # the backlog's edges left out of the per-window count
UDP_PORT = 5213
DATAGRAM = 1472              # one MTU-sized frame per datagram (1500-byte MTU)
LOSS_SIGMAS = 4.0


def measure_trace(profile: LinkProfile, *, delay_backend: str = "auto", workdir: Path | None = None,
                  shaper: Shaper | None = None, tuning: EmulatorTuning | None = None) -> dict:
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="startlab-fidelity-") as tmp:
            return measure_trace(profile, delay_backend=delay_backend, workdir=Path(tmp), shaper=shaper, tuning=tuning)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    directions = {}
    with Network(profile, workdir, delay_backend=delay_backend, shaper=shaper, tuning=tuning) as net:
        for direction in ("down", "up"):
            path = profile.trace_path(direction)
            if path is not None:
                directions[direction] = _flood(net, profile, direction, traces.read(path), workdir)
    result = judge_trace(profile, directions, net.delay_stats)
    result["host"] = {"flags": net.host_flags(), "monitor": net.host_timing.brief() if net.host_timing else None}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    if not result["ok"]:
        failed = [k for k, ok in result["checks"].items() if not ok]
        causes = result["host"]["flags"] or ["no host cause measured: the emulator is suspect"]
        result["explanation"] = f"{', '.join(failed)}: " + "; ".join(causes)
    else:
        result["explanation"] = ""
    return result


def _flood(net: Network, prof: LinkProfile, direction: str, trace: traces.Trace, workdir: Path) -> dict:
    """Flood `direction` through its trace link; the departures judged against the trace."""
    n = net.names
    frame = prof.mtu + ETH_HEADER
    peak = float(trace.rates_bps(int(WINDOW_S * 1e3), frame).max())
    client, server = net.host(n.client(1)), net.host(n.server(1))
    sender_ip = n.server_ip(1) if direction == "down" else n.client_ip(1)
    receiver = client if direction == "down" else server
    pcap = workdir / f"trace-{direction}.pcap"
    capture = Capture(receiver, n.host_intf(receiver.name), pcap, net.instance, bpf_filter=f"udp and src host {sender_ip}")
    capture.wait_ready()
    srv = Iperf3Server(server, workdir, net.instance, port=UDP_PORT)
    queue = net.queue(direction)
    fill_s = prof.buffer_bytes(direction) * 8 / (peak * (FLOOD_FACTOR - 1)) + 2 * prof.rtt_s
    total_s = fill_s + MEASURE_S + 1
    argv = ["iperf3", "-c", n.server_ip(1), "-p", str(UDP_PORT), "-u", "-b", f"{int(peak * FLOOD_FACTOR)}",
            "-l", str(DATAGRAM), "-t", f"{total_s:.1f}", "-J", *(["-R"] if direction == "down" else [])]
    cli = NodeProcess(client, argv, net.instance, f"udp flood {direction}", log_path=workdir / f"trace-flood-{direction}.json")
    try:
        backlog_from = _dropping_since(lambda: DelayLineQueue.queue_stats(net, queue), queue.direction, fill_s + 2)
        cli.wait(timeout=total_s + 30)
        flood_end = time.time()
        stats = DelayLineQueue.queue_stats(net, queue)
    finally:
        cli.stop()
        srv.stop()
        drain([capture])
        capture_stats = capture.stop()
    text = cli.output()
    try:
        report = json.loads(text[text.index("{"):])
        out_of_order = sum(int(st["udp"]["out_of_order"]) for st in report["end"]["streams"])
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"the UDP stream ({direction}) failed: {text[-300:]}") from exc
    epoch_s = trace_epoch_s(stats)
    one_way_s = prof.one_way_delay_s(n.routers - 1) * (n.routers - 1)
    arrivals = np.array([d.ts for d in udp_datagrams(pcap) if d.length == DATAGRAM])
    backlogged = (backlog_from - epoch_s + SETTLE_S, flood_end - 1 - epoch_s - SETTLE_S)
    departures = traces.departures_against(trace, arrivals - one_way_s - epoch_s, backlogged, WINDOW_S)
    arrived = stats["enqueued"] + stats["dropped"]
    return {"trace": str(prof.trace_path(direction)), "flood_bps": peak * FLOOD_FACTOR, "out_of_order": out_of_order,
            "departures": departures, "backlogged_s": [round(x, 3) for x in backlogged],
            "random_drops": stats.get("random_drops", 0), "arrivals": arrived, "loss": prof.loss(direction),
            "capture": capture_stats}


def _dropping_since(queue_stats, direction: str, timeout_s: float) -> float:
    """Wait until the queue drops for want of room (then it is full and, at 1.5 × the
    busiest 100 ms, stays backlogged); the time (realtime) it was first seen doing so. A
    random loss is no sign of a full queue: it is counted apart (`random_drops`)."""
    def full_drops() -> int:
        q = queue_stats()
        return q["dropped"] - q.get("random_drops", 0)
    start = full_drops()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if full_drops() > start:
            return time.time()
    raise RuntimeError(f"the UDP stream did not fill the {direction} queue within {timeout_s:.0f} s")


def judge_trace(profile: LinkProfile, directions: dict[str, dict], delay_stats: list[dict]) -> dict:
    """The checks above on the measured figures (pure)."""
    checks: dict[str, bool] = {}
    for d, f in directions.items():
        dep = f["departures"]
        checks[f"opportunities_{d}"] = dep["overdrawn"] == 0
        checks[f"per_interval_{d}"] = dep["windows"] > 0 and dep["window_mismatch_max"] == 0
        checks[f"lateness_{d}"] = dep["lateness_p99_us"] is not None and dep["lateness_p99_us"] <= LATE_P99_US
        checks[f"reordering_{d}"] = f["out_of_order"] == 0
        if f["loss"] or f["random_drops"]:
            p, n = f["loss"], max(1, f["arrivals"])
            sigma = math.sqrt(max(p * (1 - p), 1e-12) / n)
            checks[f"loss_{d}"] = abs(f["random_drops"] / n - p) <= LOSS_SIGMAS * sigma
    checks["delay_drops"] = sum(int(s.get("drops") or 0) for s in delay_stats) == 0
    return {"profile": profile.name, "kind": "trace", "directions": directions, "checks": checks,
            "ok": bool(checks) and all(checks.values())}


def print_trace_result(r: dict) -> None:
    mark = {True: "ok", False: "NOT ok"}
    c = r["checks"]
    print(f"profile {r['profile']} (trace link)")
    for d, f in r["directions"].items():
        dep = f["departures"]
        print(f"  {d:<4} {Path(f['trace']).name}: {dep['frames']} frames, {dep['overdrawn']} beyond the "
              f"opportunities  {mark[c['opportunities_' + d]]}")
        print(f"       per {int(WINDOW_S * 1e3)} ms while backlogged ({dep['windows']} windows): frames = "
              f"opportunities ±{dep['window_mismatch_max']}  {mark[c['per_interval_' + d]]}")
        print(f"       release lateness p50 {dep['lateness_p50_us']:.0f} µs, p99 {dep['lateness_p99_us']:.0f} µs "
              f"(≤ {LATE_P99_US})  {mark[c['lateness_' + d]]}; out of order {f['out_of_order']}  "
              f"{mark[c['reordering_' + d]]}")
        if "loss_" + d in c:
            print(f"       random loss {f['random_drops']} of {f['arrivals']} ({f['random_drops'] / max(1, f['arrivals']):.4f}, "
                  f"configured {f['loss']})  {mark[c['loss_' + d]]}")
    print(f"  delay element drops  {mark[c['delay_drops']]}")
    print(f"  {'ok' if r['ok'] else 'NOT ok: ' + r.get('explanation', '')}")
