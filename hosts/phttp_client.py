#!/usr/bin/env python3
"""A persistent-HTTP client for bursty and bulk transfers, with the receive window capped.

    phttp_client.py --server IP --port 80 --path /a --path /b --pause 0 --pause 5 \\
                    --clamp 32768 --out result.json

Fetches each path in turn on ONE persistent HTTP/1.1 connection (P-HTTP), sleeping the
matching pause before each request, and writes per request: when it was sent, when the
first and the last body byte arrived (CLOCK_REALTIME, the clock tcpdump stamps with) and
the body length. TCP_WINDOW_CLAMP caps the window the client advertises — the paper's
"maximum TCP window size" of a connection. With --bulk the one request's body is read
until --duration-s passes or the server ends it (a window-limited bulk transfer).
Standalone: no startlab imports, so it runs under any python3 inside a host namespace.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time

TCP_WINDOW_CLAMP = 10


def request(sock: socket.socket, host: str, path: str) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n".encode())


def read_response(sock: socket.socket, buf: bytearray, deadline: float | None, stop: list | None = None) -> dict:
    """Read one response (Content-Length framed); times of the first and last body byte.

    A bulk body is read until `deadline` or until `stop` is set (SIGTERM); the socket then
    has a short timeout so that either is noticed while the transfer is still under way."""
    first = None
    while b"\r\n\r\n" not in buf:
        if stop:
            raise ConnectionError("stopped before a response header")
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            raise ConnectionError("the server closed before a response header")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    if length is None:
        raise ConnectionError("response without Content-Length")
    got = len(rest)
    if got:
        first = time.time()
    del buf[:]
    while got < length:
        if (deadline is not None and time.time() >= deadline) or stop:
            break
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            continue
        if not chunk:
            raise ConnectionError(f"the server closed after {got} of {length} body bytes")
        if first is None:
            first = time.time()
        got += len(chunk)
    extra = got - length
    if extra > 0:
        raise ConnectionError("more body than Content-Length")
    return {"status": status, "bytes": got, "length": length, "first_byte": first, "done": time.time()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--path", action="append", required=True)
    ap.add_argument("--pause", action="append", type=float, default=[])
    ap.add_argument("--clamp", type=int, default=0, help="TCP_WINDOW_CLAMP in bytes (0: none)")
    ap.add_argument("--bulk", action="store_true", help="read the one body until --duration-s")
    ap.add_argument("--duration-s", type=float, default=0.0)
    ap.add_argument("--linger", type=float, default=0.0,
                    help="keep the connection open this long after the last response (its state can be read)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    pauses = args.pause + [0.0] * (len(args.path) - len(args.pause))
    result = {"server": args.server, "port": args.port, "clamp": args.clamp, "requests": [], "error": None}
    sock = socket.socket()
    try:
        if args.clamp:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, args.clamp)
        result["connect"] = time.time()
        sock.connect((args.server, args.port))
        if args.bulk:
            sock.settimeout(0.2)
        result["local_port"] = sock.getsockname()[1]
        buf = bytearray()
        for path, pause in zip(args.path, pauses):
            if pause:
                time.sleep(pause)
            if stop:
                break
            sent = time.time()
            request(sock, args.server, path)
            deadline = sent + args.duration_s if args.bulk and args.duration_s else None
            got = read_response(sock, buf, deadline, stop if args.bulk else None)
            result["requests"].append({"path": path, "sent": sent, **got})
            print(f"response {len(result['requests'])} done", flush=True)   # progress for the workload
        end = time.time() + args.linger
        while not stop and time.time() < end:
            time.sleep(0.05)
    except (OSError, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    return 1 if result["error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
