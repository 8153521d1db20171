"""The endpoint contract every third-party QUIC stack meets (the QUIC interop runner's
idea, for startup): a server on IP:PORT serves an object of any size its path names; a
client fetches one object of a given size and says how many bytes it got; both write a
qlog into a directory of their own where the stack can. The stack's own congestion control
runs, chosen by its own option (`controllers`); nothing startlab wrote sits in its data path.

A stack is one adapter: the programs it runs (a thin program written here over the stack's
library, or the stack's own example programs where they meet the contract), what its
sources say about how it starts (`Start`), and how its qlog is serialised. Comparing N
stacks is a loop over `hosts.stacks.STACKS`.
"""
from __future__ import annotations

import subprocess
from functools import cache
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from machine.binaries import REPO
from wire.quic_report import last_json_object

# Where provisioning builds the stacks' programs and venvs (playbooks/site.yml).
STACK_BUILDS = REPO / "target" / "stacks"
STACK_VENVS = REPO / ".stacks"
BUILD_HINT = "install it with: sudo ./playbooks/bootstrap.sh (the full stage builds the QUIC stacks)"
PINS = Path(__file__).with_name("pins.yml")


@cache
def pinned(name: str) -> str:
    """The version pins.yml pins for a stack provisioning installs from a registry."""
    import yaml
    return str(yaml.safe_load(PINS.read_text())[name])


@dataclass(frozen=True)
class Start:
    """How a stack starts a connection, by its own sources (cited in `source`): the first
    window in bytes, the datagram size it starts with, whether it paces."""
    iw_bytes: int
    datagram_bytes: int
    paced: bool
    source: str


@dataclass(frozen=True)
class Fetched:
    """A client's account of its fetch: the bytes it got, and where the adapter times it,
    its FCT from the dial to the last byte (None: the stack's program does not say)."""
    ok: bool
    bytes: int
    fct_s: Optional[float]
    error: str = ""


class Stack:
    name: str                            # the catalogue's prefix: ngtcp2-cubic, quicgo-reno
    summary: str
    controllers: tuple[str, ...]         # the congestion controls the stack offers
    default_cc: str
    qlog_serialisation: str              # "JSON" or "JSON-SEQ", as its files declare ("": it writes none)
    # What wire/qlog_events finds wrong in every qlog of this stack's, word for word: shown
    # on the reference page, and the wire test fails when a file has any other fault (or
    # loses one of these: the stack changed).
    qlog_deviations: tuple[str, ...] = ()
    # Whether its rounds after the first leave paced, as its wire shows on the wire test's
    # path (hosts/quic/quic_net.rounds_paced; docs/quic-stacks.md has the figures): asserted
    # there, so a stack that changes how it sends is caught. Beside `Start.paced`, what its
    # sources say: where the two differ, the page says so.
    rounds_paced: bool

    def pin(self) -> str:
        """The version provisioning installs (pins.yml, or the adapter's own manifest)."""
        return pinned(self.name)

    def version(self) -> Optional[str]:
        """The installed version, read back from what runs (None: not installed)."""
        raise NotImplementedError

    def unavailable(self) -> Optional[str]:
        """Why the stack cannot run here, or None."""
        raise NotImplementedError

    def start(self, cc: str) -> Start:
        raise NotImplementedError

    def server_argv(self, listen_ip: str, port: int, cc: str, tls: "Tls", qlog_dir: Optional[Path],
                    workdir: Path) -> list[str]:
        """The server, serving every object size; it is ready once its UDP port is bound
        (hosts/stacks/endpoints.start_server waits for that, whatever the program prints)."""
        raise NotImplementedError

    def client_argv(self, server_ip: str, port: int, size: int, cc: str, qlog_dir: Optional[Path],
                    workdir: Path, timeout_s: float) -> list[str]:
        raise NotImplementedError

    def fetched(self, stdout: str, returncode: int, size: int, workdir: Path) -> Fetched:
        """The client's result, from its output (or what it wrote into `workdir`)."""
        report = last_json_object(stdout)
        if report is None:
            return Fetched(False, 0, None, f"no report (exit {returncode}): {stdout[-300:]}")
        got = int(report.get("bytes") or 0)
        ok = bool(report.get("ok")) and returncode == 0 and got == size
        return Fetched(ok, got, report.get("fct_s"), str(report.get("error") or ""))

    def qlog_files(self, qlog_dir: Path) -> list[Path]:
        return sorted(p for p in Path(qlog_dir).iterdir() if p.is_file() and p.suffix in (".qlog", ".sqlog"))

    def check_cc(self, cc: str) -> None:
        if cc not in self.controllers:
            raise ValueError(f"{self.name} has no congestion control '{cc}' (it has: {', '.join(self.controllers)})")


