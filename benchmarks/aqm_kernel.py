#!/usr/bin/env python3
"""The delay line's AQMs beside the kernel's qdiscs: the same path and traffic through each,
in one stock-kernel guest on the virtual clock, so the figures are the same on any host.

For tbf's FIFO (the reference), then CoDel, PIE and FQ-CoDel, each as the kernel's qdisc
(under tbf's rate) and as the delay line's own queue (RFC 8289's, RFC 8033's and RFC 8290's
pseudocode):
  - the standing queue one bulk CUBIC flow builds on 20 Mbit/s, 40 ms, 200 packets
    (scenarios/standing_queue.py), without and with ECN: the queueing delay pings met
    (percentiles of RTT less 40 ms; behind FQ-CoDel the pings are a flow of their own, so
    they measure its isolation, not the bulk flow's queue), drops and marks over
    --pings × 50 ms (4 s);
  - the smoke scenario's competing run (cubic-iw10 fetching 200 KB on dsl-fast beside a
    CUBIC long flow) × --reps: the short flow's mean FCT and losses.
Then per AQM, the delay line's figures against the kernel's, with the bounds they are judged
by: median queueing delay within 2 ms (CoDel's control loop settles within a packet or two
of its target, PIE's around its own) and mean FCT within 5 % (the virtual clock's agreement
bound).

Run as root: sudo .venv/bin/python benchmarks/aqm_kernel.py [--kernel 6.12] [--reps 3]
[--queues fifo,codel,pie,fq_codel] [--pings 80] (about 12 min of wall time here for
fifo,codel,pie).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (queue, label, shaper as --shaper names it, ECN variant measured too)
SHAPERS = [("fifo", "tbf FIFO", "tbf", False),
           ("codel", "kernel CoDel", "codel", True), ("codel", "delay line CoDel", "delayline:codel", True),
           ("pie", "kernel PIE", "pie", True), ("pie", "delay line PIE", "delayline:pie", True),
           ("fq_codel", "kernel FQ-CoDel", "fq_codel", True),
           ("fq_codel", "delay line FQ-CoDel", "delayline:fq_codel", True)]
BASE_RTT_MS = 40.0
MEDIAN_BOUND_MS = 2.0
FCT_BOUND = 0.05


def with_ecn(cli: str):
    """The shaper `cli` names, marking instead of dropping."""
    from links import shapers
    kind, _, policy = cli.partition(":")
    cls = shapers.registry()[kind]
    return cls(policy, ecn=True) if policy else cls(ecn=True)


def shaper_block(cli: str) -> str:
    """The scenario's `shaper:` for `cli`."""
    kind, _, policy = cli.partition(":")
    return f"shaper:\n  kind: {kind}\n" + (f"  policy: {policy}\n" if policy else "")


def inside(out: Path, reps: int, queues: list[str], pings: int) -> None:
    """In the guest: every measurement, into out/result.json."""
    from links import shapers
    from links.profiles import LinkProfile
    from results.schema import META_FILE, METRICS_FILE
    from scenarios.standing_queue import standing_queue
    profile = LinkProfile(name="aqm-bench", down_mbps=20, up_mbps=20, rtt_ms=BASE_RTT_MS, buffer_pkts=200)
    smoke = (ROOT / "scenarios" / "smoke.yaml").read_text()
    result = {}
    for queue, label, cli, ecn in SHAPERS:
        if queue not in queues:
            continue
        row: dict = {}
        for marked in ([False, True] if ecn else [False]):
            shaper = with_ecn(cli) if marked else shapers.from_cli(cli)
            with tempfile.TemporaryDirectory(prefix="aqm-bench-") as tmp:
                sq = standing_queue(Path(tmp), profile, shaper, ecn=marked, pings=pings)
            row["ecn" if marked else "drop"] = {"queueing_ms": sq.queueing_ms(BASE_RTT_MS), "pings_lost": sq.pings_lost,
                                                "counters": sq.counters}
            print(label, "ECN" if marked else "", row["ecn" if marked else "drop"], flush=True)
        with tempfile.TemporaryDirectory(prefix="aqm-bench-") as tmp:
            scenario = Path(tmp) / "smoke-aqm.yaml"
            scenario.write_text(smoke + shaper_block(cli))
            camp = Path(tmp) / "campaign"
            subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(scenario), "--variants", "cubic-iw10",
                            "--reps", str(reps), "--out", str(camp)], check=False, capture_output=True)
            runs = [(json.loads(m.read_text()), json.loads((m.parent / METRICS_FILE).read_text()))
                    for m in sorted(camp.glob(f"*/{META_FILE}")) if (m.parent / METRICS_FILE).exists()]
        row["fct_ms"] = [round(metrics["short"]["fct_s"] * 1e3, 3) for _, metrics in runs]
        row["short_lost"] = [metrics["short"]["lost_pkts"] for _, metrics in runs]
        print(label, "FCT", row["fct_ms"], "lost", row["short_lost"], flush=True)
        result[label] = row
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")


