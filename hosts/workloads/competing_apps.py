"""The applications of the competing workload per transport: one interface, two sets.

The workload's traffic is the same whatever the transport (Pantheon's way: the scheme is
a parameter of one experiment, not a second experiment): a long flow from sv2 to cl2
fills the bottleneck, then cl1 fetches one object from sv1. Only the programs differ:

  tcp   lighttpd on sv1 and curl (HTTP/1.1) on cl1; iperf3 -R from sv2 to cl2;
  quic  startlab-quic-server on sv1 and a one-object startlab-quic-client on cl1; a second
        server on sv2 and a long-running client on cl2 (the paper: both flows QUIC).
  stack a third-party QUIC stack's own server on sv1 and its client on cl1 (hosts/stacks),
        the long flow kernel TCP as over tcp (iperf3 -R): every stack raced against the
        same TCP CUBIC flow, as the paper's TCP long flow.

A QUIC application takes its arguments from the variant installed on its node (the
server's controller, the client's hint), so a QUIC variant's scheme is exactly what its
endpoint runs, and a TCP variant on a QUIC run (or the reverse) is an error, never a
silent default.
"""
from __future__ import annotations

from pathlib import Path

from hosts import quic_endpoints
from hosts.implementations.stack import stack_choice
from hosts.stacks import stack
from hosts.stacks.contract import Tls
from hosts.stacks.endpoints import bound
from hosts.apps import HTTP_PORT, IPERF_PORT, Iperf3Server, Lighttpd, curl_fetch, iperf3_reverse_client
from hosts.process import NodeProcess, wait_until
from hosts.workloads.base import WorkloadError

TRANSPORTS = ("tcp", "quic", "stack")


class TcpApps:
    transport = "tcp"
    capture_filter = "tcp"
    short_port, long_port = HTTP_PORT, IPERF_PORT

    def serve_short(self, session, server, docroot: Path) -> None:
        n = session.names
        session.adopt("lighttpd", Lighttpd(server, n.server_ip(1), docroot, session.workdir, session.instance))

    def serve_long(self, session, long_server) -> None:
        session.adopt("iperf3 server", Iperf3Server(long_server, session.workdir, session.instance))

    def report(self, which: str) -> Path | None:
        """The endpoint report a flow is observed through (None: the kernel's sockets)."""
        return None

    def start_long(self, session, long_client, seconds: float, streams: int) -> NodeProcess:
        return iperf3_reverse_client(long_client, session.names.server_ip(2), seconds, session.workdir,
                                     session.instance, streams=streams)

    def fetch(self, session, client, url_path: str, size_bytes: int, timeout_s: float, prior: bool = False) -> dict:
        n = session.names
        curl = curl_fetch(client, f"http://{n.server_ip(1)}:{HTTP_PORT}{url_path}", session.workdir,
                          session.instance, timeout_s)
        if curl.get("http_code") != 200 or int(curl.get("size_download", -1)) != size_bytes:
            raise WorkloadError(f"the fetch returned {curl}, expected {size_bytes} bytes with status 200")
        return {"curl": curl}

    def spec(self) -> dict:
        return {}


class QuicApps:
    transport = "quic"
    capture_filter = "tcp or udp"
    short_port, long_port = quic_endpoints.QUIC_PORT, quic_endpoints.LONG_QUIC_PORT
    # Files in the run directory the analysis reads (FCT, the endpoints' counters).
    FILES = {"short": {"server_log": "quic-server-sv1.jsonl", "client_log": "quic-client.json"},
             "long": {"server_log": "quic-server-sv2.jsonl", "client_log": "quic-long-client.json"}}

    QLOG_DIR = "qlog"

    def __init__(self, qlog: bool = False) -> None:
        self.qlog = qlog

    def _server(self, session, node, index: int, port: int, which: str) -> None:
        args = session.endpoint_args(node, "server")
        if self.qlog:
            qlog_dir = session.workdir / self.QLOG_DIR
            qlog_dir.mkdir(exist_ok=True)
            args = [*args, "--qlog-dir", str(qlog_dir)]
        session.adopt(f"QUIC server {node.name}", quic_endpoints.QuicServer(
            node, session.names.server_ip(index), port, args, session.workdir / self.FILES[which]["server_log"],
            session.workdir, session.instance, name=f"quic-server-{node.name}"))

    def serve_short(self, session, server, docroot: Path) -> None:
        self._server(session, server, 1, self.short_port, "short")

    def serve_long(self, session, long_server) -> None:
        self._server(session, long_server, 2, self.long_port, "long")

    def report(self, which: str) -> Path:
        return Path(self.FILES[which]["server_log"])

    def start_long(self, session, long_client, seconds: float, streams: int) -> NodeProcess:
        if streams != 1:
            raise WorkloadError("a QUIC long flow is one connection (long_streams: 1)")
        return quic_endpoints.long_client(long_client, session.names.server_ip(2), self.long_port,
                                          session.endpoint_args(long_client, "client"), seconds,
                                          session.workdir, session.instance, self.FILES["long"]["client_log"])

    def fetch(self, session, client, url_path: str, size_bytes: int, timeout_s: float, prior: bool = False) -> dict:
        """The short flow's fetch (`prior`: an earlier one to the same server, whose report
        goes beside the measured fetch's rather than in its place)."""
        log = self.FILES["short"]["client_log"]
        report = quic_endpoints.fetch(client, session.names.server_ip(1), self.short_port, size_bytes,
                                      session.endpoint_args(client, "client"), session.workdir, session.instance,
                                      timeout_s, log.replace(".json", "-prior.json") if prior else log)
        if report.get("bytes") != size_bytes or not report.get("complete"):
            raise WorkloadError(f"the QUIC fetch got {report.get('bytes')} of {size_bytes} bytes")
        return {"quic_client": report}

    def spec(self) -> dict:
        qlog = {"qlog_dir": self.QLOG_DIR} if self.qlog else {}
        return {name: {**files, **qlog} for name, files in self.FILES.items()}


