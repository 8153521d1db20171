#!/usr/bin/env python3
"""Benchmark: startlab's pcap analysis against `tcptrace -l` and a Python loop.

Times (best of --repeat runs):
  * startlab-pcapcols plus loading its columns with numpy (the analysis path),
  * `tcptrace -n -l`,
  * a pure-Python per-packet loop (struct.unpack per record, dict per connection),
and checks that per-connection unique bytes, data packets and retransmitted data
packets equal tcptrace's "unique bytes sent", "actual data pkts" and "rexmt data
pkts" in both directions, printing every mismatch.

The capture is synthetic (many bulk flows with ACKs, full and partial
retransmissions, a sequence-number wrap) unless --pcap gives a real one.

    .venv/bin/python benchmarks/pcap_analysis.py [--packets 500000] [--pcap FILE]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import numpy as np  # noqa: E402

from analysis import packets  # noqa: E402
from pcapcraft import ACK, FIN, MSS, SYN, Conversation, PcapWriter  # noqa: E402

TCPTRACE = "/usr/bin/tcptrace"


def synthesize(path: Path, npackets: int, nflows: int, seed: int) -> None:
    """Interleaved bulk transfers server -> client, one ACK per two segments, ~0.5 %
    of segments resent in full and ~0.2 % resent shifted (partial overlap), one flow
    starting just below 2^32 so its sequence numbers wrap."""
    rng = random.Random(seed)
    convs = [Conversation(f"10.0.0.{1 + i % 200}", 40000 + i, f"10.0.1.{1 + i % 7}", 5201 if i % 2 else 80,
                          client_isn=rng.randrange(2**32),
                          server_isn=2**32 - 1000 * MSS if i == 0 else rng.randrange(2**32))
            for i in range(nflows)]
    sent = [0] * nflows  # bytes sent so far per flow
    ipid = [0] * nflows
    t = 1_700_000_000.0
    written = 0
    with open(path, "wb") as f:
        w = PcapWriter(f)
        for i, c in enumerate(convs):
            w.packet(c.syn(t))
            w.packet(c.synack(t + 0.0001))
            t += 0.0002
            written += 2
        while written < npackets - 2 * nflows:
            i = rng.randrange(nflows)
            c = convs[i]
            t += 0.000004
            ipid[i] += 1
            r = rng.random()
            if r < 0.005 and sent[i] > 10 * MSS:
                off = sent[i] - rng.randrange(1, 10) * MSS  # full retransmission
            elif r < 0.007 and sent[i] > 10 * MSS:
                off = sent[i] - MSS // 2  # repacketised: half old, half new
                sent[i] = off + MSS
            else:
                off = sent[i]
                sent[i] += MSS
            w.packet(c.from_server(t, off, MSS, ipid=ipid[i]))
            written += 1
            if ipid[i] % 2 == 0:
                w.packet(c.from_client(t + 0.000001, 0, 0, acked=sent[i]))
                written += 1
        for c in convs:
            t += 0.0001
            w.packet(c.from_server(t, sent[convs.index(c)], 0, flags=FIN | ACK))
            w.packet(c.from_client(t, 0, 0, flags=FIN | ACK, acked=sent[convs.index(c)] + 1))


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def run_startlab(pcap: Path, workdir: Path) -> packets.Capture:
    """Extraction from scratch (the cache is removed first) plus loading every column."""
    shutil.rmtree(packets.cache_dir(pcap), ignore_errors=True)
    return packets.load(pcap)


def run_tcptrace(pcap: Path) -> str:
    return subprocess.run([TCPTRACE, "-n", "-l", str(pcap)], capture_output=True, text=True, check=True).stdout


TCPTRACE_FIELDS = {"unique bytes sent": "unique_bytes", "actual data pkts": "data_pkts",
                   "rexmt data pkts": "retx_pkts"}


def parse_tcptrace(text: str) -> list[dict]:
    """Per connection: its two hosts (first = tcptrace's "a" column) and the two-column
    fields of interest, as (first->second, second->first)."""
    conns: list[dict] = []
    for line in text.splitlines():
        if re.match(r"TCP connection \d+:", line):
            conns.append({"hosts": []})
            continue
        m = re.match(r"\s*host \w+:\s+(\S+):(\d+)$", line)
        if m and conns:
            conns[-1]["hosts"].append((m.group(1), int(m.group(2))))
            continue
        pairs = re.findall(r"([a-z][a-z ]+?):\s+(\d+)", line)
        if len(pairs) == 2 and pairs[0][0] in TCPTRACE_FIELDS and conns:
            conns[-1][TCPTRACE_FIELDS[pairs[0][0]]] = (int(pairs[0][1]), int(pairs[1][1]))
    return conns


def python_loop(pcap: Path) -> dict:
    """The baseline: one Python iteration per packet, unique bytes by highest sequence."""
    conns: dict[tuple, list[int]] = {}
    with open(pcap, "rb") as f:
        data = f.read()
    off = 24
    n = len(data)
    while off + 16 <= n:
        _, _, caplen, _ = struct.unpack_from("<IIII", data, off)
        fr = off + 16
        off = fr + caplen
        if data[fr + 12:fr + 14] != b"\x08\x00" or data[fr + 23] != 6:
            continue
        ihl = (data[fr + 14] & 15) * 4
        total, = struct.unpack_from("!H", data, fr + 16)
        src, dst = data[fr + 26:fr + 30], data[fr + 30:fr + 34]
        t = fr + 14 + ihl
        sport, dport, seq = struct.unpack_from("!HHI", data, t)
        payload = total - ihl - (data[t + 12] >> 4) * 4
        key = (src, sport, dst, dport)
        st = conns.get(key)
        if st is None:
            st = conns[key] = [seq, 0, 0]  # highest end (unwrapped), data pkts, retx pkts
        if payload > 0:
            end = st[0] + ((seq - st[0] + 2**31) % 2**32 - 2**31) + payload
            st[1] += 1
            if end <= st[0]:
                st[2] += 1
            st[0] = max(st[0], end)
    return conns


def compare(cap: packets.Capture, tt: list[dict]) -> list[str]:
    c = cap.conns
    index = {}
    for i in range(len(c)):
        a = (int(c["src"][i]), int(c["sport"][i]))
        b = (int(c["dst"][i]), int(c["dport"][i]))
        index[(a, b)] = (i, 0)
        index[(b, a)] = (i, 1)
    problems = []

    def addr(host: tuple[str, int]) -> tuple[int, int]:
        return int.from_bytes(bytes(int(x) for x in host[0].split(".")), "big"), host[1]

    for conn in tt:
        first, second = conn["hosts"]
        key = (addr(first), addr(second))
        if key not in index:
            problems.append(f"tcptrace connection {first} <-> {second} not found")
            continue
        i, d_a = index[key]
        for field in TCPTRACE_FIELDS.values():
            for col, d in ((0, d_a), (1, 1 - d_a)):
                ours = int(c[field][i, d])
                if ours != conn[field][col]:
                    problems.append(f"{first} <-> {second} {field} "
                                    f"{'a->b' if col == 0 else 'b->a'}: ours {ours}, tcptrace {conn[field][col]}")
    if len(tt) != len(c):
        problems.append(f"connections: ours {len(c)}, tcptrace {len(tt)}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pcap", type=Path, help="a real capture instead of a synthetic one")
    ap.add_argument("--packets", type=int, default=500_000, help="size of the synthetic capture")
    ap.add_argument("--flows", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-python", action="store_true", help="skip the slow Python-loop baseline")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="pcapbench-") as tmp:
        if args.pcap:
            pcap = Path(tmp) / "input.pcap"
            pcap.symlink_to(args.pcap.resolve())
        else:
            pcap = Path(tmp) / "synthetic.pcap"
            t0 = time.perf_counter()
            synthesize(pcap, args.packets, args.flows, args.seed)
            print(f"synthesised {pcap.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")

        t_ours, cap = best_of(args.repeat, lambda: run_startlab(pcap, Path(tmp)))
        n = len(cap.packets)
        print(f"packets: {n} TCP, {len(cap.conns)} connections")
        t_tt, tt_text = best_of(args.repeat, lambda: run_tcptrace(pcap))
        print(f"startlab-pcapcols + load : {t_ours:7.3f} s  {n / t_ours / 1e6:6.2f} M packets/s")
        print(f"tcptrace -n -l           : {t_tt:7.3f} s  {n / t_tt / 1e6:6.2f} M packets/s")
        if not args.no_python:
            t_py, _ = best_of(1, lambda: python_loop(pcap))
            print(f"python per-packet loop   : {t_py:7.3f} s  {n / t_py / 1e6:6.2f} M packets/s")
        print(f"speed-up over tcptrace   : {t_tt / t_ours:.2f}x")

        problems = compare(cap, parse_tcptrace(tt_text))
        for p in problems:
            print("MISMATCH", p)
        print(f"per-connection check against tcptrace: "
              f"{'all equal' if not problems else f'{len(problems)} mismatches'} "
              f"(unique bytes, data pkts, rexmt data pkts; both directions)")
        print(f"retransmitted data packets: {int(cap.conns['retx_pkts'].sum())}, "
              f"unique bytes: {int(cap.conns['unique_bytes'].sum())}")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
