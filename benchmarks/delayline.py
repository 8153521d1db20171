#!/usr/bin/env python3
"""Delay-line fidelity benchmark (a script that prints figures, not a test). Run as root:

    .venv/bin/python benchmarks/delayline.py [--delays-ms 10,20,50] [--rates-mbps 50,1000] [--seconds 3]
    .venv/bin/python benchmarks/delayline.py --what queue [--queue-rates-mbps 1.5,10,50] [--seconds 4]
    .venv/bin/python benchmarks/delayline.py --what pairs [--pair-delays-ms 5,100] [--delays-ms 20]
    .venv/bin/python benchmarks/delayline.py --what trace [--trace-rates-mbps 50,300,1000] [--seconds 4]

delay (default): for each one-way delay, ping RTT error against 2 × delay (mean, p99), and
for each rate a TCP bulk transfer (iperf3, offloads on) behind a tbf of that rate on h1,
reporting goodput, the line's lateness (p50/p99/max), the CPU cores it used during the
transfer, drops and reorders.
queue: the line's own bottleneck at each rate under a numbered UDP flood at 1.5 × the rate:
delivered rate at h2's interface (rx bytes with Ethernet headers, least-squares slope) and
from the datagrams' kernel timestamps, each as an error against the rate; datagrams lost
against the queue's drop counter; reordering; the line's lateness over the flood.
pairs: one UDP probe per pair, all at once, each pair with its own delay (plus one pair at
the default delay): one-way delay error (mean, p99) per pair, reordering within a pair.
trace: the bottleneck drained by a constant trace at each rate (--trace-rates-mbps
50,300,1000), with MTU frames (a UDP flood: delivered rate, each departure against its
opportunity, own drops) and with GSO frames (TCP goodput against the rate).
The network is h1 — core — h2 with the delay line in the core.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from links.delayline.line_net import H1, H2, H2_IP, line_net  # noqa: E402
from links import delay                                   # noqa: E402
from machine.shell import check_cmd                         # noqa: E402

# The sender's own rate limit in this benchmark, not an emulated bottleneck: a bucket large
# enough that tbf's late wake-ups never limit what the delay line is measured with.
TBF_BURST_MTUS = 10


def ping_rtts_ms(ln, count: int) -> list[float]:
    out = ln.h1.cmd(f"ping -c {count} -i 0.01 {H2_IP}")
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def tcp_goodput(ln, seconds: float) -> dict:
    server = ln.h2.popen(["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        run = ln.h1.popen(["iperf3", "-c", H2_IP, "-p", "5299", "-t", str(seconds), "-J"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = run.communicate(timeout=seconds + 30)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    end = json.loads(out)["end"]
    return {"goodput_mbps": end["sum_received"]["bits_per_second"] / 1e6,
            "retransmits": end["sum_sent"]["retransmits"]}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def one_case(delay_s: float, rate_bps: float | None, seconds: float) -> dict:
    with line_net(offload=True) as ln:
        p = ln.instance.prefix
        if rate_bps:
            burst = TBF_BURST_MTUS * 1514
            limit = int(1.5 * rate_bps / 8 * 2 * delay_s) + burst
            check_cmd(ln.h1, f"tc qdisc replace dev {p}{H1}-eth0 root tbf rate {int(rate_bps)}bit "
                             f"burst {burst} limit {limit}")
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, delay_s, delay_s, rate_bps, rate_bps,
                      Path(f"/tmp/{p}-delaybench"), ln.instance)
        row: dict = {"delay_ms": delay_s * 1e3, "rate_mbps": rate_bps / 1e6 if rate_bps else None}
        if rate_bps is None:
            rtts = ping_rtts_ms(ln, 100)
            row.update(rtt_samples=len(rtts), rtt_mean_err_ms=sum(rtts) / len(rtts) - 2 * delay_s * 1e3,
                       rtt_p99_err_ms=pct(rtts, 0.99) - 2 * delay_s * 1e3)
            stats = element.stop()
        else:
            cpu0, t0 = delay.process_cpu_s(element.proc.pid), time.monotonic()
            row.update(tcp_goodput(ln, seconds))
            cpu1, t1 = delay.process_cpu_s(element.proc.pid), time.monotonic()
            row["cpu_cores"] = (cpu1 - cpu0) / (t1 - t0)
            stats = element.stop()
        row.update(lateness_us=stats["lateness_us"], drops=stats["drops"], reorders=stats["reorders"])
        return row


QUEUE_DELAY_S = 0.010


def queue_case(rate_bps: float, seconds: float) -> dict:
    """The line's bottleneck at `rate_bps` (droptail, 20 ms of buffer) under a 1.5 × flood."""
    from links.delayline.line_net import flood
    limit = max(10 * 1514, int(rate_bps / 8 * 0.02))
    with line_net() as ln:
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, QUEUE_DELAY_S, QUEUE_DELAY_S, rate_bps, rate_bps,
                      Path(f"/tmp/{ln.instance.prefix}-delaybench"), ln.instance,
                      queue_ab=delay.LineQueue(rate_bps, limit))
        try:
            before = element.snapshot()
            r = flood(ln, rate_bps, seconds)
            after = element.snapshot()
        finally:
            element.stop()
    f = delay.interval_figures(before, after)
    return {"rate_mbps": rate_bps / 1e6, "limit_bytes": limit,
            "iface_rate_err_pct": 100 * (r["iface"]["bps"] / rate_bps - 1),
            "timestamp_rate_err_pct": 100 * (r["steady"]["wire_bps"] / rate_bps - 1),
            "iface_window_s": r["iface"]["seconds"], "sent": r["expected"], "lost": r["lost"],
            "queue_drops": f["queue_drops"], "reordered": r["reordered"], "line_drops": f["drops"],
            "lateness_us": f["lateness_us"], "late_over_1ms": f["late_over_1ms"]}


