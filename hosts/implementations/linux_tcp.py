"""The kernel's own TCP: congestion control per namespace and initial windows per route.

This is how the baselines (CUBIC/Reno with IW3 or IW10, BBR, IW32) are made: the
namespace's default congestion control is a per-namespace sysctl, and the initial
congestion/receive windows are route attributes, so nothing leaks to other hosts.
"""
from __future__ import annotations

from machine.kernel_cc import allow_congestion_control
from topologies.shell import check_cmd
from hosts.implementations.base import Implementation, InstallContext, Param

KERNEL_CCS = ("cubic", "reno", "bbr")
DEFAULT_CC = "cubic"


class LinuxTcp(Implementation):
    name = "linux-tcp"
    summary = "the kernel's TCP with a chosen congestion control and initial windows"
    roles = ("server", "client")
    params = {
        "cc": Param(DEFAULT_CC, "congestion control (namespace default)", choices=KERNEL_CCS),
        "iw": Param(10, "initial congestion window in segments (route initcwnd)", low=1, high=1000),
        "irw": Param(0, "initial receive window in segments (route initrwnd; 0 = kernel default)",
                     low=0, high=1000),
    }

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        available = node.cmd("cat /proc/sys/net/ipv4/tcp_available_congestion_control").split()
        if params["cc"] not in available:
            raise RuntimeError(f"congestion control '{params['cc']}' is not available in this kernel "
                               f"(available: {', '.join(available)})")
        allow_congestion_control(params["cc"], ctx.instance)
        check_cmd(node, f"sysctl -qw net.ipv4.tcp_congestion_control={params['cc']}")
        attrs = f"initcwnd {int(params['iw'])}"
        if params["irw"]:
            attrs += f" initrwnd {int(params['irw'])}"
        check_cmd(node, f"ip route change default via {ctx.gateway} {attrs}")

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        allow_congestion_control(DEFAULT_CC, ctx.instance)
        check_cmd(node, f"sysctl -qw net.ipv4.tcp_congestion_control={DEFAULT_CC}")
        check_cmd(node, f"ip route change default via {ctx.gateway}")
