"""ngtcp2 (Debian's packages): the library's own example programs over GnuTLS,
`gtlsserver` and `gtlsclient`, which speak HTTP/3 (nghttp3) and already meet the contract:
the server generates an object of N bytes for the path /N (up to --max-dyn-length), the
client downloads it into a directory, and both write qlog.

Debian 12 ships 0.12.1, old beside ngtcp2's 1.x, but the real stack; its version is read
back from the package database."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

from hosts.stacks.contract import BUILD_HINT, Fetched, Stack, Start, Tls

SERVER, CLIENT = "gtlsserver", "gtlsclient"
PACKAGES = ("ngtcp2-server", "ngtcp2-client")
MAX_OBJECT = "1G"                      # the largest generated object (the example's default is 20M)


class Ngtcp2(Stack):
    name = "ngtcp2"
    summary = "ngtcp2 (C, Debian's 0.12.1 examples, HTTP/3): CUBIC by default, Reno, BBR or BBRv2; RFC 9002's window, paced"
    controllers = ("cubic", "reno", "bbr", "bbr2")
    default_cc = "cubic"
    rounds_paced = False
    qlog_serialisation = "JSON-SEQ"

    def version(self) -> Optional[str]:
        versions = set()
        for pkg in PACKAGES:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", pkg], capture_output=True, text=True)
            if out.returncode != 0 or not out.stdout.startswith("install ok installed"):
                return None
            versions.add(out.stdout.split()[-1])
        return versions.pop() if len(versions) == 1 else " / ".join(sorted(versions))

    def unavailable(self) -> Optional[str]:
        missing = [p for p in (SERVER, CLIENT) if shutil.which(p) is None]
        have = self.version()
        if missing or have is None:
            return f"Debian's {' and '.join(PACKAGES)} are not installed; {BUILD_HINT}"
        if have.split("+")[0] != self.pin():
            return f"Debian's ngtcp2 here is {have}, hosts/stacks/pins.yml pins {self.pin()}"
        return None

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        # ngtcp2_cc.c: ngtcp2_cc_compute_initcwnd(max_tx_udp_payload_size) is RFC 9002's
        # min(10 × size, max(2 × size, 14720)); the example sets the size to 1452.
        return Start(iw_bytes=min(10 * 1452, max(2 * 1452, 14720)), datagram_bytes=1452, paced=True,
                     source="ngtcp2 0.12 lib/ngtcp2_cc.c ngtcp2_cc_compute_initcwnd (RFC 9002, 7.2) with the "
                            "examples' max_tx_udp_payload_size 1452; pacing in ngtcp2_conn.c")

    def server_argv(self, listen_ip: str, port: int, cc: str, tls: Tls, qlog_dir: Optional[Path],
                    workdir: Path) -> list[str]:
        self.check_cc(cc)
        docroot = workdir / "ngtcp2-htdocs"      # empty: every object is generated
        docroot.mkdir(parents=True, exist_ok=True)
        return [SERVER, "--quiet", f"--htdocs={docroot}", f"--cc={cc}", f"--max-dyn-length={MAX_OBJECT}",
                *([f"--qlog-dir={qlog_dir}"] if qlog_dir else []), listen_ip, str(port), str(tls.key), str(tls.cert)]

    def client_argv(self, server_ip: str, port: int, size: int, cc: str, qlog_dir: Optional[Path],
                    workdir: Path, timeout_s: float) -> list[str]:
        out = workdir / "ngtcp2-download"
        out.mkdir(parents=True, exist_ok=True)
        (out / str(size)).unlink(missing_ok=True)
        qlog = [f"--qlog-dir={qlog_dir}"] if qlog_dir else []
        return [CLIENT, "--quiet", "--exit-on-all-streams-close", f"--download={out}",
                *qlog, server_ip, str(port), f"https://{server_ip}:{port}/{size}"]

    def fetched(self, stdout: str, returncode: int, size: int, workdir: Path) -> Fetched:
        """The example reports nothing: the downloaded file's size is what it got."""
        path = workdir / "ngtcp2-download" / str(size)
        got = path.stat().st_size if path.is_file() else 0
        ok = returncode == 0 and got == size
        return Fetched(ok, got, None, "" if ok else f"exit {returncode}, {got} of {size} bytes: {stdout[-300:]}")
