"""TCP Fast Start (Padmanabhan & Katz, Globecom 1998): reuse the network state cached in
the recent past instead of slow-starting after an idle period, with drop priority for the
optimistic packets and quick recovery when the cache was stale.

Server (the sender; the paper's scheme is sender-only): the kernel's NewReno (Reno without
SACK, §4) from `iw`, with the Fast Start congestion control fs of faststart.bpf.c (beside
this module): the per-connection and per-destination cache of cwnd and ssthresh, the restart
window after idle (§3.3.2), its pacing over one srtt (§3.3.3), the low-priority marking of
the fast start packets but the first (§3.3.1, `pdrop`), the no-penalty fallback with a
fine-grained reset timer (§3.3.4, `flr`) and, with `gbn`, the recovery from multiple losses
(§3.3.4: without SACK, a partial ACK in fast recovery slow-starts from one segment at once,
go-back-N), the congestion control fsgbn of faststart_gbn.bpf.c, which calls the kernel
module hosts/kmod/stl_fs_gbn.c and so runs only where that module loads. For new
connections the kernel's per-destination metrics supply srtt and rttvar
(tcp_no_metrics_save off on the server).

The router part of the paper (drop low priority first) is the bottleneck's queue: a
scenario chooses the delay line's queue with the push-out policy (links/shapers/delayline.py);
it only changes anything for marked packets.
"""
from __future__ import annotations

import itertools
import socket

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.linux_tcp import LinuxTcp
from machine import kmod
from machine.shell import check_cmd

AF13 = 14                      # RFC 2597: class AF1, drop precedence 3 (high)
CCS = loader.congestion_controls(__file__)
GBN_CCS = loader.CongestionControls("faststart_gbn")
GBN_MODULE = "stl_fs_gbn"
# The settings travel to the congestion control in the socket's mark (faststart.bpf.c STL_FS_*).
FS_MARK_TAG, FS_PDROP, FS_FLR = 0x46000000, 1 << 0, 1 << 1
# Quick recovery's fine-grained reset timer: with this RTO floor the timeout is srtt + 4·rttvar
# (the kernel accepts no floor below two jiffies).
RTO_MIN_US = 10_000
_generation = itertools.count(1)


def fs_mark(pdrop: bool, flr: bool, dscp: int, generation: int = 0) -> int:
    """The mark that tells the Fast Start congestion control its settings; `generation`
    (changed at every install) keeps one run's cache from starting the next."""
    if not 0 <= dscp < 64 or not 0 <= generation < 256:
        raise ValueError(f"DSCP {dscp} or generation {generation} out of range")
    return FS_MARK_TAG | generation << 16 | dscp << 8 | (FS_PDROP if pdrop else 0) | (FS_FLR if flr else 0)


def accept_opts(mark: int) -> tuple[loader.SockOpt, ...]:
    """What accepted sockets get before the congestion control: the mark its init reads and,
    with quick recovery, the fine-grained RTO floor."""
    opts = [loader.SockOpt(socket.SOL_SOCKET, socket.SO_MARK, mark)]
    if mark & FS_FLR:
        opts.append(loader.SockOpt(socket.IPPROTO_TCP, loader.TCP_BPF_RTO_MIN, RTO_MIN_US))
    return tuple(opts)


class FastStart(Implementation):
    name = "faststart"
    summary = "TCP Fast Start: cached window after idle, paced, low-priority marking, quick recovery"
    roles = ("server",)
    params = {
        "pdrop": Param(True, "mark the fast start packets but the first low priority (DSCP `dscp`)"),
        "flr": Param(True, "quick recovery (§3.3.4): fine-grained reset timer, no penalty for a fast start loss"),
        "dscp": Param(AF13, "DSCP of the low-priority packets (RFC 2597 AF13 = 14)", low=1, high=63, integer=True),
        "iw": Param(1, "initial window of a connection with nothing cached (the paper's slow start: 1)",
                    low=1, high=100, integer=True),
        "sack": Param(False, "negotiate SACK (the paper's NewReno has none)"),
        "gbn": Param(False, "recovery from multiple losses (§3.3.4): a partial ACK in fast recovery "
                            "slow-starts from one segment at once, go-back-N (kernel module stl_fs_gbn)"),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [(GBN_CCS if params["gbn"] else CCS).object, loader.SOCKOPS_OBJECT]

    def kernel_modules(self, role: str, params: dict) -> list[str]:
        return [GBN_MODULE] if params["gbn"] else []

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        LinuxTcp().install(node, role, LinuxTcp().resolve({"cc": "reno", "iw": params["iw"],
                                                           "sack": params["sack"]}), ctx)
        check_cmd(node, "sysctl -qw net.ipv4.tcp_no_metrics_save=0")
        mark = fs_mark(params["pdrop"], params["flr"], int(params["dscp"]), next(_generation) & 0xff)
        if params["gbn"]:
            kmod.load(ctx.instance, GBN_MODULE)
            cc = GBN_CCS.name(ctx.instance, "fsgbn")
            # A campaign's runs may share a network: each counts its own entries.
            GBN_CCS.update_map(ctx.instance, "stl_fs_gbn_n", node_key(node), bytes(8))
        else:
            cc = CCS.name(ctx.instance, "fs")
        config = loader.NodeConfig(flags=loader.SERVER_CC, cc=cc, accept_opts=accept_opts(mark))
        loader.set_node(ctx.instance, node, config)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        # What this run cached must not start the next one: the kernel's metrics go.
        check_cmd(node, "ip tcp_metrics flush all >/dev/null 2>&1; sysctl -qw net.ipv4.tcp_no_metrics_save=1")
        LinuxTcp().remove(node, role, LinuxTcp().resolve({"cc": "reno"}), ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # A connection's first flight is `iw`, a restart's the cached window: sized by the scheme.
        return Declared(cc=("fsgbn" if params["gbn"] else "fs",), iw=None) if role == "server" else None

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        counters = loader.node_counters(ctx.instance, node)
        if params["gbn"] and counters is not None:
            entered = [v for k, v in GBN_CCS.dump_map(ctx.instance, "stl_fs_gbn_n") if k == node_key(node)]
            counters = {**counters, "gbn_entered": int.from_bytes(entered[0], "little") if entered else 0}
        return counters


def node_key(node) -> bytes:
    """A node's key in fsgbn's count of go-back-N entries: its network namespace's cookie."""
    return loader.netns_cookie(node).to_bytes(8, "little")


IMPLEMENTATION = FastStart()
