"""Numbered UDP probe stream for measuring a delay element's one-way delay, loss, order and rate.

Run as a script inside network namespaces (both ends share the machine's clock):
    udp_probe.py recv PORT COUNT [IDLE_TIMEOUT_S] [--skip-s S] [--packets]
                                                  prints a JSON summary (--packets: with every
                                                  datagram's [seq, send ns, one-way ns])
    udp_probe.py send HOST PORT COUNT BURST GAP_US [--payload N] [--tos T] [--src ADDR]
                                                  bursts of BURST datagrams, GAP_US apart
    udp_probe.py rxrate IFACE START_S END_S        rate of the interface's rx bytes counter

Each datagram carries its sequence number and the sender's CLOCK_REALTIME just before
sendto; the receiver uses the kernel receive timestamp (SO_TIMESTAMPNS), so Python's own
scheduling delay does not enter the measured one-way delay. The receiver also reports the
delivered rate in Ethernet bytes over its steady part (after the first --skip-s seconds),
from the kernel timestamps of the first and last datagram in it, and the sequence numbers
that arrived with CE set (`ce`, from each datagram's TOS byte: IP_RECVTOS).
"""
from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!QQ")       # sequence number, send time (ns, CLOCK_REALTIME)
PAYLOAD = 200
SO_TIMESTAMPNS = 35
ECN_CE = 0x03
WIRE_OVERHEAD = 14 + 20 + 8         # Ethernet, IPv4 and UDP headers of one datagram


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


def steady_rate(arrivals: list[tuple[int, int]], skip_s: float) -> dict | None:
    """Delivered rate from (kernel rx ns, Ethernet bytes) after the first `skip_s` seconds.

    Counts the bytes of every datagram after the first one of the steady part, over the
    time from that first one to the last: a saturated link's rate, free of start-up.
    """
    if not arrivals:
        return None
    t0 = arrivals[0][0] + skip_s * 1e9
    steady = [a for a in arrivals if a[0] >= t0]
    if len(steady) < 2:
        return None
    seconds = (steady[-1][0] - steady[0][0]) / 1e9
    wire = sum(n for _, n in steady[1:])
    return {"frames": len(steady) - 1, "wire_bytes": wire, "seconds": seconds,
            "wire_bps": wire * 8 / seconds if seconds > 0 else None}


def receive(port: int, count: int, idle_timeout_s: float, skip_s: float = 0.0, packets: bool = False) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    sock.bind(("0.0.0.0", port))
    print("listening", flush=True)
    samples: list[tuple[int, int]] = []
    arrivals: list[tuple[int, int]] = []
    sends: list[int] = []
    ce: list[int] = []
    sock.settimeout(30.0)                # the first datagram may take a while to be sent
    while len(samples) < count:
        try:
            data, anc, _, _ = sock.recvmsg(65536, 64)
        except socket.timeout:
            break
        sock.settimeout(idle_timeout_s)
        seq, sent = HEADER.unpack_from(data)
        rx = time.time_ns()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                rx = sec * 1_000_000_000 + nsec
            elif level == socket.IPPROTO_IP and kind == socket.IP_TOS and value and value[0] & ECN_CE == ECN_CE:
                ce.append(seq)
        samples.append((seq, rx - sent))
        arrivals.append((rx, len(data) + WIRE_OVERHEAD))
        sends.append(sent)
    out = summarize(samples, count)
    out["steady"] = steady_rate(arrivals, skip_s)
    out["ce"] = ce
    if packets:
        out["packets"] = [[seq, sent, owd] for (seq, owd), sent in zip(samples, sends)]
    return out


def send(host: str, port: int, count: int, burst: int, gap_us: float, payload: int = PAYLOAD,
         tos: int = 0, src: str | None = None) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if tos:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    if src:
        sock.bind((src, 0))
    pad = bytes(max(payload, HEADER.size) - HEADER.size)
    next_t = time.monotonic()
    for seq in range(count):
        sock.sendto(HEADER.pack(seq, time.time_ns()) + pad, (host, port))
        if (seq + 1) % burst == 0:
            next_t += gap_us / 1e6
            while time.monotonic() < next_t:
                pass


def rx_bytes(iface: str) -> int:
    """The interface's rx bytes from /proc/net/dev (this process's network namespace)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == iface:
                return int(rest.split()[0])
    raise SystemExit(f"no interface {iface} in /proc/net/dev")


def rx_rate(iface: str, start_s: float, end_s: float, every_s: float = 0.005) -> dict:
    """Slope of the rx byte counter between start_s and end_s from now (least squares).

    The counter moves in whole frames; fitting a line through a sample every few
    milliseconds removes that granularity, which two readings alone would keep.
    """
    t_start = time.monotonic()
    while time.monotonic() < t_start + start_s:
        time.sleep(0.001)
    points = []
    next_t = time.monotonic()
    while next_t < t_start + end_s:
        while time.monotonic() < next_t:
            time.sleep(0.0005)
        points.append((time.monotonic(), rx_bytes(iface)))
        next_t += every_s
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mb = sum(b for _, b in points) / n
    slope = (sum((t - mt) * (b - mb) for t, b in points) / sum((t - mt) ** 2 for t, _ in points))
    return {"samples": n, "seconds": points[-1][0] - points[0][0],
            "bytes": points[-1][1] - points[0][1], "bps": slope * 8}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("port", type=int)
    r.add_argument("count", type=int)
    r.add_argument("idle_timeout_s", type=float, nargs="?", default=2.0)
    r.add_argument("--skip-s", type=float, default=0.0)
    r.add_argument("--packets", action="store_true")
    s = sub.add_parser("send")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("count", type=int)
    s.add_argument("burst", type=int)
    s.add_argument("gap_us", type=float)
    s.add_argument("--payload", type=int, default=PAYLOAD)
    s.add_argument("--tos", type=int, default=0)
    s.add_argument("--src")
    x = sub.add_parser("rxrate")
    x.add_argument("iface")
    x.add_argument("start_s", type=float)
    x.add_argument("end_s", type=float)
    a = ap.parse_args(argv)
    if a.cmd == "recv":
        print(json.dumps(receive(a.port, a.count, a.idle_timeout_s, a.skip_s, a.packets)), flush=True)
    elif a.cmd == "send":
        send(a.host, a.port, a.count, a.burst, a.gap_us, a.payload, a.tos, a.src)
    else:
        print(json.dumps(rx_rate(a.iface, a.start_s, a.end_s)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
