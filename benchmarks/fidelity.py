#!/usr/bin/env python3
"""Fidelity of the emulated paths: one `fidelity` measurement per profile, then a rate sweep.

Prints, per profile: RTT mean and p99 error against the configured RTT, goodput against
the payload-limited ideal, the delay element's lateness p50/p99/max, the CPU cores it
used, its drops and reorders. The sweep finds the highest rate at which a 20 ms path of
MTU-sized frames (offloads off, as in experiments) still delivers ≥ 95 % of the ideal
goodput with lateness p99 ≤ 1 ms. Run as root: sudo .venv/bin/python benchmarks/fidelity.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scenarios.emulator_check import measure  # noqa: E402
from links.profiles import LinkProfile, get_profile  # noqa: E402


def row(r: dict) -> str:
    late = (r["delay_lateness_us"] or [None])[0] or {}
    cores = (r.get("delay_cpu_cores") or [None])[0]
    return (f"{r['profile']:<14} rtt {r['rtt_mean_ms'] - r['rtt_configured_ms']:+6.3f} ms "
            f"(p99 {r['rtt_p99_ms'] - r['rtt_configured_ms']:+6.3f})  goodput {r['goodput_mbps']:8.2f} Mbit/s "
            f"= {100 * r['goodput_fraction']:5.1f} % of ideal  lateness p50/p99/max "
            f"{late.get('p50')}/{late.get('p99')}/{late.get('max')} us  cpu {cores} cores  "
            f"drops {r['delay_drops']}  reorders {r['delay_reorders']}  {'ok' if r['ok'] else 'NOT ok'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="dsl-fast,lte,geo-sat,gprs,lab-1g")
    parser.add_argument("--sweep-mbps", default="200,400,600,800,1000",
                        help="rates of the MTU-frame sweep (empty to skip)")
    args = parser.parse_args()
    for name in filter(None, args.profiles.split(",")):
        print(row(measure(get_profile(name), pings=200)), flush=True)
    best = None
    for rate in [float(x) for x in filter(None, args.sweep_mbps.split(","))]:
        profile = LinkProfile(name=f"mtu-{rate:g}M", down_mbps=rate, up_mbps=rate, rtt_ms=20, buffer_ms=20)
        r = measure(profile, pings=100)
        late = (r["delay_lateness_us"] or [{}])[0] or {}
        holds = r["goodput_fraction"] >= 0.95 and (late.get("p99") or 0) <= 1000 and r["delay_drops"] == 0
        print(row(r) + f"  target {'holds' if holds else 'missed'}", flush=True)
        if holds:
            best = rate
    if args.sweep_mbps:
        print(f"highest swept rate with MTU frames meeting goodput >= 95 % and lateness p99 <= 1 ms: "
              f"{best if best is not None else 'none'} Mbit/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
