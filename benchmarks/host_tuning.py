#!/usr/bin/env python3
"""The emulator tuned to this host against the fixed constants of the machine it was first
built on, side by side on the same machine in one run.

For every profile (default: all), `fidelity` twice, alternating: with the old constants
(delay line timer lead 80 µs / spin 100 µs, tbf bucket of 500 µs, at least 3 frames:
`fidelity --tuning fixed`) and with the parameters derived from this host's calibration
(`--tuning measured`). Prints per profile and tuning: the delay line's lateness p99, the
bottleneck's rate error each way, the verdict, and the host monitor's wake-up p99 and
steal during that check, so a difference between the two can be told from a change of the
host. Ends with the calibration and the verdict it gave each profile. Takes about a minute
per profile and tuning (gprs and geo-sat longer: their floods fill 32-frame and 1-BDP
queues at 384 kbit/s and 12 Mbit/s). Run as root:
  sudo .venv/bin/python benchmarks/host_tuning.py [--profiles dsl-fast,lte]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import host  # noqa: E402
from scenarios.emulator_check import measure  # noqa: E402
from links.hostfit import FIXED, tuning_for, verdict  # noqa: E402
from links.profiles import get_profile, load_profiles  # noqa: E402


def row(profile: str, tuning: str, r: dict) -> str:
    mon = (r.get("host") or {}).get("monitor") or {}
    wake = (mon.get("timer_wakeup_us") or {}).get("p99")
    steal = mon.get("steal_fraction")
    return (f"{profile:<20} {tuning:<8} lateness p99 {r['delay_lateness_p99_us']:>6} µs  rate down "
            f"{100 * r['rate_down_error']:+6.2f} %  up {100 * r['rate_up_error']:+6.2f} %  "
            f"{'ok' if r['ok'] else 'NOT ok':<6}  host during: wake-ups p99 {wake} µs, steal "
            f"{'?' if steal is None else f'{100 * steal:.0f} %'}"
            + ("" if r["ok"] else f"\n{'':<30}{r.get('explanation', '')[:300]}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=",".join(load_profiles()))
    parser.add_argument("--pings", type=int, default=100)
    args = parser.parse_args()
    calibration = host.current()
    measured = tuning_for(calibration)
    print(f"calibration: {calibration.describe()}")
    print(f"measured tuning: timer lead {measured.spin_lead_us} µs, spin up to {measured.spin_max_us} µs; "
          f"fixed: {FIXED.spin_lead_us} / {FIXED.spin_max_us} µs", flush=True)
    for name in filter(None, args.profiles.split(",")):
        profile = get_profile(name)
        for label, tuning in (("fixed", FIXED), ("measured", measured)):
            print(row(name, label, measure(profile, pings=args.pings, tuning=tuning)), flush=True)
        v = verdict(profile, calibration)
        print(f"{'':<20} prediction: {'fit' if v.ok else 'unfit: ' + v.reason[:200]}; tbf bucket "
              f"{v.tbf_bucket_frames or 'n/a (offload)'} frames against {profile.tbf_burst_bytes('down') // profile.frame_bytes} fixed",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
