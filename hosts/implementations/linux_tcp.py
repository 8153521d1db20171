"""The kernel's own TCP: congestion control per namespace, initial windows per route, and
optionally the kernel's internal pacing.

This is how the baselines (CUBIC/Reno with IW3 or IW10, BBR, IW32, paced IW32) are made:
the namespace's default congestion control and pacing ratios are per-namespace sysctls and
the initial congestion/receive windows are route attributes, so nothing leaks to other
hosts. Pacing needs a socket with a maximum pacing rate (SO_MAX_PACING_RATE), which the
applications do not set: startlab's sock_ops program sets it on every connection of the
node, after which the kernel paces at tcp_pacing_ss_ratio % of cwnd/RTT in slow start
and tcp_pacing_ca_ratio % in congestion avoidance (133 % spreads a window over three
quarters of an RTT, as Google QUIC does). The kernel sends the first 10 segments of a
connection unpaced — QUIC's initial burst of 10.
"""
from __future__ import annotations

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from topologies import endhosts

KERNEL_CCS = ("cubic", "reno", "bbr")


class LinuxTcp(Implementation):
    name = "linux-tcp"
    summary = "the kernel's TCP with a chosen congestion control, initial windows and pacing"
    roles = ("server", "client")
    params = {
        "cc": Param("cubic", "congestion control (namespace default)", choices=KERNEL_CCS),
        "iw": Param(10, "initial congestion window in segments (route initcwnd)", low=1, high=1000,
                    integer=True),
        "irw": Param(0, "initial receive window in segments (route initrwnd; 0 = kernel default)",
                     low=0, high=1000, integer=True),
        "pacing": Param(False, "pace every connection with the kernel's internal pacing"),
        "pacing_ss_ratio": Param(200, "pacing rate in slow start, % of cwnd/RTT (tcp_pacing_ss_ratio)",
                                 low=1, high=1000, integer=True),
        "pacing_ca_ratio": Param(120, "pacing rate in congestion avoidance, % of cwnd/RTT (tcp_pacing_ca_ratio)",
                                 low=1, high=1000, integer=True),
        "sack": Param(True, "selective acknowledgements (false: NewReno-style recovery, as the papers' era)"),
        "max_cwnd": Param(0, "largest congestion window in segments, held by the sender (0: none); a "
                             "window-limited transfer", low=0, high=1 << 20, integer=True),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        # Pacing per connection and a held window are the sock_ops program's work.
        return [loader.SOCKOPS_OBJECT] if params.get("pacing") or params.get("max_cwnd") else []

    def unavailable(self, role: str, params: dict) -> str | None:
        if role == "server" and not endhosts.kernel_has_cc(params["cc"]):
            return (f"this kernel has no '{params['cc']}' congestion control (neither built in nor a "
                    f"loadable module: tcp_{params['cc']})")
        return super().unavailable(role, params)

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        endhosts.set_congestion_control(node, params["cc"], ctx.instance)
        endhosts.set_pacing_ratios(node, params["pacing_ss_ratio"], params["pacing_ca_ratio"])
        endhosts.set_route(node, ctx.gateway, params["iw"], params["irw"] or None)
        endhosts.set_sack(node, params["sack"])
        flags = (loader.PACE if params["pacing"] else 0) | (loader.CWND_CLAMP if params["max_cwnd"] else 0)
        if flags:
            loader.set_node(ctx.instance, node, loader.NodeConfig(flags=flags, cwnd_clamp=int(params["max_cwnd"])))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        if params.get("pacing") or params.get("max_cwnd"):
            loader.clear_node(ctx.instance, node)
        d = ctx.defaults
        endhosts.set_congestion_control(node, d.cc, ctx.instance)
        endhosts.set_pacing_ratios(node, d.pacing_ss_ratio, d.pacing_ca_ratio)
        endhosts.set_route(node, ctx.gateway, d.iw)
        endhosts.set_sack(node, d.sack)

    def declares(self, role, params, defaults) -> Declared | None:
        return Declared(cc=(params["cc"],), iw=int(params["iw"])) if role == "server" else None


IMPLEMENTATION = LinuxTcp()
