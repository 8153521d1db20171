"""quic-go (the Go module proxy): hosts/stacks/quicgo, a program written here over its
library, built by provisioning with the Go its go.mod asks for."""
from __future__ import annotations

import re
from pathlib import Path

from hosts.stacks.contract import STACK_BUILDS, Adapter, Start

BINARY = STACK_BUILDS / "startlab-quicgo"
GO_MOD = Path(__file__).with_name("quicgo") / "go.mod"


def pinned() -> str:
    """The quic-go version go.mod pins."""
    m = re.search(r"github\.com/quic-go/quic-go (v\S+)", GO_MOD.read_text())
    if m is None:
        raise RuntimeError(f"{GO_MOD} pins no quic-go")
    return m.group(1)


class QuicGo(Adapter):
    name = "quicgo"
    summary = "quic-go (Go): its only congestion control, NewReno with HybridSlowStart, 32 datagrams of 1280 bytes, paced"
    controllers = ("reno",)
    default_cc = "reno"
    rounds_paced = True
    qlog_serialisation = "JSON-SEQ"
    pinned_in = "hosts/stacks/quicgo/go.mod"

    def program(self) -> list[str]:
        return [str(BINARY)]

    def pin(self) -> str:
        return pinned()

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        # sent_packet_handler.go builds its sender with NewCubicSender(..., true /* use Reno */).
        return Start(iw_bytes=32 * 1280, datagram_bytes=1280, paced=True,
                     source="quic-go internal/congestion/cubic_sender.go: initialCongestionWindow = 32 packets "
                            "of initialMaxDatagramSize (1280); internal/congestion/pacer.go")
