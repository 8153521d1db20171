#!/usr/bin/env python3
"""Which congestion control each TCP connection of a node really runs, read from the kernel.

Run inside a host's network namespace while its flows run:

    socket_watch.py PORT INTERVAL_S OUT.json

Every INTERVAL_S it asks the kernel's sock_diag interface (the one `ss -tin` reads) for
the node's TCP sockets with local port PORT, with their congestion control and tcp_info,
and on SIGTERM writes one entry per connection seen: the congestion control names, the
first and largest cwnd sampled, where the first slow start ended (the first sample with an
ssthresh, with the window, the CA state and the retransmissions then), and when it was seen. One netlink dump costs tens of
microseconds where spawning `ss` would cost milliseconds, so sampling every 10 ms catches
even a one-RTT flow without taking CPU from the emulation. Standalone: no startlab
imports, so it runs under any python3 in any namespace.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO, INET_DIAG_CONG = 2, 4
# Every state that has the connection's congestion control: not LISTEN (10), TIME_WAIT (6) or
# CLOSE (7), and not SYN_RECV (3): an accepted child is hashed in SYN_RECV with its listener's
# congestion control a moment before it becomes established, when sock_ops hands it the
# scheme's (PASSIVE_ESTABLISHED). Seen then (measured: 2 of 360 trace-link runs) it is not
# what the connection runs.
STATES = sum(1 << s for s in (1, 2, 4, 5, 8, 9, 11))
NLMSG = struct.Struct("=IHHII")
REQ = struct.Struct("=BBBBI")                # family, protocol, ext, pad, states
SOCKID = struct.Struct("!HH16s16sI8s")      # sport, dport, src, dst, if, cookie (ports big endian)
DIAG_MSG_HEAD = struct.Struct("=BBBB")      # family, state, timer, retrans
TCPI_SND_CWND, TCPI_SND_SSTHRESH = 80, 76   # byte offsets in struct tcp_info
TCPI_CA_STATE, TCPI_TOTAL_RETRANS = 1, 100
INFINITE_SSTHRESH = 0x7FFFFFFF              # the kernel's TCP_INFINITE_SSTHRESH: still in the first slow start


def request(seq: int, family: int) -> bytes:
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1))
    body = REQ.pack(family, socket.IPPROTO_TCP, ext, 0, STATES) + SOCKID.pack(
        0, 0, bytes(16), bytes(16), 0, b"\xff" * 8)
    return NLMSG.pack(NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def address(family: int, raw: bytes) -> str:
    """IPv4 as dotted quad, also when an IPv6 socket carries it v4-mapped (::ffff:a.b.c.d),
    as dual-stack servers such as iperf3 do."""
    if family == socket.AF_INET:
        return socket.inet_ntoa(raw[:4])
    if raw[:12] == bytes(10) + b"\xff\xff":
        return socket.inet_ntoa(raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw)


def parse(data: bytes) -> tuple[list[dict], bool]:
    """Sockets in one netlink reply buffer, and whether the dump is complete."""
    out, off = [], 0
    while off + NLMSG.size <= len(data):
        length, kind, _, _, _ = NLMSG.unpack_from(data, off)
        if length < NLMSG.size:
            break
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            raise OSError("sock_diag request failed")
        msg = data[off + NLMSG.size: off + length]
        sport, dport, src, dst, _, _ = SOCKID.unpack_from(msg, DIAG_MSG_HEAD.size)
        entry = {"local": f"{address(msg[0], src)}:{sport}", "peer": f"{address(msg[0], dst)}:{dport}",
                 "sport": sport, "state": msg[1]}
        attr = DIAG_MSG_HEAD.size + SOCKID.size + 20          # after expires..inode
        while attr + 4 <= len(msg):
            alen, atype = struct.unpack_from("=HH", msg, attr)
            if alen < 4:
                break
            value = msg[attr + 4: attr + alen]
            if atype == INET_DIAG_CONG:
                entry["cc"] = value.split(b"\0", 1)[0].decode(errors="replace")
            elif atype == INET_DIAG_INFO and len(value) >= TCPI_TOTAL_RETRANS + 4:
                entry["cwnd"] = struct.unpack_from("=I", value, TCPI_SND_CWND)[0]
                entry["ssthresh"] = struct.unpack_from("=I", value, TCPI_SND_SSTHRESH)[0]
                entry["ca_state"] = value[TCPI_CA_STATE]
                entry["total_retrans"] = struct.unpack_from("=I", value, TCPI_TOTAL_RETRANS)[0]
            attr += (alen + 3) & ~3
        out.append(entry)
        off += (length + 3) & ~3
    return out, False


def sample(sock: socket.socket, seq: int) -> list[dict]:
    """Both families' sockets: dual-stack servers accept IPv4 on IPv6 sockets."""
    found = []
    for family in (socket.AF_INET, socket.AF_INET6):
        sock.send(request(seq, family))
        while True:
            entries, done = parse(sock.recv(1 << 16))
            found += entries
            if done:
                break
    return found


class Watch:
    """What was seen per connection (local, peer) so far."""

    def __init__(self, port: int):
        self.port = port
        self.t0 = time.monotonic()
        self.samples = 0
        self.connections: dict[tuple[str, str], dict] = {}

    def add(self, entries: list[dict]) -> None:
        self.samples += 1
        now = round(time.monotonic() - self.t0, 4)
        for e in entries:
            if e["sport"] != self.port or "cc" not in e:
                continue
            seen = self.connections.setdefault((e["local"], e["peer"]), {
                "local": e["local"], "peer": e["peer"], "cc": [], "first_s": now, "samples": 0,
                "first_cwnd": e.get("cwnd"), "max_cwnd": 0})
            if e["cc"] not in seen["cc"]:
                seen["cc"].append(e["cc"])
            seen["last_s"] = now
            seen["samples"] += 1
            seen["max_cwnd"] = max(seen["max_cwnd"], e.get("cwnd") or 0)
            # Where the first slow start ended: the first sample with an ssthresh. Without a
            # retransmission and in the Open state, a delay signal (HyStart) ended it.
            if "ss_exit" not in seen and e.get("ssthresh", INFINITE_SSTHRESH) < INFINITE_SSTHRESH:
                seen["ss_exit"] = {"s": now, "cwnd": e.get("cwnd"), "ssthresh": e["ssthresh"],
                                   "ca_state": e.get("ca_state"), "total_retrans": e.get("total_retrans")}

    def report(self) -> dict:
        return {"port": self.port, "samples": self.samples, "duration_s": round(time.monotonic() - self.t0, 3),
                "connections": list(self.connections.values())}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    port, interval, out = int(argv[0]), float(argv[1]), argv[2]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    watch = Watch(port)
    owner = os.getppid()      # the startlab process that started the watch, through mnexec
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    print("watching", flush=True)
    seq = 0
    while not stop:
        if os.getppid() != owner:
            # Its owner was killed outright (SIGKILL, a failed Slurm node): nobody stops this
            # watch or reads its report, and its namespace would outlive every link of ours
            # that `clean` knows it by.
            return 1
        seq += 1
        watch.add(sample(sock, seq))
        time.sleep(interval)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(watch.report(), f)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