def trace_case(rate_bps: float, seconds: float, gso: bool) -> dict:
    """The line's bottleneck drained by a constant trace of `rate_bps` (one MTU-sized frame
    per opportunity, links/traces.py). MTU frames: a numbered UDP flood at 1.5 × the rate,
    captured at h2; delivered rate, how far each departure is from its opportunity, the
    line's own drops and reordering. GSO (offloads on): a TCP bulk transfer, whose 64 KB
    frames each span ~43 opportunities; its goodput against the rate."""
    from links import traces
    from links.delayline.line_net import FLOOD_PAYLOAD, flood
    from wire.pcap import udp_datagrams
    trace = traces.constant(rate_bps * 1500 / 1514, 1.2)        # the rate in 1514-byte frames
    limit = max(10 * 1514, int(rate_bps / 8 * 0.02))
    work = Path(f"/tmp/startlab-trace-bench-{int(rate_bps)}-{int(gso)}")
    work.mkdir(parents=True, exist_ok=True)
    path = work / "constant.trace"
    path.write_text(trace.text())
    row: dict = {"rate_mbps": rate_bps / 1e6, "frames": "gso" if gso else "mtu", "limit_bytes": limit}
    with line_net(offload=gso) as ln:
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, QUEUE_DELAY_S, QUEUE_DELAY_S, rate_bps, rate_bps,
                      work / "line", ln.instance,
                      queue_ab=delay.LineQueue(rate_bps, limit, trace=path, opportunity_bytes=1514))
        try:
            before = element.snapshot()
            if gso:
                cpu0, t0 = delay.process_cpu_s(element.proc.pid), time.monotonic()
                row.update(tcp_goodput(ln, seconds))
                row["cpu_cores"] = (delay.process_cpu_s(element.proc.pid) - cpu0) / (time.monotonic() - t0)
                row["goodput_of_rate"] = row["goodput_mbps"] * 1e6 / rate_bps
            else:
                pcap = work / "rx.pcap"
                dump = ln.h2.popen(["tcpdump", "-i", f"{ln.instance.prefix}{H2}-eth0", "-s", "64", "-n", "-U",
                                    "-B", "65536", "--time-stamp-precision", "nano", "-w", str(pcap), "udp"],
                                   stderr=subprocess.DEVNULL)
                try:
                    time.sleep(1.0)
                    r = flood(ln, rate_bps, seconds)
                finally:
                    dump.terminate()
                    dump.wait(10)
                row.update(iface_rate_err_pct=100 * (r["iface"]["bps"] / rate_bps - 1), sent=r["expected"],
                           lost=r["lost"], reordered=r["reordered"])
            after = element.snapshot()
        finally:
            element.stop()
    f = delay.interval_figures(before, after)
    q = after["a_to_b"]["queue"]
    if not gso:
        rx = [d.ts for d in udp_datagrams(pcap) if d.length == FLOOD_PAYLOAD]
        dep = traces.departures_against(trace, np.asarray(rx) - QUEUE_DELAY_S - delay.trace_epoch_s(q),
                                        (1.5, seconds - 0.5))
        row.update(captured=dep["frames"], overdrawn=dep["overdrawn"], departure_late_p50_us=dep["lateness_p50_us"],
                   departure_late_p99_us=dep["lateness_p99_us"], window_mismatch_max=dep["window_mismatch_max"])
    row.update(queue_drops=f["queue_drops"], line_drops=f["drops"], line_lateness_us=f["lateness_us"])
    shutil.rmtree(work, ignore_errors=True)
    return row


