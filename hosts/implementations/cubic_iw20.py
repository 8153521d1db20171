"""CUBIC from an initial window of 20 segments, set by its own congestion control (cubic20
of cubic_iw20.bpf.c, beside this module) rather than by the route's initcwnd: the smallest
scheme with a kernel part.

Server only: its accepted sockets get cubic20 from the sock_ops program's generic path
(SERVER_CC, no socket options). Connections it opens itself, and the client, keep the
namespace's TCP.
"""
from __future__ import annotations

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext

CCS = loader.congestion_controls(__file__)
KIND = "cubic20"
IW = 20                          # the window cubic_iw20.bpf.c sets


class CubicIw20(Implementation):
    name = "cubic-iw20"
    summary = "CUBIC whose accepted connections start from 20 segments (its own congestion control)"
    roles = ("server",)

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        config = loader.NodeConfig(flags=loader.SERVER_CC, cc=CCS.name(ctx.instance, KIND))
        loader.set_node(ctx.instance, node, config)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)

    def declares(self, role, params, defaults) -> Declared | None:
        return Declared(cc=(KIND,), iw=IW) if role == "server" else None


IMPLEMENTATION = CubicIw20()