class Adapter(Stack):
    """A stack behind a program written here (hosts/stacks/<stack>/ or <stack>_endpoint.py),
    which takes one set of flags whatever the stack:

        PROGRAM server --listen IP:PORT --cert C --key K [--cc CC] [--qlog-dir D]
        PROGRAM client --server IP:PORT --size N --timeout-s T [--cert C] [--qlog-dir D]

    and whose client prints one JSON line (ok, bytes, fct_s, handshake_s, version)."""
    writes_qlog = True
    # A client that verifies the server's certificate is given it (s2n-quic's always does).
    client_trusts_cert = False
    pinned_in = "hosts/stacks/pins.yml"   # where `pin` reads the version, for messages

    def program(self) -> list[str]:
        raise NotImplementedError

    def version(self) -> Optional[str]:
        return self.built_version() if Path(self.program()[0]).is_file() else None

    def unavailable(self) -> Optional[str]:
        have = self.version()
        if have is None:
            return f"{self.name} is not installed ({' '.join(self.program())} version failed); {BUILD_HINT}"
        if have != self.pin():
            return f"{self.name} {have} is installed, {self.pinned_in} pins {self.pin()}; {BUILD_HINT}"
        return None

    def server_argv(self, listen_ip: str, port: int, cc: str, tls: "Tls", qlog_dir: Optional[Path],
                    workdir: Path) -> list[str]:
        self.check_cc(cc)
        return [*self.program(), "server", "--listen", f"{listen_ip}:{port}", "--cert", str(tls.cert),
                "--key", str(tls.key), *(["--cc", cc] if len(self.controllers) > 1 else []),
                *(["--qlog-dir", str(qlog_dir)] if qlog_dir and self.writes_qlog else [])]

    def client_argv(self, server_ip: str, port: int, size: int, cc: str, qlog_dir: Optional[Path],
                    workdir: Path, timeout_s: float) -> list[str]:
        cert = ["--cert", str(Tls.make(workdir / "tls").cert)] if self.client_trusts_cert else []
        return [*self.program(), "client", "--server", f"{server_ip}:{port}", "--size", str(size),
                "--timeout-s", f"{timeout_s:g}", *cert,
                *(["--qlog-dir", str(qlog_dir)] if qlog_dir and self.writes_qlog else [])]

    def built_version(self) -> Optional[str]:
        """`PROGRAM version`: what the program was built with."""
        try:
            out = subprocess.run([*self.program(), "version"], capture_output=True, text=True, timeout=30)
        except OSError:
            return None
        return (out.stdout.strip() or None) if out.returncode == 0 else None


@dataclass(frozen=True)
class Tls:
    """A self-signed certificate for the servers (the clients do not verify it)."""
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> "Tls":
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / "cert.pem", directory / "key.pem"
        if not (cert.is_file() and key.is_file()):
            # The name is the certificate's subject and its SAN: clients that verify it
            # (s2n-quic's) connect to the name `startlab`.
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=startlab",
                            "-addext", "subjectAltName=DNS:startlab"],
                           check=True, capture_output=True)
        return cls(cert, key)
