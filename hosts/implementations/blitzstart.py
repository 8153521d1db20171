"""Blitzstart over TCP (Rüth et al., "Blitz-starting QUIC Connections", §3).

Client: its SYNs carry a bandwidth hint and an access-technology code in an RFC 6994
experimental TCP option (kind 253, ExID 0x5354; wire/blitzstart.py), written
by the sock_ops program. The hint is `factor` × the profile's true bottleneck rate,
as in the paper's Table 1 (0.5x … 4.0x), unless `hint_kbps` gives it outright.

Server: when it accepts a connection whose SYN has the hint, cwnd = hint × the
handshake RTT (ssthresh = cwnd: congestion avoidance from the start), paced over 75 %
of the RTT for the first RTT, then the kernel's CUBIC. Connections without the hint
keep the kernel's default start.

The client also opens its receive window (as Jump Start's client does): the default
first window of ~64 KB would otherwise cap every hinted window above 45 segments.
"""
from __future__ import annotations

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.jumpstart import (IRW_DEFAULT, RCVBUF_DEFAULT, open_receive_window,
                                             restore_receive_window)
from wire.blitzstart import TECHNOLOGIES, hint_kbps

CCS = loader.congestion_controls(__file__)


class Blitzstart(Implementation):
    name = "blitzstart"
    summary = "Blitzstart: the client hints its bandwidth on the SYN; the server starts at hint × RTT"
    roles = ("server", "client")
    params = {
        "factor": Param(1.0, "client: hint as a factor of the profile's true bottleneck rate",
                        low=0.01, high=100.0),
        "hint_kbps": Param(0, "client: the hint in kbit/s outright (0 = use factor)", low=0, high=2 ** 32 - 1),
        "tech": Param("unknown", "client: access technology sent with the hint",
                      choices=tuple(TECHNOLOGIES)),
        "rcvbuf": Param(RCVBUF_DEFAULT, "client: initial receive buffer (tcp_rmem default) in bytes",
                        low=65536, high=1 << 30),
        "irw": Param(IRW_DEFAULT, "client: initial receive window in segments (route initrwnd)",
                     low=10, high=100000, integer=True),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT] if role == "server" else [loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            config = loader.NodeConfig(flags=loader.SERVER_BLITZ, cc=CCS.name(ctx.instance, "blitz"))
        else:
            kbps = int(params["hint_kbps"]) or hint_kbps(ctx.rate_bps, float(params["factor"]))
            config = loader.NodeConfig(flags=loader.CLIENT_HINT, hint_kbps=kbps,
                                       tech=TECHNOLOGIES[params["tech"]])
            open_receive_window(node, ctx, int(params["rcvbuf"]), int(params["irw"]))
        loader.set_node(ctx.instance, node, config)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        if role == "client":
            restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # Its clients hint, so every connection gets the Blitzstart CC with hint × RTT
        # (the window is checked by the wire tests).
        return Declared(cc=("blitz",), iw=None) if role == "server" else None


IMPLEMENTATION = Blitzstart()