class StackApps(TcpApps):
    """The flow under test a third-party stack's, the long flow TCP's (TcpApps')."""
    transport = "stack"
    capture_filter = "tcp or udp"
    short_port = 4433
    # In the run directory: the qlogs of both ends (the server's: its windows; the
    # client's: where the stack's client reports no FCT, the time its last byte came).
    QLOG_DIR = "qlog"
    CLIENT_LOG = "stack-client.log"

    def _chosen(self, session, node, role: str):
        name, cc = stack_choice(session.endpoint_args(node, role))
        return stack(name), cc

    def _qlog(self, session, role: str) -> Path:
        d = session.workdir / self.QLOG_DIR / role
        d.mkdir(parents=True, exist_ok=True)
        return d

    def __init__(self) -> None:
        self.served: dict = {}

    def serve_short(self, session, server, docroot: Path) -> None:
        s, cc = self._chosen(session, server, "server")
        ip = session.names.server_ip(1)
        # What the analysis needs of the stack: its datagram size counts the first flight, and
        # where it writes no qlog, its sources' window is what that flight is checked against.
        start = s.start(cc)
        self.served = {"stack": s.name, "version": s.version(), "cc": cc, "datagram_bytes": start.datagram_bytes,
                       "iw_bytes": start.iw_bytes}
        # The stack's own files (its certificate, ngtcp2's generated objects) are not results.
        argv = s.server_argv(ip, self.short_port, cc, Tls.make(session.scratch / "tls"), self._qlog(session, "server"),
                             session.scratch)
        proc = session.adopt(f"{s.name} server", NodeProcess(server, argv, session.instance, f"{s.name} server",
                                                              log_path=session.workdir / f"{s.name}-server.log"))
        if not wait_until(lambda: bound(server, self.short_port) or not proc.running(), 10) or not proc.running():
            raise WorkloadError(f"{s.name}'s server did not bind {ip}:{self.short_port}: {proc.output()[-300:]}")

    def report(self, which: str) -> Path | None:
        return Path(self.QLOG_DIR) / "server" if which == "short" else None

    def fetch(self, session, client, url_path: str, size_bytes: int, timeout_s: float, prior: bool = False) -> dict:
        if prior:
            raise WorkloadError("transport stack runs one fetch (no prior_bytes)")
        s, cc = self._chosen(session, client, "client")
        argv = s.client_argv(session.names.server_ip(1), self.short_port, size_bytes, cc, self._qlog(session, "client"),
                             session.scratch, timeout_s)
        proc = NodeProcess(client, argv, session.instance, f"{s.name} client",
                           log_path=session.workdir / self.CLIENT_LOG)
        rc = proc.wait(timeout=timeout_s + 10)
        proc.stop()
        got = s.fetched(proc.output(), -1 if rc is None else rc, size_bytes, session.scratch)
        if not got.ok:
            raise WorkloadError(f"{s.name}'s fetch got {got.bytes} of {size_bytes} bytes: {got.error}")
        return {"stack_client": {"stack": s.name, "version": s.version(), "cc": cc, "bytes": got.bytes,
                                 "fct_s": got.fct_s}}

    def spec(self) -> dict:
        return {"short": {"qlog_dir": self.QLOG_DIR, "client_log": self.CLIENT_LOG, **self.served}}


def apps_for(transport: str, qlog: bool = False) -> TcpApps | QuicApps:
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport '{transport}' (known: {', '.join(TRANSPORTS)})")
    if transport == "stack":
        return StackApps()
    return QuicApps(qlog) if transport == "quic" else TcpApps()
