"""A startlab congestion control over the kernel's CUBIC whose settings are per install.

The install's generation (1..255) travels in the accepted sockets' mark, beside the
scheme's tag (tag in the top byte, generation in the next), set by the sock_ops program
before it hands the socket the congestion control; the settings sit in the object's
configuration map under that generation; per-connection event maps are keyed with it too.
The maps outlive a run (they belong to the network's instance), so a run reads only its
own install's connections. Careful Resume, HyStart++ and the schemes of stl_sslog.h (Rapid
Start, SEARCH, SUSS) are built this way.
"""
from __future__ import annotations

import itertools
import socket
import struct
from abc import abstractmethod
from typing import Callable

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.receiver import open_receive_window, restore_receive_window
from hosts.implementations.linux_tcp import LinuxTcp

CONN_FORMAT = "<IIHHI"                   # the event maps' key: saddr, daddr, sport, dport, generation


class PerInstall:
    def __init__(self, ccs: loader.CongestionControls, kind: str, tag: int, config_map: str, events_map: str):
        self.ccs, self.kind, self.tag = ccs, kind, tag
        self.config_map, self.events_map = config_map, events_map
        self._next = itertools.count(1)
        self._installed: dict[tuple[str, str], int] = {}

    def install(self, node, role: str, ctx: InstallContext, iw: int, config: bytes, pacing: bool = False,
                pacing_ss_ratio: int = 200) -> None:
        """CUBIC from `iw` in the namespace, then this install's settings and congestion control;
        with `pacing`, the kernel's internal pacing for every connection (linux-tcp's), at
        `pacing_ss_ratio` % of cwnd/RTT in slow start."""
        LinuxTcp().install(node, role, LinuxTcp().resolve({"cc": "cubic", "iw": iw,
                                                           "pacing_ss_ratio": pacing_ss_ratio}), ctx)
        generation = next(self._next) % 255 + 1
        self._installed[(ctx.instance.prefix, node.name)] = generation
        self.ccs.update_map(ctx.instance, self.config_map, struct.pack("<I", generation), config)
        mark = self.tag | generation << 16
        loader.set_node(ctx.instance, node, loader.NodeConfig(
            flags=loader.SERVER_CC | (loader.PACE if pacing else 0), cc=self.ccs.name(ctx.instance, self.kind),
            accept_opts=(loader.SockOpt(socket.SOL_SOCKET, socket.SO_MARK, mark),)))

    def remove(self, node, role: str, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        LinuxTcp().remove(node, role, LinuxTcp().resolve({"cc": "cubic"}), ctx)

    def logs(self, node, ctx: InstallContext, decode: Callable[[bytes, bytes], dict],
             map_name: str | None = None) -> list[dict]:
        """This install's entries of the event map (or of `map_name`, another map whose keys
        end with the generation), each decoded."""
        mine = self._installed.get((ctx.instance.prefix, node.name))
        return [decode(k, v) for k, v in self.ccs.dump_map(ctx.instance, map_name or self.events_map)
                if struct.unpack_from("<I", k, len(k) - 4)[0] == mine]


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


SS_EVENTS = 48                           # stl_sslog.h STL_SS_EVENTS
SS_EVENT_FORMAT = "<QIIII4I"             # struct stl_ss_event


def slow_start_log(key: bytes, value: bytes, kinds: dict[int, tuple[str, tuple[str, ...]]]) -> dict:
    """One connection's log of stl_sslog.h: each event named by its code (`kinds`: code →
    (name, the names of its values)), with its round, window and ssthresh (segments)."""
    mss, logged = events(value, SS_EVENT_FORMAT, SS_EVENTS)
    out = []
    for t, what, rnd, cwnd, ssthresh, *values in logged:
        name, fields = kinds[what]
        out.append({"t_ns": t, "event": name, "round": rnd, "cwnd": cwnd, "ssthresh": ssthresh,
                    **dict(zip(fields, values))})
    return {**connection(key), "mss": mss, "events": out}


class SlowStartScheme(Implementation):
    """A sender's scheme of stl_sslog.h: a congestion control over the kernel's CUBIC whose
    settings are per install and whose connections log the scheme's events. The scheme's
    module names its object, kind, mark tag and events, and packs its settings; a run
    records each connection's log under the scheme's name. A scheme with the client role
    (and receiver.RECEIVER_PARAMS) opens the receiver's window there."""
    roles: tuple[str, ...] = ("server",)
    ccs: loader.CongestionControls
    kind: str = ""
    tag: int = 0
    log_events: dict[int, tuple[str, tuple[str, ...]]] = {}

    def __init__(self) -> None:
        self.settings = PerInstall(self.ccs, self.kind, self.tag, "stl_ss_config", "stl_ss_events")

    @abstractmethod
    def config_value(self, params: dict) -> bytes:
        """The install's settings as the object's configuration struct."""

    def kernel_objects(self, role: str, params: dict) -> list:
        return [self.ccs.object, loader.SOCKOPS_OBJECT] if role == "server" else []

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "client":
            open_receive_window(node, ctx, params)
            return
        self.settings.install(node, role, ctx, params["iw"], self.config_value(params),
                              pacing=bool(params.get("pacing")), pacing_ss_ratio=params.get("pacing_ss_ratio", 200))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "client":
            restore_receive_window(node, ctx)
            return
        self.settings.remove(node, role, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        return Declared(cc=(self.kind,), iw=params["iw"]) if role == "server" else None

    def decode_log(self, key: bytes, value: bytes) -> dict:
        return slow_start_log(key, value, self.log_events)

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """The sock_ops counters and every connection's log, under the scheme's name."""
        return {**(loader.node_counters(ctx.instance, node) or {}),
                self.name: self.settings.logs(node, ctx, self.decode_log)}
