"""aioquic behind startlab's stack endpoint contract (hosts/stacks): run by the Python of
aioquic's own venv (provisioning's `.stacks/aioquic`), so it imports nothing of startlab.

    aioquic_endpoint.py server --listen IP:PORT --cert C --key K [--cc reno|cubic] [--qlog-dir D]
    aioquic_endpoint.py client --server IP:PORT --size N [--qlog-dir D] [--timeout-s T]
    aioquic_endpoint.py version

The server answers an HTTP/0.9 request ("GET /N", ALPN hq-interop, as the QUIC interop
runner's endpoints) on each bidirectional stream with N bytes and the stream's FIN. The
client fetches one object and prints one JSON object: ok, bytes, fct_s (from the dial to
the last byte), handshake_s. aioquic's datagrams stay at its default 1200 bytes (it has no
path MTU discovery), its window starts at 10 of them, and its pacer is always on.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
import time
from importlib.metadata import version

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.logger import QuicFileLogger

ALPN = ["hq-interop"]
MAX_OBJECT = 1 << 40
CHUNK = 64 * 1024
WINDOW = 64 << 20            # flow control never limits a startup


def configuration(is_client: bool, cc: str, qlog_dir: str | None) -> QuicConfiguration:
    conf = QuicConfiguration(is_client=is_client, alpn_protocols=ALPN, congestion_control_algorithm=cc,
                             max_data=WINDOW, max_stream_data=WINDOW, idle_timeout=30.0)
    if qlog_dir:
        conf.quic_logger = QuicFileLogger(qlog_dir)
    return conf


def request_size(line: bytes) -> int:
    text = line.decode("ascii", "replace").strip()
    if not text.startswith("GET /"):
        raise ValueError(f"not a request: {text!r}")
    n = int(text[5:])
    if not 0 <= n <= MAX_OBJECT:
        raise ValueError(f"not an object size: {n}")
    return n


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        n = request_size(await reader.readline())
    except ValueError:
        writer.close()
        return
    chunk = bytes(CHUNK)
    while n > 0:
        writer.write(chunk[:min(n, CHUNK)])
        n -= min(n, CHUNK)
        await writer.drain()
    writer.write_eof()


class Tracked(QuicConnectionProtocol):
    """A server connection the stop waits for: aioquic writes a connection's qlog only when
    it has ended (after its draining period, 3 PTOs once the client closed it)."""
    live: set["Tracked"] = set()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        Tracked.live.add(self)


async def run_server(a: argparse.Namespace) -> None:
    conf = configuration(False, a.cc, a.qlog_dir)
    conf.load_cert_chain(a.cert, a.key)
    host, port = a.listen.rsplit(":", 1)
    server = await serve(host, int(port), configuration=conf, create_protocol=Tracked,
                         stream_handler=lambda r, w: asyncio.ensure_future(answer(r, w)))
    print(f"listening on {a.listen}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for proto in Tracked.live:
        proto.close()
    # Each connection ends (and writes its qlog) once its draining period is over.
    await asyncio.wait([asyncio.ensure_future(p.wait_closed()) for p in Tracked.live] or [asyncio.sleep(0)],
                       timeout=5.0)
    server.close()


async def run_client(a: argparse.Namespace) -> dict:
    conf = configuration(True, a.cc, a.qlog_dir)
    conf.verify_mode = ssl.CERT_NONE
    host, port = a.server.rsplit(":", 1)
    report = {"ok": False, "stack": "aioquic", "version": version("aioquic"), "bytes": 0,
              "start_unix_s": time.time()}
    start = time.monotonic()
    async with connect(host, int(port), configuration=conf) as proto:
        report["handshake_s"] = time.monotonic() - start
        reader, writer = await proto.create_stream()
        writer.write(f"GET /{a.size}\r\n".encode())
        writer.write_eof()
        got = 0
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            got += len(data)
        report["fct_s"] = time.monotonic() - start
        report["bytes"] = got
        report["smoothed_rtt_ms"] = proto._quic._loss._rtt_smoothed * 1e3
        proto.close()
        await proto.wait_closed()
    report["ok"] = got == a.size
    if not report["ok"]:
        report["error"] = f"got {got} of {a.size} bytes"
    return report


def main() -> int:
    if sys.argv[1:] == ["version"]:
        print(version("aioquic"))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("--listen", required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    c = sub.add_parser("client")
    c.add_argument("--server", required=True)
    c.add_argument("--size", type=int, required=True)
    c.add_argument("--timeout-s", type=float, default=60.0)
    for q in (s, c):
        q.add_argument("--cc", default="reno", choices=("reno", "cubic"))
        q.add_argument("--qlog-dir")
    a = p.parse_args()
    if a.role == "server":
        asyncio.run(run_server(a))
        return 0
    try:
        report = asyncio.run(asyncio.wait_for(run_client(a), a.timeout_s))
    except Exception as e:            # the report says why, as every stack's client does
        report = {"ok": False, "stack": "aioquic", "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
