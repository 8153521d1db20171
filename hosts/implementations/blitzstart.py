"""Blitzstart over TCP (Rüth et al., "Blitz-starting QUIC Connections", §3).

Client: its SYNs carry a bandwidth hint and an access-technology code in an RFC 6994
experimental TCP option (kind 253, ExID 0x5354; see hosts/bpf/stl_common.h), written
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

import struct

from hosts.bpf import loader
from hosts.implementations.base import Implementation, InstallContext, Param
from hosts.implementations.jumpstart import (IRW_DEFAULT, RCVBUF_DEFAULT, open_receive_window,
                                             restore_receive_window)

OPTION_KIND = 253
OPTION_EXID = 0x5354
OPTION_LEN = 10
# Access-technology codes carried in the option (the paper names these kinds).
TECHNOLOGIES = {"unknown": 0, "ethernet": 1, "dsl": 2, "cable": 3, "wifi": 4, "3g": 5, "lte": 6,
                "5g": 7, "satellite": 8}


def hint_kbps(rate_bps: float, factor: float) -> int:
    """The hint the client sends: factor × the true rate, in kbit/s (at least 1)."""
    if rate_bps <= 0:
        raise ValueError("the profile's bottleneck rate is unknown: cannot derive a hint")
    return max(1, round(factor * rate_bps / 1000))


def encode_option(kbps: int, tech: int) -> bytes:
    """The option as the client writes it (mirrors stl_sockops.bpf.c)."""
    return struct.pack("!BBHIBB", OPTION_KIND, OPTION_LEN, OPTION_EXID, kbps, tech, 0)


def decode_option(tcp_options: bytes) -> tuple[int, int] | None:
    """(hint kbit/s, technology code) from a TCP header's option bytes, or None."""
    i = 0
    while i < len(tcp_options):
        kind = tcp_options[i]
        if kind == 0:                       # end of option list
            return None
        if kind == 1:                       # no-operation
            i += 1
            continue
        if i + 1 >= len(tcp_options) or tcp_options[i + 1] < 2:
            return None                     # malformed: no length or a length below 2
        length = tcp_options[i + 1]
        body = tcp_options[i:i + length]
        if len(body) < length:
            return None
        if kind == OPTION_KIND and length == OPTION_LEN and struct.unpack("!H", body[2:4])[0] == OPTION_EXID:
            _, _, _, kbps, tech, _ = struct.unpack("!BBHIBB", body)
            return kbps, tech
        i += length
    return None


def initial_cwnd(kbps: int, rtt_us: int, mss: int) -> int:
    """Segments the server starts with: the hinted bandwidth-delay product (as the BPF code)."""
    nbytes = kbps * rtt_us // 8000
    return min(65535, max(2, -(-nbytes // mss)))


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
                     low=10, high=100000),
    }

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            config = loader.NodeConfig(flags=loader.SERVER_BLITZ, cc=loader.cc_name(ctx.instance, "blitz"))
        else:
            kbps = int(params["hint_kbps"]) or hint_kbps(ctx.rate_bps, float(params["factor"]))
            config = loader.NodeConfig(flags=loader.CLIENT_HINT, hint_kbps=kbps,
                                       tech=TECHNOLOGIES[params["tech"]])
            open_receive_window(node, ctx.gateway, int(params["rcvbuf"]), int(params["irw"]))
        loader.set_node(ctx.instance, node, config)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        if role == "client":
            restore_receive_window(node, ctx.gateway)
