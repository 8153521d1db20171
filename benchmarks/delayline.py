#!/usr/bin/env python3
"""Delay-line fidelity benchmark (a script that prints figures, not a test). Run as root:

    .venv/bin/python benchmarks/delayline.py [--delays-ms 10,20,50] [--rates-mbps 50,1000] [--seconds 3]

For each one-way delay: ping RTT error against 2 × delay (mean, p99), and for each rate a
TCP bulk transfer (iperf3, offloads on) behind a tbf of that rate on h1, reporting goodput,
the line's lateness (p50/p99/max), the CPU cores it used during the transfer, drops and
reorders. The network is h1 — core — h2 with the delay line in the core.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hosts.delayline.line_net import H2_IP, line_net          # noqa: E402
from topologies import delay                                   # noqa: E402
from topologies.shell import check_cmd                         # noqa: E402

TBF_BURST_MTUS = 10          # smallest burst shaping exactly on this kernel (DESIGN.md)


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
            check_cmd(ln.h1, f"tc qdisc replace dev {p}h1-eth0 root tbf rate {int(rate_bps)}bit "
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays-ms", default="10,20,50")
    ap.add_argument("--rates-mbps", default="50,1000")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    if delay.delayline_binary() is None:
        sys.exit(f"delay line not built; {delay.BUILD_HINT}")
    for d in (float(x) / 1e3 for x in args.delays_ms.split(",")):
        for rate in [None] + [float(r) * 1e6 for r in args.rates_mbps.split(",")]:
            print(json.dumps(one_case(d, rate, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
