"""Numbered UDP probe stream for measuring a delay element's one-way delay, loss and order.

Run as a script inside network namespaces (both ends share the machine's clock):
    udp_probe.py recv PORT COUNT [IDLE_TIMEOUT_S]   prints a JSON summary
    udp_probe.py send HOST PORT COUNT BURST GAP_US  bursts of BURST datagrams, GAP_US apart

Each datagram carries its sequence number and the sender's CLOCK_REALTIME just before
sendto; the receiver uses the kernel receive timestamp (SO_TIMESTAMPNS), so Python's own
scheduling delay does not enter the measured one-way delay.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!QQ")       # sequence number, send time (ns, CLOCK_REALTIME)
PAYLOAD = 200
SO_TIMESTAMPNS = 35


def summarize(samples: list[tuple[int, int]], expected: int) -> dict:
    """Loss, order and one-way delay figures from (seq, one-way delay ns) in arrival order."""
    seqs = [s for s, _ in samples]
    owd_us = sorted(d / 1000 for _, d in samples)
    reordered = sum(1 for a, b in zip(seqs, seqs[1:]) if b < a)

    def pct(q: float) -> float | None:
        if not owd_us:
            return None
        return owd_us[min(len(owd_us) - 1, int(q * len(owd_us)))]
    return {
        "expected": expected,
        "received": len(set(seqs)),
        "duplicates": len(seqs) - len(set(seqs)),
        "lost": expected - len(set(seqs)),
        "reordered": reordered,
        "owd_us": {"mean": sum(owd_us) / len(owd_us) if owd_us else None,
                   "min": owd_us[0] if owd_us else None, "p50": pct(0.5), "p99": pct(0.99),
                   "max": owd_us[-1] if owd_us else None},
    }


def receive(port: int, count: int, idle_timeout_s: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("0.0.0.0", port))
    print("listening", flush=True)
    samples: list[tuple[int, int]] = []
    sock.settimeout(30.0)                # the first datagram may take a while to be sent
    while len(samples) < count:
        try:
            data, anc, _, _ = sock.recvmsg(2048, 64)
        except socket.timeout:
            break
        sock.settimeout(idle_timeout_s)
        seq, sent = HEADER.unpack_from(data)
        rx = time.time_ns()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                rx = sec * 1_000_000_000 + nsec
        samples.append((seq, rx - sent))
    return summarize(samples, count)


def send(host: str, port: int, count: int, burst: int, gap_us: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = bytes(PAYLOAD - HEADER.size)
    next_t = time.monotonic()
    for seq in range(count):
        sock.sendto(HEADER.pack(seq, time.time_ns()) + pad, (host, port))
        if (seq + 1) % burst == 0:
            next_t += gap_us / 1e6
            while time.monotonic() < next_t:
                pass


def main(argv: list[str]) -> None:
    if argv[:1] == ["recv"]:
        timeout = float(argv[3]) if len(argv) > 3 else 2.0
        print(json.dumps(receive(int(argv[1]), int(argv[2]), timeout)), flush=True)
    elif argv[:1] == ["send"]:
        send(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
