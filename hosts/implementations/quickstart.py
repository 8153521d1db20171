"""Quick-Start (RFC 4782; Allman/Floyd/Sarolahti; Scharf's Linux implementation).

Server (the sender of web responses): its SYN-ACKs carry a Quick-Start Request in an
IPv4 option, inserted by a tc egress program (hosts/bpf/stl_qs_host.bpf.c). The rate
asked for is a policy: `fixed` (rate_mbps), `access` (the server's access-link rate,
access_mbps) or `link` (the largest code not above the path's bottleneck rate, as the
Linux paper's q = 5.12 Mbit/s on its 10 Mbit/s path). When the handshake's ACK comes
back, the sock_ops program checks the echo (TTL diff, nonce, rate); an approved socket
starts with Equation 1's window paced at the approved rate for one RTT, ssthresh kept,
then the kernel's Reno or CUBIC (qs_* in quickstart.bpf.c, beside this module). A
connection whose request was not approved slow-starts from `iw` under the same Reno or
CUBIC: the baseline of the same variant.

After idle (Scharf's Linux implementation; `after_idle`, on by default): when the kernel
restarts a connection that sat idle for an RTO (the end hosts' declared
slow_start_after_idle, net.ipv4.tcp_slow_start_after_idle) and so cuts its window, the first data segment that follows
carries a request; the client echoes it on its next ACK, and an approved rate becomes
Equation 1's window, paced for one RTT, with the same fallback on a loss.

Report of Approved Rate (RFC 4782 §3.1, §4.4): after every request's outcome the server's
next packet carries the option as a report (function 1000): the approved code, or 0 when
the request was denied, failed the checks or went unanswered, with the request's nonce.
For an approved request that packet is the first Quick-Start data packet.

The option's 8 bytes need room in a full segment (a request after idle, a report on the
first data): the server's route MTU is 8 bytes less (locked), so every segment of its
connections is 8 bytes shorter, not only the ones that carry the option — the kernel
sizes segments before the tc program sees them.

Client (the receiver): a tc ingress program records the request a SYN-ACK arrives
with; the sock_ops program echoes rate, TTL diff and nonce in TCP option 27 on the
ACK. Its receive window is opened (as Jump Start's client does) so that the advertised
window does not cap the Quick-Start window.

Router: the Target algorithm (stl_qs_router.bpf.c) on each router's client-facing
egress (eth0: where the data and the SYN-ACKs leave toward the clients), one program
and one state map per interface; counters via router_counters(). `algorithm` basic (the
default: recent approvals, no per-flow state; reports counted, otherwise ignored) or
extreme (Allman/Floyd/Sarolahti §6.2: per-flow state of the approvals, the bytes that
arrive in each flow's Quick-Start phase and the senders' reports; each flow's RTT from the
handshake the router sees, on the same interface's ingress).
"""
from __future__ import annotations

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.receiver import RECEIVER_PARAMS, open_receive_window, restore_receive_window
from hosts.implementations.linux_tcp import LinuxTcp
from topologies import endhosts
from topologies.names import PathNames
from machine.shell import check_cmd
from wire.quickstart import bps_to_code

POLICIES = ("link", "access", "fixed")
QS_OPTION_BYTES = 8                     # the IPv4 Quick-Start option (RFC 4782 §3)
CCS = loader.congestion_controls(__file__)


def node_interface(node) -> tuple[str, str]:
    """(interface, IPv4 address) of an end host's one link."""
    intf = next(i.name for i in node.intfList() if i.name != "lo")
    words = check_cmd(node, f"ip -4 -o addr show dev {intf}").split()
    return intf, words[words.index("inet") + 1].split("/")[0]


def request_code(policy: str, params: dict, path_rate_bps: float) -> int:
    """The rate code a server requests under `policy`."""
    if policy == "fixed":
        bps = params["rate_mbps"] * 1e6
    elif policy == "access":
        bps = params["access_mbps"] * 1e6
    else:
        if path_rate_bps <= 0:
            raise ValueError("the 'link' policy needs the path's bottleneck rate")
        bps = path_rate_bps
    code = bps_to_code(bps)
    if code == 0:
        raise ValueError(f"a request of {bps:g} bit/s is below the smallest rate code (80 kbit/s)")
    return code


def router_interface(node) -> str:
    """Where the data and the SYN-ACKs leave a router toward the clients."""
    return PathNames.egress(node.name, "down")


def router_counters(ctx: InstallContext, node) -> dict | None:
    """What the Target algorithm counted on `node`'s client-facing egress."""
    return loader.qs_router_counters(ctx.instance, node, router_interface(node))


