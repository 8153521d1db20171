#!/usr/bin/env python3
"""Goodput and CPU of startlab's QUIC endpoints, and of the third-party QUIC stacks, against
the kernel's TCP on the same path.

For each bottleneck rate, builds a server — middle — client path of network namespaces
(hosts/quic/quic_net.py: tbf toward the client in the middle, a bridge or, with --rtt-ms,
the delay line), then measures
  * TCP: iperf3 -R (server → client), CUBIC, for --seconds;
  * QUIC: one fetch of rate × --seconds bytes from startlab-quic-server (cubic-iw32 unless
    --cc), goodput = bytes ÷ FCT, server CPU from /proc/PID/stat over the fetch;
  * each stack of --stacks (hosts/stacks, default: every one installed), the same fetch from
    the stack's own server with its default congestion control: goodput = bytes ÷ its
    client's FCT (for ngtcp2's example client, which reports none, ÷ the client process's
    wall time, start and close included: marked *).
Prints a table (or --json). Needs root; takes about 2 × --seconds per rate. The machine
must run nothing else of the kind meanwhile: wrap it in
`flock /tmp/startlab-emulation.lock`.

    sudo flock /tmp/startlab-emulation.lock python3 benchmarks/quic_goodput.py --rates-mbps 1000,50
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hosts.quic.quic_net import (CLIENT_BIN, SERVER_BIN, SERVER_IP, PathSpec,  # noqa: E402
                                 QuicNet, process_cpu_s)
from hosts.stacks import STACKS  # noqa: E402
from hosts.stacks.contract import Tls  # noqa: E402
from hosts.stacks.endpoints import fetch, start_server  # noqa: E402


def tcp_goodput(net: QuicNet, seconds: float) -> dict:
    server = net.popen(net.server, ["iperf3", "-s", "-1", "-B", SERVER_IP, "-p", "5211"])
    time.sleep(0.3)
    client = net.popen(net.client, ["iperf3", "-c", SERVER_IP, "-p", "5211", "-R", "-J", "-C", "cubic",
                                    "-t", str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = client.communicate(timeout=seconds + 30)
    net.stop(server)
    if client.returncode != 0:
        raise RuntimeError(f"iperf3 failed: {out[-400:]} {err[-400:]}")
    end = json.loads(out)["end"]
    return {"goodput_mbps": end["sum_received"]["bits_per_second"] / 1e6,
            "retransmits": end["sum_sent"].get("retransmits"),
            "server_cpu_pct": end.get("cpu_utilization_percent", {}).get("remote_total")}


def quic_goodput(net: QuicNet, rate_bps: float, seconds: float, server_args: list[str],
                 client_args: list[str]) -> dict:
    stats = net.workdir / "quic-stats.jsonl"
    stats.unlink(missing_ok=True)
    server = net.start_server(server_args, stats, net.workdir / "quic-server.log")
    size = int(rate_bps * seconds / 8)
    cpu0, t0 = process_cpu_s(server.pid), time.monotonic()
    client = net.popen(net.client, [str(CLIENT_BIN), "--server", f"{SERVER_IP}:4433",
                                       "--size", str(size), "--timeout-s", str(seconds * 5 + 30),
                                       *client_args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The client's own CPU, sampled while it runs.
    client_cpu = 0.0
    while client.poll() is None:
        try:
            client_cpu = process_cpu_s(client.pid)
        except OSError:
            pass
        time.sleep(0.05)
    out, err = client.communicate()
    cpu1, t1 = process_cpu_s(server.pid), time.monotonic()
    net.stop(server)
    if client.returncode != 0:
        raise RuntimeError(f"QUIC client failed: {err.strip()}")
    res = json.loads(out)
    line = json.loads(stats.read_text().splitlines()[-1])
    fct = res["fct_s"]
    return {"goodput_mbps": res["goodput_mbps"], "fct_s": fct, "bytes": res["bytes"],
            "server_cpu_cores": (cpu1 - cpu0) / (t1 - t0),
            "client_cpu_cores": client_cpu / fct if fct else None,
            "lost_packets": line.get("lost_packets"), "sent_datagrams": line.get("sent_datagrams"),
            "sent_ios": line.get("sent_ios"),
            "datagrams_per_send": line["sent_datagrams"] / max(1, line["sent_ios"]),
            "datagrams_per_receive": res["stats"]["received_datagrams"] / max(1, res["stats"]["received_ios"])}


def stack_goodput(net: QuicNet, name: str, rate_bps: float, seconds: float) -> dict:
    """One fetch of rate × seconds bytes from a stack's own server, its default control."""
    stack = STACKS[name]
    size = int(rate_bps * seconds / 8)
    server = start_server(net.popen, net.server, stack, SERVER_IP, 4433, stack.default_cc,
                          Tls.make(net.workdir / "tls"), None, net.workdir)
    cpu0, t0 = process_cpu_s(server.pid), time.monotonic()
    got = fetch(net.popen, net.client, stack, SERVER_IP, 4433, size, stack.default_cc, None, net.workdir,
                seconds * 5 + 30)
    wall, cpu1 = time.monotonic() - t0, process_cpu_s(server.pid)
    net.stop(server)
    if not got.ok:
        raise RuntimeError(f"{name}'s fetch failed: {got.error}")
    fct = got.fct_s if got.fct_s is not None else wall
    return {"goodput_mbps": size * 8 / fct / 1e6, "fct_s": fct, "fct_from": "client" if got.fct_s else "wall",
            "server_cpu_cores": (cpu1 - cpu0) / wall, "version": stack.version(), "cc": stack.default_cc}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates-mbps", default="1000,50")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="delay line RTT (0: a bridge, no delay)")
    ap.add_argument("--offloads", action="store_true", help="tso/gso/gro on (startlab's paths have them off)")
    ap.add_argument("--cc", default="cubic-iw32")
    ap.add_argument("--server-args", default="", help="extra server options, e.g. '--no-gso'")
    ap.add_argument("--client-args", default="")
    ap.add_argument("--stacks", default=None, help="third-party stacks to measure (default: every one installed; "
                                                   "'none': none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for b in (SERVER_BIN, CLIENT_BIN):
        if not b.exists():
            print(f"{b} is not built: cargo build --release -p startlab-quic", file=sys.stderr)
            return 2
    stacks = ([s for s in STACKS if STACKS[s].unavailable() is None] if args.stacks is None else
              [] if args.stacks == "none" else args.stacks.split(","))
    for s in stacks:
        why = STACKS[s].unavailable() if s in STACKS else f"no stack {s} (known: {', '.join(STACKS)})"
        if why:
            print(why, file=sys.stderr)
            return 2
    results = []
    for mbps in (float(r) for r in args.rates_mbps.split(",")):
        rate = mbps * 1e6
        with QuicNet(PathSpec(rate_bps=rate, rtt_ms=args.rtt_ms, offloads=args.offloads)) as net:
            tcp = tcp_goodput(net, args.seconds)
            quic = quic_goodput(net, rate, args.seconds, ["--cc", args.cc, *args.server_args.split()],
                                args.client_args.split())
            others = {s: stack_goodput(net, s, rate, args.seconds) for s in stacks}
        for o in others.values():
            o["over_tcp"] = o["goodput_mbps"] / tcp["goodput_mbps"]
        results.append({"rate_mbps": mbps, "rtt_ms": args.rtt_ms, "offloads": args.offloads,
                        "tcp": tcp, "quic": quic, "stacks": others,
                        "quic_over_tcp": quic["goodput_mbps"] / tcp["goodput_mbps"]})
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'rate':>8} {'TCP Mbit/s':>11} {'QUIC Mbit/s':>12} {'QUIC/TCP':>9} {'server cores':>13} "
          f"{'client cores':>13} {'lost':>6} {'dgrams/send':>12} {'dgrams/recv':>12}")
    for r in results:
        q = r["quic"]
        print(f"{r['rate_mbps']:>8.0f} {r['tcp']['goodput_mbps']:>11.1f} {q['goodput_mbps']:>12.1f} "
              f"{r['quic_over_tcp']:>9.3f} {q['server_cpu_cores']:>13.3f} {q['client_cpu_cores'] or 0:>13.3f} "
              f"{q['lost_packets']:>6} {q['datagrams_per_send']:>12.1f} {q['datagrams_per_receive']:>12.1f}")
    if stacks:
        print(f"\n{'rate':>8} {'stack':<10} {'control':<8} {'Mbit/s':>8} {'÷ TCP':>7} {'server cores':>13}")
        for r in results:
            for name, o in r["stacks"].items():
                mark = "" if o["fct_from"] == "client" else "*"
                print(f"{r['rate_mbps']:>8.0f} {name:<10} {o['cc']:<8} {o['goodput_mbps']:>7.1f}{mark:1} "
                      f"{o['over_tcp']:>7.3f} {o['server_cpu_cores']:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
