"""startlab's QUIC endpoints as applications of a run: the object server, a one-object
fetch, a long-running fetch, and what their JSON reports say.

The programs are hosts/quic's `startlab-quic-server` (one JSON line per connection in
its --stats file, written when the connection ends) and `startlab-quic-client` (one JSON
object on standard output: FCT, bytes, its hint, quinn's counters). What a connection's
congestion controller was is read from the server's line, since the kernel cannot see
it: the sock_diag watch that checks TCP flows has nothing to read for QUIC.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from hosts.implementations.quic import CLIENT_BIN, SERVER_BIN, controller_name
from hosts.process import NodeProcess, wait_until
from machine import binaries
from wire.quic_report import established_connections, last_json_object

QUIC_PORT = 4433
LONG_QUIC_PORT = 4434                  # the long flow's server: its own port, so captures tell the flows apart
LONG_OBJECT = "10GB"                  # the server's largest object: more than a long flow carries (it ends on SIGTERM)


def _binary(name: str) -> str:
    path = binaries.built(name)
    if path is None:
        raise RuntimeError(f"{binaries.RELEASE / name} is not built; {binaries.QUIC_BUILD_HINT}")
    return str(path)


class QuicServer:
    """startlab-quic-server in `node` on bind_ip:port, its per-connection lines in `stats`."""

    def __init__(self, node, bind_ip: str, port: int, args: list[str], stats: Path, workdir: Path, instance,
                 name: str = "quic-server"):
        self.stats = Path(stats)
        self.proc = NodeProcess(node, [_binary(SERVER_BIN), "--listen", f"{bind_ip}:{port}",
                                       "--stats", str(self.stats), *args],
                                instance, name, log_path=workdir / f"{name}.log")
        if not wait_until(lambda: "listening on" in self.proc.output() or not self.proc.running(), 10) \
                or not self.proc.running():
            self.proc.stop()
            raise RuntimeError(f"{name} did not start listening on {bind_ip}:{port}: {self.proc.output()[-300:]}")

    def stop(self) -> None:
        # SIGTERM closes the endpoint; every open connection then writes its line.
        self.proc.stop(grace_s=5.0)


def client_argv(server_ip: str, port: int, size: str | int, args: list[str], timeout_s: float,
                duration_s: Optional[float] = None) -> list[str]:
    argv = [_binary(CLIENT_BIN), "--server", f"{server_ip}:{port}", "--size", str(size),
            "--timeout-s", f"{timeout_s:g}", *args]
    return argv + (["--duration-s", f"{duration_s:g}"] if duration_s else [])


def fetch(node, server_ip: str, port: int, size_bytes: int, args: list[str], workdir: Path, instance,
          timeout_s: float, log_name: str = "quic-client.json") -> dict:
    """Fetch one object; the client's JSON report (also kept in workdir/log_name)."""
    proc = NodeProcess(node, client_argv(server_ip, port, size_bytes, args, timeout_s), instance, "quic client",
                       log_path=workdir / log_name)
    rc = proc.wait(timeout=timeout_s + 10)
    proc.stop()
    report = client_report(proc.output())
    if rc != 0 or report is None or not report.get("ok"):
        why = (report or {}).get("error") or proc.output()[-300:]
        raise RuntimeError(f"the QUIC fetch of {size_bytes} bytes failed (exit {rc}): {why}")
    return report


def long_client(node, server_ip: str, port: int, args: list[str], seconds: float, workdir: Path, instance,
                log_name: str = "quic-long-client.json") -> NodeProcess:
    """A bulk QUIC flow from the server to this node for `seconds` at most (stopped earlier
    by SIGTERM at teardown, after which it writes its report)."""
    return NodeProcess(node, client_argv(server_ip, port, LONG_OBJECT, args, seconds + 30, seconds),
                       instance, "quic long client", log_path=workdir / log_name)


def client_report(text: str) -> Optional[dict]:
    """The client's JSON object from its log (stderr lines may surround it)."""
    return last_json_object(text)


def server_connections(path: Path) -> list[dict]:
    """The established connections of a server's --stats file (missing file: none)."""
    return established_connections(path) or []


def controller_kind(connection: dict) -> str:
    """What a connection's controller actually ran, by the server's own account: a Blitzstart
    server that got no hint (or could not apply it) starts as the CUBIC IW32 baseline; the
    sender's name prefixes Google QUIC's (implementations.quic.controller_name)."""
    cc = str(connection.get("cc", ""))
    if cc == "blitz" and not connection.get("hint_applied"):
        cc = "cubic-iw32"
    return controller_name(cc, str(connection.get("sender", "rfc9438")))
