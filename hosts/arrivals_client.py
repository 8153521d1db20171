"""Open-loop HTTP/1.0 fetches at scheduled times: the client side of the `arrivals` workload.

    arrivals_client.py --server IP --port 80 --path /obj-290000.bin --schedule FILE
                       --start-at EPOCH --out FILE

`--schedule` is a JSON list of offsets (seconds from `--start-at`, a wall-clock time so
that several clients share one time line), each fetching `--path`, or of [offset, path]
pairs (objects of many sizes, as web sessions fetch them); fetch i opens its TCP connection at
start-at + offset[i] whether or not earlier fetches have finished — the offered load does
not depend on how fast the network serves it, and the number of connections open at once
is bounded only by the file-descriptor limit (raised to its hard limit here).

Timing: one thread, non-blocking sockets and a selector. epoll's timeout has millisecond
granularity, so the loop waits in the selector only until 2 ms before the next arrival and
sleeps the rest with nanosleep: an arrival is late by the sleep's precision plus whatever
I/O the loop is handling at that moment, not by a timer wheel's tick.

The report (JSON) lists per fetch: index, scheduled and actual connect time (wall clock,
the captures' clock), the local port (to find the connection in a capture), the time the
last byte arrived, the body bytes, the HTTP status and any error; and the peak number of
connections open at once.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import selectors
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

GUARD_S = 0.002            # wake from the selector this long before an arrival, then nanosleep
RECV_BYTES = 1 << 16


@dataclass
class Fetch:
    index: int
    scheduled: float                 # wall clock
    path: str = ""
    started: float = 0.0             # wall clock, just before connect()
    local_port: int = 0
    done: float = 0.0
    bytes: int = 0                   # body bytes
    head_bytes: int = 0              # status line and headers: the capture sees them too
    status: int = 0
    error: str = ""
    head: bytes = field(default=b"", repr=False)
    body_started: bool = field(default=False, repr=False)

    def report(self) -> dict:
        d = asdict(self)
        d.pop("head"), d.pop("body_started")
        return d


def parse_head(fetch: Fetch, data: bytes) -> None:
    """Feed bytes into `fetch`: the status line and headers first, then the body count."""
    if fetch.body_started:
        fetch.bytes += len(data)
        return
    fetch.head += data
    end = fetch.head.find(b"\r\n\r\n")
    if end < 0:
        return
    line = fetch.head.split(b"\r\n", 1)[0].split()
    fetch.status = int(line[1]) if len(line) > 1 and line[1].isdigit() else -1
    fetch.head_bytes = end + 4
    fetch.bytes = len(fetch.head) - end - 4
    fetch.body_started = True
    fetch.head = b""


def read_schedule(entries: list, default_path: str) -> tuple[list[float], list[str]]:
    """Offsets and paths of a schedule: numbers (each fetching `default_path`) or
    [offset, path] pairs."""
    offsets, paths = [], []
    for e in entries:
        off, path = (e, default_path) if isinstance(e, (int, float)) else (e[0], e[1])
        if not path:
            raise ValueError("a schedule entry without a path, and no --path")
        offsets.append(float(off))
        paths.append(str(path))
    return offsets, paths


def run(server: str, port: int, paths: list[str], offsets: list[float], start_at: float, timeout_s: float) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    # The schedule's time line in the monotonic clock, anchored once.
    mono0 = time.monotonic() + (start_at - time.time())
    fetches = [Fetch(i, start_at + off, paths[i]) for i, off in enumerate(offsets)]
    # Warm the code paths of a connection (socket creation, connect, getsockname) once, so
    # the first scheduled one is not the one that pays for them.
    warm = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    warm.setblocking(False)
    warm.getsockname()
    warm.close()
    due = sorted(range(len(offsets)), key=lambda i: offsets[i])
    nxt, open_now, peak, finished = 0, 0, 0, 0
    deadline = mono0 + (max(offsets) if offsets else 0) + timeout_s

    def close(sock: socket.socket, f: Fetch, error: str = "") -> None:
        nonlocal open_now, finished
        sel.unregister(sock)
        sock.close()
        f.done, f.error = time.time(), error or f.error
        open_now -= 1
        finished += 1

    while finished < len(fetches):
        now = time.monotonic()
        if now > deadline:
            break
        while nxt < len(due) and mono0 + offsets[due[nxt]] <= now:
            f = fetches[due[nxt]]
            nxt += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            f.started = time.time()
            rc = s.connect_ex((server, port))
            if rc not in (0, errno.EINPROGRESS):
                f.error, f.done = os.strerror(rc), time.time()
                s.close()
                finished += 1
                continue
            f.local_port = s.getsockname()[1]
            sel.register(s, selectors.EVENT_WRITE, ("connect", f))
            open_now += 1
            peak = max(peak, open_now)
            now = time.monotonic()
        if nxt < len(due):
            wait = mono0 + offsets[due[nxt]] - now
            if wait <= GUARD_S:
                time.sleep(max(0.0, wait))
                continue
            timeout = wait - GUARD_S
        else:
            timeout = max(0.0, deadline - now)
        for key, events in sel.select(timeout):
            sock, (state, f) = key.fileobj, key.data
            if state == "connect":
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    close(sock, f, os.strerror(err))
                    continue
                # A few dozen bytes: they fit the new connection's empty send buffer.
                sock.sendall(f"GET {f.path} HTTP/1.0\r\nHost: {server}\r\n\r\n".encode())
                sel.modify(sock, selectors.EVENT_READ, ("read", f))
                continue
            try:
                data = sock.recv(RECV_BYTES)
            except OSError as exc:
                close(sock, f, str(exc))
                continue
            if data:
                parse_head(f, data)
            else:
                close(sock, f)
    for key in list(sel.get_map().values()):
        key.fileobj.close()
        key.data[1].error = key.data[1].error or "not finished within the timeout"
    return {"fetches": [f.report() for f in fetches], "peak_open": peak, "fd_limit": hard,
            "start_at": start_at, "server": server}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--path", default="", help="the object of schedule entries that name none")
    ap.add_argument("--schedule", required=True, help="JSON list of offsets in seconds")
    ap.add_argument("--start-at", type=float, required=True, help="wall-clock time of offset 0")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="after the last arrival")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    with open(a.schedule) as fh:
        offsets, paths = read_schedule(json.load(fh), a.path)
    print(f"scheduled {len(offsets)} fetches", flush=True)
    report = run(a.server, a.port, paths, offsets, a.start_at, a.timeout_s)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh)
    os.replace(tmp, a.out)
    bad = [f for f in report["fetches"] if f["error"] or f["status"] != 200]
    print(f"done: {len(report['fetches']) - len(bad)} ok, {len(bad)} failed, peak {report['peak_open']} open",
          flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
