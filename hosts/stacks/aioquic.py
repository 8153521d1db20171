"""aioquic (PyPI), pure Python over a C buffer module: hosts/stacks/aioquic_endpoint.py,
run by the Python of its own venv, which provisioning makes (.stacks/aioquic)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from hosts.stacks.contract import BUILD_HINT, STACK_VENVS, Adapter, Start

PYTHON = STACK_VENVS / "aioquic" / "bin" / "python"
ENDPOINT = Path(__file__).with_name("aioquic_endpoint.py")


class Aioquic(Adapter):
    name = "aioquic"
    summary = "aioquic (Python): Reno by default or CUBIC, 10 datagrams of 1200 bytes, always paced"
    controllers = ("reno", "cubic")
    default_cc = "reno"
    qlog_serialisation = "JSON"

    def program(self) -> list[str]:
        # -P: the script's directory stays off sys.path, where this module would shadow aioquic.
        return [str(PYTHON), "-P", str(ENDPOINT)]

    def version(self) -> Optional[str]:
        return self.built_version() if PYTHON.is_file() else None

    def unavailable(self) -> Optional[str]:
        have = self.version()
        if have is None:
            return f"{PYTHON} has no aioquic; {BUILD_HINT}"
        if have != self.pin():
            return f"{PYTHON} has aioquic {have}, hosts/stacks/pins.yml pins {self.pin()}; {BUILD_HINT}"
        return None

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        return Start(iw_bytes=10 * 1200, datagram_bytes=1200, paced=True,
                     source="aioquic/quic/congestion/base.py: K_INITIAL_WINDOW = 10 datagrams of "
                            "max_datagram_size (configuration.py: 1200); recovery.py's QuicPacketPacer")
