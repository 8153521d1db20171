"""The setup the HTTP wire tests share: a dumbbell of one link profile, the variant under
test on server 1 and client 1, lighttpd on the server with objects of the given sizes. The
test adds what it needs (a fault, its captures), starts its traffic, and reads the
captures in `work` once the block is left (teardown is done then, host flags final)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hosts.apps import HTTP_PORT, Lighttpd, make_object
from hosts.session import RunSession
from hosts.variants import get_variant
from links.profiles import LinkProfile
from topologies.network import Network


@dataclass
class WebPath:
    net: Network
    session: RunSession
    server: object              # the Mininet hosts
    client: object
    paths: list[str]            # of the objects, on the server
    work: Path                  # the run's files (captures, logs)

    @property
    def server_ip(self) -> str:
        return self.net.names.server_ip(1)

    @property
    def client_ip(self) -> str:
        return self.net.names.client_ip(1)

    def url(self, i: int = 0) -> str:
        return f"http://{self.server_ip}:{HTTP_PORT}{self.paths[i]}"


@contextmanager
def web_path(tmp: Path, prof: LinkProfile, variant: str, sizes) -> Iterator[WebPath]:
    with Network(prof, tmp / "net") as net:
        n = net.names
        server, client = net.host(n.server(1)), net.host(n.client(1))
        work = tmp / "run"
        work.mkdir()
        with RunSession(net, get_variant(variant), work, tmp / "scratch", get_variant) as s:
            s.install_under_test(server=[server], client=[client])
            paths = [make_object(s.scratch / "www", size) for size in sizes]
            s.adopt("lighttpd", Lighttpd(server, n.server_ip(1), s.scratch / "www", work, s.instance))
            yield WebPath(net, s, server, client, paths, work)
