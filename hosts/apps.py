"""The applications of the workloads: lighttpd (HTTP server), curl (client), iperf3 (bulk)."""
from __future__ import annotations

import json
from pathlib import Path

from hosts.process import NodeProcess, wait_until

HTTP_PORT = 80
IPERF_PORT = 5201


def listening(node, port: int) -> bool:
    return f":{port}" in node.cmd(f"ss -ltnH sport = :{port}")


def make_object(docroot: Path, size_bytes: int) -> str:
    """A file of exactly `size_bytes` in the docroot; returns its URL path."""
    docroot.mkdir(parents=True, exist_ok=True)
    name = f"obj-{size_bytes}.bin"
    path = docroot / name
    if not path.exists() or path.stat().st_size != size_bytes:
        # Incompressible content, so no layer could shrink it on the way.
        with open(path, "wb") as f:
            chunk = bytes((i * 167 + 13) % 251 for i in range(65536))
            left = size_bytes
            while left > 0:
                f.write(chunk[:min(left, len(chunk))])
                left -= len(chunk)
    return "/" + name


class Lighttpd:
    """lighttpd in a node, serving `docroot` on HTTP_PORT, config and logs in `workdir`."""

    def __init__(self, node, bind_ip: str, docroot: Path, workdir: Path, instance):
        conf = workdir / "lighttpd.conf"
        conf.write_text("\n".join([
            f'server.document-root = "{docroot}"',
            f'server.bind = "{bind_ip}"',
            f"server.port = {HTTP_PORT}",
            f'server.errorlog = "{workdir}/lighttpd-error.log"',
            'server.max-keep-alive-requests = 1000',
            'server.network-backend = "sendfile"',
            'mimetype.assign = ( "" => "application/octet-stream" )',
            "",
        ]))
        self.node = node
        self.proc = NodeProcess(node, ["lighttpd", "-D", "-f", str(conf)], instance, "lighttpd",
                                log_path=workdir / "lighttpd.log")
        if not wait_until(lambda: listening(node, HTTP_PORT) or not self.proc.running(), 10):
            self.proc.stop()
            raise RuntimeError("lighttpd did not start listening")
        if not self.proc.running():
            raise RuntimeError(f"lighttpd exited: {self.proc.output()[-300:]}")

    def stop(self) -> None:
        self.proc.stop()


class Iperf3Server:
    def __init__(self, node, workdir: Path, instance, port: int = IPERF_PORT):
        self.port = port
        self.proc = NodeProcess(node, ["iperf3", "-s", "-p", str(port)], instance, "iperf3 server",
                                log_path=workdir / "iperf3-server.log")
        if not wait_until(lambda: listening(node, port) or not self.proc.running(), 10):
            self.proc.stop()
            raise RuntimeError("iperf3 server did not start listening")

    def stop(self) -> None:
        self.proc.stop()


def iperf3_reverse_client(node, server_ip: str, seconds: float, workdir: Path, instance,
                          port: int = IPERF_PORT) -> NodeProcess:
    """A bulk flow from the server to this node (iperf3 -R), running in the background."""
    return NodeProcess(node, ["iperf3", "-c", server_ip, "-p", str(port), "-R", "-t", f"{seconds:.0f}",
                              "-i", "0", "-J"],
                       instance, "iperf3 client", log_path=workdir / "iperf3-client.json")


def curl_fetch(node, url: str, workdir: Path, instance, timeout_s: float) -> dict:
    """Fetch `url` over HTTP/1.1; return curl's own figures (the analysis uses captures)."""
    fmt = '{"http_code":%{http_code},"size_download":%{size_download},"time_total":%{time_total}}'
    proc = NodeProcess(node, ["curl", "--http1.1", "-s", "-o", "/dev/null", "--max-time", f"{timeout_s:.0f}",
                              "-w", fmt, url], instance, "curl", log_path=workdir / "curl.json")
    rc = proc.wait(timeout=timeout_s + 5)
    proc.stop()
    if rc != 0:
        raise RuntimeError(f"curl {url} failed (exit {rc}): {proc.output()[-300:]}")
    return json.loads(proc.output())
