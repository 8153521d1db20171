"""The applications of the workloads: lighttpd (HTTP server), vsftpd (FTP server), curl
(client), iperf3 (bulk)."""
from __future__ import annotations

import json
from pathlib import Path

from hosts.process import NodeProcess, wait_until

HTTP_PORT = 80
IPERF_PORT = 5201
FTP_PORT = 21
FTP_DATA_PORTS = (40000, 40999)     # vsftpd's passive data ports: FTP data connections are these


def listening(node, port: int) -> bool:
    return f":{port}" in node.cmd(f"ss -ltnH sport = :{port}")


def start_server(node, argv: list[str], port: int, instance, what: str, log_path: Path) -> NodeProcess:
    """Start a server and wait until it listens on `port` (an error if it exits instead)."""
    proc = NodeProcess(node, argv, instance, what, log_path=log_path)
    if not wait_until(lambda: listening(node, port) or not proc.running(), 10) or not proc.running():
        proc.stop()
        raise RuntimeError(f"{what} did not start listening on port {port}: {proc.output()[-300:]}")
    return proc


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
    """lighttpd in a node, serving `docroot` on HTTP_PORT, config and logs in `workdir`.

    `extra` directives ("key = value") are added, replacing a default of the same key
    (lighttpd refuses a key set twice); `name` names the config and log files, so several
    servers of one run keep their own.
    """

    def __init__(self, node, bind_ip: str, docroot: Path, workdir: Path, instance, extra: tuple[str, ...] = (),
                 name: str = "lighttpd"):
        conf = workdir / f"{name}.conf"
        lines = [
            f'server.document-root = "{docroot}"',
            f'server.bind = "{bind_ip}"',
            f"server.port = {HTTP_PORT}",
            f'server.errorlog = "{workdir}/{name}-error.log"',
            'server.max-keep-alive-requests = 1000',
            'server.network-backend = "sendfile"',
            'mimetype.assign = ( "" => "application/octet-stream" )',
        ]
        overridden = {line.split("=", 1)[0].strip() for line in extra}
        lines = [line for line in lines if line.split("=", 1)[0].strip() not in overridden] + list(extra)
        conf.write_text("\n".join(lines + [""]))
        self.proc = start_server(node, ["lighttpd", "-D", "-f", str(conf)], HTTP_PORT, instance, "lighttpd",
                                 workdir / f"{name}.log")

    def stop(self) -> None:
        self.proc.stop()


class Vsftpd:
    """vsftpd in a node: anonymous, read-only, passive FTP of `root` on FTP_PORT, data
    connections from FTP_DATA_PORTS; config, log and its empty chroot in `workdir`.
    The seccomp sandbox is off (it refuses to start inside the hosts' namespaces)."""

    def __init__(self, node, bind_ip: str, root: Path, workdir: Path, instance, name: str = "vsftpd"):
        empty = workdir / f"{name}-empty"
        empty.mkdir(parents=True, exist_ok=True)
        conf = workdir / f"{name}.conf"
        conf.write_text("\n".join([
            "listen=YES", "listen_ipv6=NO", f"listen_address={bind_ip}", f"listen_port={FTP_PORT}",
            "background=NO", "anonymous_enable=YES", f"anon_root={root}", "no_anon_password=YES",
            "local_enable=NO", "write_enable=NO", "pasv_enable=YES",
            f"pasv_min_port={FTP_DATA_PORTS[0]}", f"pasv_max_port={FTP_DATA_PORTS[1]}",
            "seccomp_sandbox=NO", f"secure_chroot_dir={empty}", "xferlog_enable=YES",
            f"vsftpd_log_file={workdir / (name + '-xfer.log')}", "max_clients=0", "max_per_ip=0",
            "connect_from_port_20=NO", ""]))
        self.proc = start_server(node, ["vsftpd", str(conf)], FTP_PORT, instance, "vsftpd", workdir / f"{name}.log")

    def stop(self) -> None:
        self.proc.stop()


class Iperf3Server:
    def __init__(self, node, workdir: Path, instance, port: int = IPERF_PORT, log_name: str = "iperf3-server.log"):
        self.proc = start_server(node, ["iperf3", "-s", "-p", str(port)], port, instance, "iperf3 server",
                                 workdir / log_name)

    def stop(self) -> None:
        self.proc.stop()


def iperf3_reverse_client(node, server_ip: str, seconds: float, workdir: Path, instance,
                          port: int = IPERF_PORT, omit_s: float = 0, interval_s: float = 0,
                          streams: int = 1, log_name: str = "iperf3-client.json") -> NodeProcess:
    """Bulk flows from the server to this node (iperf3 -R), running in the background.

    Its JSON report lands in workdir/log_name; `interval_s` 0 means no interval reports,
    `omit_s` leaves the first seconds out of them; `streams` parallel connections.
    """
    argv = ["iperf3", "-c", server_ip, "-p", str(port), "-R", "-t", f"{seconds:.0f}",
            "-O", f"{omit_s:.0f}", "-i", f"{interval_s:g}", "-J", "-P", str(streams)]
    return NodeProcess(node, argv, instance, "iperf3 client", log_path=workdir / log_name)


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
