"""Blitzstart over TCP (Rüth et al., "Blitz-starting QUIC Connections", §3).

Client: its SYNs carry a bandwidth hint and an access-technology code in an RFC 6994
experimental TCP option (kind 253, ExID 0x5354; wire/blitzstart.py), written
by the sock_ops program. The hint is `factor` × the profile's true bottleneck rate,
as in the paper's Table 1 (0.5x … 4.0x), unless `hint_kbps` gives it outright.

Server: when it accepts a connection whose SYN has the hint, cwnd = hint × the
handshake RTT (ssthresh = cwnd: congestion avoidance from the start), paced over 75 %
of the RTT for the first RTT, then the kernel's CUBIC. Connections without the hint
keep the kernel's default start.

On a trace link the rate changes under the hint, so `basis` says what `factor` multiplies:
`rate` the profile's rate (a trace's mean), `p10` the trace's 10th percentile over
RTT-long windows (a cautious estimate), `oracle` what the trace offers in the RTT after
the handshake — the window [t + RTT, t + 2 RTT) from the moment t the fetch starts, read
from the running link just before it (a perfect estimate: what one would be worth). On a
fixed-rate link all three are the rate.

The client also opens its receive window (as Jump Start's client does): the default
first window of ~64 KB would otherwise cap every hinted window above 45 segments.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.receiver import RECEIVER_PARAMS, open_receive_window, restore_receive_window
from links.traces import window_rates_bps
from wire.blitzstart import TECHNOLOGIES, hint_kbps

BASES = ("rate", "p10", "oracle")

CCS = loader.congestion_controls(__file__)


class Blitzstart(Implementation):
    name = "blitzstart"
    summary = "Blitzstart: the client hints its bandwidth on the SYN; the server starts at hint × RTT"
    roles = ("server", "client")
    params = {
        "factor": Param(1.0, "client: hint as a factor of the profile's true bottleneck rate",
                        low=0.01, high=100.0),
        "basis": Param("rate", "client: what factor multiplies on a trace link: rate (its mean), p10 (its 10th "
                               "percentile over RTT windows), oracle (what it offers in the RTT after the handshake)",
                       choices=BASES),
        "hint_kbps": Param(0, "client: the hint in kbit/s outright (0 = use factor)", low=0, high=2 ** 32 - 1),
        "tech": Param("unknown", "client: access technology sent with the hint",
                      choices=tuple(TECHNOLOGIES)),
        **RECEIVER_PARAMS,
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT] if role == "server" else [loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if role == "server":
            config = loader.NodeConfig(flags=loader.SERVER_BLITZ, cc=CCS.name(ctx.instance, "blitz"))
        else:
            config = self._client_config(params, ctx, self._basis_bps(params, ctx, time.monotonic()))
            open_receive_window(node, ctx, params)
        loader.set_node(ctx.instance, node, config)

    def before_fetch(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """The oracle's hint is what the trace offers next: set it as the fetch starts."""
        if role != "client" or params["basis"] != "oracle" or ctx.trace_clock is None or params["hint_kbps"]:
            return None
        now = time.monotonic()
        rate = self._basis_bps(params, ctx, now)
        config = self._client_config(params, ctx, rate)
        loader.set_node(ctx.instance, node, config)
        # When, on the trace's clock: the window it read is [at + RTT, at + 2 RTT) from its ms 0.
        return {"hint_kbps": config.hint_kbps, "basis": "oracle", "basis_bps": rate,
                "at_trace_ms": (now - ctx.trace_clock.epoch_s) * 1e3, "rtt_s": ctx.rtt_s}

    @staticmethod
    def _basis_bps(params: dict, ctx: InstallContext, now: float) -> float:
        """The rate `factor` multiplies (see the module's docstring)."""
        clock, basis = ctx.trace_clock, params["basis"]
        if clock is None or basis == "rate":
            return ctx.rate_bps
        if basis == "p10":
            return float(np.percentile(window_rates_bps(clock.trace, ctx.rtt_s * 1e3, clock.packet_bytes), 10))
        return clock.rate_bps(now + ctx.rtt_s, now + 2 * ctx.rtt_s)

    @staticmethod
    def _client_config(params: dict, ctx: InstallContext, basis_bps: float) -> loader.NodeConfig:
        # An outage ahead (an oracle of 0) still hints: the smallest hint, 1 kbit/s.
        kbps = int(params["hint_kbps"]) or hint_kbps(max(basis_bps, 1000.0), float(params["factor"]))
        return loader.NodeConfig(flags=loader.CLIENT_HINT, hint_kbps=kbps, tech=TECHNOLOGIES[params["tech"]])

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        if role == "client":
            restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # Its clients hint, so every connection gets the Blitzstart CC with hint × RTT
        # (the window is checked by the wire tests).
        return Declared(cc=("blitz",), iw=None) if role == "server" else None


IMPLEMENTATION = Blitzstart()