class QuickStart(Implementation):
    name = "quickstart"
    summary = "Quick-Start (RFC 4782): rate request on the SYN-ACK, routers approve, paced first RTT"
    roles = ("server", "client", "router")
    params = {
        "base_cc": Param("reno", "server: congestion control (and the one after the Quick-Start RTT)",
                         choices=("reno", "cubic")),
        "iw": Param(3, "server: initial window in segments when Quick-Start is not approved", low=1, high=100,
                    integer=True),
        "request": Param("link", "server: request policy", choices=POLICIES),
        "rate_mbps": Param(5.12, "server: the request under the 'fixed' policy", low=0.08, high=1310.72),
        "access_mbps": Param(1000.0, "server: its access-link rate, requested under 'access'",
                             low=0.08, high=100000.0),
        "after_idle": Param(True, "server: request again on the first data after a restart after idle"),
        **RECEIVER_PARAMS,
        "capacity_mbps": Param(0.0, "router: egress capacity (0 = the profile's rate)", low=0.0, high=100000.0),
        "interval_ms": Param(150.0, "router: measurement interval s", low=1.0, high=10000.0),
        "n_intervals": Param(5, "router: N, intervals of the peak utilisation", low=1, high=7, integer=True),
        "approval_intervals": Param(2, "router: intervals recent approvals are summed over", low=1, high=8,
                                    integer=True),
        "approval_interval_ms": Param(0.0, "router (basic): length of the intervals recent approvals are "
                                           "summed over (0 = interval_ms)", low=0.0, high=10000.0),
        "algorithm": Param("basic", "router: basic (recent approvals) or extreme (per-flow state of the "
                                    "approvals, their use and the senders' reports)",
                           choices=("basic", "extreme")),
        "qs_thresh": Param(0.9, "router: share of capacity Quick-Start may fill", low=0.0, high=1.0),
        "method": Param("peak", "router: utilisation estimate", choices=("peak", "ewma")),
        "ewma_weight": Param(0.5, "router: weight w of the moving average (per interval)", low=0.0, high=1.0),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        if role == "router":
            return [loader.QS_ROUTER_OBJECT]
        return ([CCS.object] if role == "server" else []) + [loader.SOCKOPS_OBJECT, loader.QS_HOST_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        inst = ctx.instance
        if role == "router":
            capacity = params["capacity_mbps"] * 1e6 or ctx.rate_bps
            config = loader.QsRouterConfig(
                capacity_bps=int(capacity), interval_ms=float(params["interval_ms"]),
                n_intervals=int(params["n_intervals"]), approval_intervals=int(params["approval_intervals"]),
                qs_thresh=float(params["qs_thresh"]), method=params["method"],
                ewma_weight=float(params["ewma_weight"]),
                approval_interval_ms=float(params["approval_interval_ms"]),
                extreme=params["algorithm"] == "extreme")
            loader.qs_router_install(inst, node, router_interface(node), config)
            return
        intf, ip = node_interface(node)
        if role == "server":
            LinuxTcp().install(node, role, LinuxTcp().resolve({"cc": params["base_cc"], "iw": params["iw"]}), ctx)
            if params["after_idle"] and not ctx.defaults.slow_start_after_idle:
                raise ValueError("after_idle needs the end hosts' slow_start_after_idle: the kernel "
                                 "restarts no idle connection without it, so none would request")
            endhosts.set_route(node, ctx.gateway, params["iw"], mtu=ctx.mtu - QS_OPTION_BYTES)
            cc = CCS.name(inst, f"qs_{params['base_cc']}")
            loader.set_node(inst, node, loader.NodeConfig(flags=loader.SERVER_QS, cc=cc))
            loader.qs_set_host(inst, ip, request_code(params["request"], params, ctx.rate_bps),
                               bool(params["after_idle"]))
            loader.tc_attach(node, intf, "egress", loader.qs_host_program(inst, "server"))
        else:
            open_receive_window(node, ctx, params)
            loader.set_node(inst, node, loader.NodeConfig(flags=loader.CLIENT_QS))
            loader.qs_set_host(inst, ip, 0)
            loader.tc_attach(node, intf, "ingress", loader.qs_host_program(inst, "client"))

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """A router's Target-algorithm counters (requests, approved, reduced, rejected,
        granted_bps, last_util_bps); a server's requests, echoes and their outcomes, at the
        handshake and after idle (restart_requests, restart_approved)."""
        if role == "router":
            return router_counters(ctx, node)
        if role == "server":
            return loader.qs_host_counters(ctx.instance, node_interface(node)[1])
        return None

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        inst = ctx.instance
        if role == "router":
            loader.qs_router_remove(inst, node, router_interface(node))
            return
        intf, ip = node_interface(node)
        loader.tc_detach(node, intf)
        loader.qs_clear_host(inst, ip)
        loader.clear_node(inst, node)
        if role == "server":
            LinuxTcp().remove(node, role, LinuxTcp().resolve({"cc": params["base_cc"]}), ctx)
        else:
            restore_receive_window(node, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # Approved: the Quick-Start CC with Equation 1's window (checked by the wire tests and
        # per run in metrics.json); not approved: slow start from `iw` with `base_cc`. A run
        # mixes both kinds of connection, so the first flight is not checked against `iw`.
        if role != "server":
            return None
        return Declared(cc=(params["base_cc"], f"qs_{params['base_cc']}"), iw=None)


IMPLEMENTATION = QuickStart()
