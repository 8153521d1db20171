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
from topologies import endhosts
from machine.shell import check_cmd

SAVED = "_stl_rwnd_saved"          # attribute on the Mininet node: what install changed
RCVBUF_DEFAULT = 8 << 20
IRW_DEFAULT = 2000
CCS = loader.congestion_controls(__file__)


def open_receive_window(node, ctx: InstallContext, rcvbuf: int, irw: int) -> None:
    """A receiver whose first advertised window is irw segments, not the ~64 KB default.

    The initial window is min(receive buffer space, route initrwnd × MSS), and the
    space is about half of tcp_rmem's default: both must grow. Shared with Blitzstart,
    whose hinted window must not be capped by the receiver either.
    """
    rmem = check_cmd(node, "sysctl -n net.ipv4.tcp_rmem").split()
    if getattr(node, SAVED, None) is None:
        setattr(node, SAVED, {"tcp_rmem": " ".join(rmem)})
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_rmem='{rmem[0]} {rcvbuf} {max(int(rmem[2]), rcvbuf)}'")
    endhosts.set_route(node, ctx.gateway, ctx.defaults.iw, irw)


def restore_receive_window(node, ctx: InstallContext) -> None:
    saved = getattr(node, SAVED, None)
    if saved is not None:
        check_cmd(node, f"sysctl -qw net.ipv4.tcp_rmem='{saved['tcp_rmem']}'")
        delattr(node, SAVED)
    endhosts.set_route(node, ctx.gateway, ctx.defaults.iw)


class JumpStart(Implementation):
    name = "jumpstart"
    summary = "Jump Start: the whole window (min(rwnd, queued)) paced over the first RTT"
    roles = ("server", "client")
    params = {
        "base_cc": Param("cubic", "server: congestion control after the first RTT",
                         choices=("cubic", "reno")),
        "sndbuf": Param(8 << 20, "server: SO_SNDBUF of accepted sockets in bytes (the kernel doubles it)",
                        low=65536, high=1 << 30),
        "rcvbuf": Param(RCVBUF_DEFAULT, "client: initial receive buffer (tcp_rmem default) in bytes",
                        low=65536, high=1 << 30),
        "irw": Param(IRW_DEFAULT, "client: initial receive window in segments (route initrwnd)", low=10, high=100000,
                     integer=True),
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
        open_receive_window(node, ctx, int(params["rcvbuf"]), int(params["irw"]))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            loader.clear_node(ctx.instance, node)
            return
        restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # D = min(rwnd, queued) is the first flight: sized at run time, checked by the wire tests.
        return Declared(cc=(f"js_{params['base_cc']}",), iw=None) if role == "server" else None


IMPLEMENTATION = JumpStart()
