"""A client whose receive window does not cap a sender that skips or outgrows slow start.

A default Linux receiver advertises about 64 KB first and opens its window about 2x a
round, so Jump Start's whole first flight, Blitzstart's and Quick-Start's hinted or
approved window, Rapid Start's or SUSS's faster-than-doubling growth, and Careful Resume's
or Fast Start's restart from a saved window would be held to what the receiver allows
(measured: a Careful Resume jump of 543 segments on geo-sat sent 56, the client's window).
A scheme that declares RECEIVER_PARAMS opens the window on its client with
open_receive_window and restores it with restore_receive_window; the implementation
`open-receiver` is that client alone, for a variant whose scheme has no client part, so
that a race compares senders and not receivers.
"""
from __future__ import annotations

from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from machine.shell import check_cmd
from topologies import endhosts

SAVED = "_stl_rwnd_saved"          # attribute on the Mininet node: what open_receive_window changed

RECEIVER_PARAMS = {
    "rcvbuf": Param(8 << 20, "client: initial receive buffer (tcp_rmem default) in bytes", low=65536,
                    high=1 << 30),
    "irw": Param(2000, "client: initial receive window in segments (route initrwnd)", low=10, high=100000,
                 integer=True),
}


def open_receive_window(node, ctx: InstallContext, params: dict) -> None:
    """A receiver whose first advertised window is `irw` segments, not the ~64 KB default.

    The initial window is min(receive buffer space, route initrwnd × MSS), and the space
    is about half of tcp_rmem's default: both must grow.
    """
    rcvbuf = int(params["rcvbuf"])
    rmem = check_cmd(node, "sysctl -n net.ipv4.tcp_rmem").split()
    if getattr(node, SAVED, None) is None:
        setattr(node, SAVED, {"tcp_rmem": " ".join(rmem)})
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_rmem='{rmem[0]} {rcvbuf} {max(int(rmem[2]), rcvbuf)}'")
    endhosts.set_route(node, ctx.gateway, ctx.defaults.iw, int(params["irw"]))


def restore_receive_window(node, ctx: InstallContext) -> None:
    """The namespace's tcp_rmem and route as they were before open_receive_window."""
    saved = getattr(node, SAVED, None)
    if saved is not None:
        check_cmd(node, f"sysctl -qw net.ipv4.tcp_rmem='{saved['tcp_rmem']}'")
        delattr(node, SAVED)
    endhosts.set_route(node, ctx.gateway, ctx.defaults.iw)


class OpenReceiver(Implementation):
    name = "open-receiver"
    summary = "a client whose first advertised window is irw segments: a receiver that caps no sender's start"
    roles = ("client",)
    params = RECEIVER_PARAMS

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        open_receive_window(node, ctx, params)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        return None


IMPLEMENTATION = OpenReceiver()
