"""aioquic (PyPI), pure Python over a C buffer module: hosts/stacks/aioquic_endpoint.py,
run by the Python of its own venv, which provisioning makes (.stacks/aioquic)."""
from __future__ import annotations

from pathlib import Path

from hosts.stacks.contract import STACK_VENVS, Adapter, Start

PYTHON = STACK_VENVS / "aioquic" / "bin" / "python"
ENDPOINT = Path(__file__).with_name("aioquic_endpoint.py")


class Aioquic(Adapter):
    name = "aioquic"
    summary = "aioquic (Python): Reno by default or CUBIC, 10 datagrams of 1200 bytes, always paced"
    controllers = ("reno", "cubic")
    default_cc = "reno"
    rounds_paced = True
    qlog_serialisation = "JSON"

    def program(self) -> list[str]:
        # -P: the script's directory stays off sys.path, where this module would shadow aioquic.
        return [str(PYTHON), "-P", str(ENDPOINT)]

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        return Start(iw_bytes=10 * 1200, datagram_bytes=1200, paced=True,
                     source="aioquic/quic/congestion/base.py: K_INITIAL_WINDOW = 10 datagrams of "
                            "max_datagram_size (configuration.py: 1200); recovery.py's QuicPacketPacer")
