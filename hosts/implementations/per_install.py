"""A startlab congestion control over the kernel's CUBIC whose settings are per install.

The install's generation (1..255) travels in the accepted sockets' mark, beside the
scheme's tag (tag in the top byte, generation in the next), set by the sock_ops program
before it hands the socket the congestion control; the settings sit in the object's
configuration map under that generation; per-connection event maps are keyed with it too.
The maps outlive a run (they belong to the network's instance), so a run reads only its
own install's connections. Careful Resume and HyStart++ are built this way.
"""
from __future__ import annotations

import itertools
import socket
import struct
from typing import Callable

from hosts.bpf import loader
from hosts.implementations.base import InstallContext
from hosts.implementations.linux_tcp import LinuxTcp

CONN_FORMAT = "<IIHHI"                   # the event maps' key: saddr, daddr, sport, dport, generation


class PerInstall:
    def __init__(self, ccs: loader.CongestionControls, kind: str, tag: int, config_map: str, events_map: str):
        self.ccs, self.kind, self.tag = ccs, kind, tag
        self.config_map, self.events_map = config_map, events_map
        self._next = itertools.count(1)
        self._installed: dict[tuple[str, str], int] = {}

    def install(self, node, role: str, ctx: InstallContext, iw: int, config: bytes) -> None:
        """CUBIC from `iw` in the namespace, then this install's settings and congestion control."""
        LinuxTcp().install(node, role, LinuxTcp().resolve({"cc": "cubic", "iw": iw}), ctx)
        generation = next(self._next) % 255 + 1
        self._installed[(ctx.instance.prefix, node.name)] = generation
        self.ccs.update_map(ctx.instance, self.config_map, struct.pack("<I", generation), config)
        mark = self.tag | generation << 16
        loader.set_node(ctx.instance, node, loader.NodeConfig(
            flags=loader.SERVER_CC, cc=self.ccs.name(ctx.instance, self.kind),
            accept_opts=(loader.SockOpt(socket.SOL_SOCKET, socket.SO_MARK, mark),)))

    def remove(self, node, role: str, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        LinuxTcp().remove(node, role, LinuxTcp().resolve({"cc": "cubic"}), ctx)

    def logs(self, node, ctx: InstallContext, decode: Callable[[bytes, bytes], dict]) -> list[dict]:
        """This install's connections from the event map, each decoded."""
        mine = self._installed.get((ctx.instance.prefix, node.name))
        return [decode(k, v) for k, v in self.ccs.dump_map(ctx.instance, self.events_map)
                if struct.unpack(CONN_FORMAT, k)[-1] == mine]


def connection(key: bytes) -> dict:
    """An event map key's addresses as the run records them."""
    saddr, daddr, sport, dport, _ = struct.unpack(CONN_FORMAT, key)
    return {"local": f"{socket.inet_ntoa(struct.pack('<I', saddr))}:{sport}",
            "remote": f"{socket.inet_ntoa(struct.pack('<I', daddr))}:{dport}"}


def events(value: bytes, event_format: str, capacity: int) -> tuple[int, list[tuple]]:
    """An event map value: (the MSS, each logged event's fields). The layout both schemes
    share: a count and the MSS (two u32), then `capacity` events of `event_format`."""
    n, mss = struct.unpack_from("<II", value)
    size = struct.calcsize(event_format)
    return mss, [struct.unpack_from(event_format, value, 8 + i * size) for i in range(min(n, capacity))]
