"""Jump Start (Liu, Allman, Jin, Wang, PFLDnet 2007): no slow start at all.

Server (the sender): accepted sockets get the Jump Start congestion control of
jumpstart.bpf.c (beside this module) over the kernel's Reno or CUBIC — D = min(receiver's
window, data queued) segments paced over the handshake RTT, ended by the first ACK of new
data; a loss among those segments halves cwnd and, when recovery ends, cuts it to
half of what the first round delivered. The socket also gets a send buffer large
enough that the whole response is queued before the first segment leaves (otherwise
the kernel's initial send buffer, sized from IW10, would be "the data queued").

Client (the receiver): a receive buffer and an initial receive window large enough
that the advertised window does not cap D (the defaults cap it near 64 KB).
"""
from __future__ import annotations

import socket

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.receiver import RECEIVER_PARAMS, open_receive_window, restore_receive_window

CCS = loader.congestion_controls(__file__)


class JumpStart(Implementation):
    name = "jumpstart"
    summary = "Jump Start: the whole window (min(rwnd, queued)) paced over the first RTT"
    roles = ("server", "client")
    params = {
        "base_cc": Param("cubic", "server: congestion control after the first RTT",
                         choices=("cubic", "reno")),
        "sndbuf": Param(8 << 20, "server: SO_SNDBUF of accepted sockets in bytes (the kernel doubles it)",
                        low=65536, high=1 << 30),
        **RECEIVER_PARAMS,
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT] if role == "server" else []

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            sndbuf = loader.SockOpt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(params["sndbuf"]))
            config = loader.NodeConfig(flags=loader.SERVER_CC, accept_opts=(sndbuf,),
                                       cc=CCS.name(ctx.instance, f"js_{params['base_cc']}"))
            loader.set_node(ctx.instance, node, config)
            return
        open_receive_window(node, ctx, params)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            loader.clear_node(ctx.instance, node)
            return
        restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # D = min(rwnd, queued) is the first flight: sized at run time, checked by the wire tests.
        return Declared(cc=(f"js_{params['base_cc']}",), iw=None) if role == "server" else None


IMPLEMENTATION = JumpStart()