def pairs_case(pair_delays_s: list[float], default_s: float) -> list[dict]:
    """One probe per pair at once: pair k is 10.77.0.(100+k) → 10.77.0.(200+k) with the k-th delay."""
    from links.delayline.line_net import H1_IP
    table = {(f"10.77.0.{100 + k}", f"10.77.0.{200 + k}"): d for k, d in enumerate(pair_delays_s)}
    with line_net() as ln:
        for src, dst in table:
            ln.add_pair(src, dst)
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, default_s, default_s, 1e8, 1e8,
                      Path(f"/tmp/{ln.instance.prefix}-delaybench"), ln.instance, pair_delays_ab=table)
        flows = [(src, dst, d) for (src, dst), d in table.items()]
        flows.append((H1_IP, next(iter(table))[1], default_s))        # not in the table
        try:
            probes = [ln.start_probe(1500, 5, 5000, 5700 + k, src=src, dst=dst)
                      for k, (src, dst, _) in enumerate(flows)]
            results = [p.finish() for p in probes]
        finally:
            stats = element.stop()
    rows = []
    for (src, dst, d), r in zip(flows, results):
        owd = r["owd_us"]
        rows.append({"pair": f"{src}>{dst}", "delay_ms": d * 1e3, "received": r["received"],
                     "lost": r["lost"], "reordered": r["reordered"],
                     "mean_err_us": owd["mean"] - d * 1e6 if owd["mean"] is not None else None,
                     "min_err_us": owd["min"] - d * 1e6 if owd["min"] is not None else None,
                     "p99_err_us": owd["p99"] - d * 1e6 if owd["p99"] is not None else None,
                     "line_lateness_us": stats["lateness_us"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="delay", help="comma-separated: delay, queue, pairs, trace")
    ap.add_argument("--delays-ms", default="10,20,50")
    ap.add_argument("--rates-mbps", default="50,1000")
    ap.add_argument("--queue-rates-mbps", default="1.5,10,50")
    ap.add_argument("--pair-delays-ms", default="5,100")
    ap.add_argument("--trace-rates-mbps", default="50,300,1000")
    ap.add_argument("--seconds", type=float, default=None, help="transfer/flood length (3 s / 4 s)")
    args = ap.parse_args()
    if delay.delayline_binary() is None:
        sys.exit(f"delay line not built; {delay.BUILD_HINT}")
    what = set(args.what.split(","))
    if what - {"delay", "queue", "pairs", "trace"}:
        sys.exit(f"unknown --what {args.what!r}: use delay, queue, pairs, trace")
    delays = [float(x) / 1e3 for x in args.delays_ms.split(",")]
    if "delay" in what:
        for d in delays:
            for rate in [None] + [float(r) * 1e6 for r in args.rates_mbps.split(",")]:
                print(json.dumps(one_case(d, rate, args.seconds or 3.0)), flush=True)
    if "queue" in what:
        for rate in (float(r) * 1e6 for r in args.queue_rates_mbps.split(",")):
            print(json.dumps(queue_case(rate, args.seconds or 4.0)), flush=True)
    if "trace" in what:
        for rate in (float(r) * 1e6 for r in args.trace_rates_mbps.split(",")):
            for gso in (False, True):
                print(json.dumps(trace_case(rate, args.seconds or 4.0, gso)), flush=True)
    if "pairs" in what:
        pair_delays = [float(x) / 1e3 for x in args.pair_delays_ms.split(",")]
        for row in pairs_case(pair_delays, delays[0]):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