def table(result: dict) -> None:
    print(f"{'queue':<20} {'queueing p10/p50/p90/p99 ms':>30} {'drops':>6} {'ECN: p50 ms':>12} {'marks':>6} "
          f"{'drops':>6} {'FCT mean ms':>12} {'short lost':>11}")
    for label, row in result.items():
        q = row["drop"]["queueing_ms"]
        e = row.get("ecn")
        fct = statistics.fmean(row["fct_ms"]) if row["fct_ms"] else float("nan")
        print(f"{label:<20} {'/'.join(f'{q[k]:.1f}' for k in ('p10', 'p50', 'p90', 'p99')):>30} "
              f"{row['drop']['counters'].get('dropped', 0):>6} "
              f"{(e['queueing_ms']['p50'] if e else float('nan')):>12.1f} "
              f"{(e['counters'].get('marked', 0) if e else 0):>6} {(e['counters'].get('dropped', 0) if e else 0):>6} "
              f"{fct:>12.1f} {sum(row['short_lost']):>11}")
    for aqm in ("CoDel", "PIE", "FQ-CoDel"):
        kernel, line = result.get(f"kernel {aqm}"), result.get(f"delay line {aqm}")
        if not kernel or not line:
            continue
        d50 = line["drop"]["queueing_ms"]["p50"] - kernel["drop"]["queueing_ms"]["p50"]
        fk, fl = statistics.fmean(kernel["fct_ms"]), statistics.fmean(line["fct_ms"])
        print(f"{aqm}: the delay line's median queueing delay {d50:+.1f} ms from the kernel's "
              f"({'within' if abs(d50) <= MEDIAN_BOUND_MS else 'OUTSIDE'} {MEDIAN_BOUND_MS} ms); mean FCT "
              f"{(fl - fk) / fk:+.1%} ({'within' if abs(fl - fk) <= FCT_BOUND * fk else 'OUTSIDE'} "
              f"{FCT_BOUND:.0%})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", default="6.12")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--queues", default="fifo,codel,pie,fq_codel", help="which of fifo, codel, pie, fq_codel")
    p.add_argument("--pings", type=int, default=80, help="pings (50 ms apart) of each standing queue")
    p.add_argument("--inside", metavar="OUT", help=argparse.SUPPRESS)      # the guest's half
    p.add_argument("--show", metavar="RESULT_JSON", help="print the table of an earlier result")
    args = p.parse_args()
    if args.inside:
        inside(Path(args.inside), args.reps, args.queues.split(","), args.pings)
        return 0
    if args.show:
        table(json.loads(Path(args.show).read_text()))
        return 0
    from cli.virtual import PY, run_in_guest
    dest = Path(tempfile.mkdtemp(prefix="startlab-aqm-bench-"))
    job = (f"{PY} benchmarks/aqm_kernel.py --inside /run/aqm --reps {args.reps} --queues {args.queues} "
           f"--pings {args.pings}\n"
           f"{PY} -m results.export /run/aqm aqm\n")
    boot, _ = run_in_guest(job, args.seed, args.kernel, dest, 3600, print)
    print(f"guest {boot.guest_s:.0f} s in {boot.wall_s:.0f} s of wall time; result {dest / 'aqm' / 'result.json'}")
    table(json.loads((dest / "aqm" / "result.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
