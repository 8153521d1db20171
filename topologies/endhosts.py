"""What every end host (client or server) is set to, explicitly, when a network is built.

A new network namespace inherits the root namespace's default congestion control (BBR on
some machines, CUBIC on others) and kernel defaults for windows and pacing: results would
depend on how the machine happens to be configured. The builder sets each of these on
every end host, implementations change them for a run and put the declared defaults back,
and runs verify from the kernel and the wire what each flow actually ran.
"""
from __future__ import annotations

import subprocess
from dataclasses import asdict, dataclass

from pathlib import Path

from machine.capabilities import kernel_has_module
from machine.kernel_cc import allow_congestion_control
from machine.shell import check_cmd

AVAILABLE_CCS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def kernel_has_cc(cc: str) -> bool:
    """Does this kernel have congestion control `cc`, available now or as a module it can
    load (a stock kernel builds most as modules: tcp_bbr on Debian's)?"""
    return cc in AVAILABLE_CCS.read_text().split() or kernel_has_module(f"tcp_{cc}")


@dataclass(frozen=True)
class EndHostDefaults:
    """The declared state of an end host before any variant is installed."""
    cc: str = "cubic"                  # the papers' baseline congestion control
    iw: int = 10                       # initial congestion window, segments (route initcwnd; RFC 6928)
    pacing_ss_ratio: int = 200         # kernel pacing rate in slow start, % of cwnd/RTT
    pacing_ca_ratio: int = 120         # … in congestion avoidance
    sack: bool = True                  # selective acknowledgements (RFC 2018)
    # Congestion window validation after idle (RFC 2861/7661's restart; Quick-Start requests
    # after it): a connection idle for an RTO restarts from a smaller window.
    slow_start_after_idle: bool = True
    # ECN (RFC 3168) in the TCP handshake: "off" never, "accept" only when the peer asks
    # (the kernel's own default for a namespace, set here all the same), "on" ask for it too.
    ecn: str = "accept"
    # Socket buffers that never cap a window on the profiles' BDPs plus buffers
    # (lab-1g: 2.5 MB BDP + 2.5 MB queue).
    rmem: str = "4096 131072 67108864"
    wmem: str = "4096 16384 67108864"

    def as_dict(self) -> dict:
        return asdict(self)


def set_congestion_control(node, cc: str, instance) -> None:
    """Make `cc` the default of the node's namespace (allowed in the root namespace first,
    where the kernel requires it; the registry puts the allowed list back)."""
    available = check_cmd(node, f"cat {AVAILABLE_CCS}").split()
    if cc not in available and kernel_has_module(f"tcp_{cc}"):
        # A module the kernel loads only for the root namespace's own sysctl: load it here.
        subprocess.run(["modprobe", "-q", f"tcp_{cc}"], capture_output=True)
        available = check_cmd(node, f"cat {AVAILABLE_CCS}").split()
    if cc not in available:
        raise RuntimeError(f"congestion control '{cc}' is not available in this kernel "
                           f"(available: {', '.join(available)})")
    allow_congestion_control(cc, instance)
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_congestion_control={cc}")


def read_congestion_control(node) -> str:
    return check_cmd(node, "sysctl -n net.ipv4.tcp_congestion_control").strip()


def set_pacing_ratios(node, ss_ratio: int, ca_ratio: int) -> None:
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_pacing_ss_ratio={int(ss_ratio)} "
                    f"net.ipv4.tcp_pacing_ca_ratio={int(ca_ratio)}")


# net.ipv4.tcp_ecn's values (Documentation/networking/ip-sysctl.rst).
ECN_MODES = {"off": 0, "on": 1, "accept": 2}


def set_ecn(node, mode: str) -> None:
    """Set the node's ECN mode and read it back: a handshake on the wire then shows it."""
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_ecn={ECN_MODES[mode]}")
    got = int(check_cmd(node, "sysctl -n net.ipv4.tcp_ecn").strip())
    if got != ECN_MODES[mode]:
        raise RuntimeError(f"{node.name}: net.ipv4.tcp_ecn reads {got} after setting ECN {mode} "
                           f"({ECN_MODES[mode]})")


def set_sack(node, on: bool) -> None:
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_sack={1 if on else 0}")


def set_route(node, gateway: str, initcwnd: int, initrwnd: int | None = None, replace: bool = True,
              mtu: int | None = None) -> None:
    """The default route with its window attributes (initrwnd None: the kernel's) and, when
    given, a smaller MTU for what the node sends (locked: path MTU discovery keeps it)."""
    attrs = (f"initcwnd {int(initcwnd)}" + (f" initrwnd {int(initrwnd)}" if initrwnd else "")
             + (f" mtu lock {int(mtu)}" if mtu else ""))
    check_cmd(node, f"ip route {'replace' if replace else 'add'} default via {gateway} {attrs}")


def apply(node, defaults: EndHostDefaults, gateway: str, instance) -> None:
    """Put an end host into its declared default state."""
    set_congestion_control(node, defaults.cc, instance)
    set_pacing_ratios(node, defaults.pacing_ss_ratio, defaults.pacing_ca_ratio)
    set_sack(node, defaults.sack)
    set_ecn(node, defaults.ecn)
    check_cmd(node, f"sysctl -qw net.ipv4.tcp_rmem='{defaults.rmem}' net.ipv4.tcp_wmem='{defaults.wmem}' "
                    "net.ipv4.tcp_no_metrics_save=1 "
                    f"net.ipv4.tcp_slow_start_after_idle={int(defaults.slow_start_after_idle)}")
    set_route(node, gateway, defaults.iw)
