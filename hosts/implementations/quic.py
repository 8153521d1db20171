"""QUIC endpoints (startlab-quic-server / -client, hosts/quic): the paper's own transport.

Unlike the kernel schemes, nothing is installed in the namespace: the scheme is the
endpoint program, so this part says how the workload must start it (`endpoint_args`) and
checks that it is built. The server runs the paper's baseline, CUBIC from 32 datagrams
paced as Google QUIC (`cc: cubic-iw32`), or Blitzstart (`cc: blitz`: cwnd = hint × the
handshake RTT, ssthresh = cwnd, paced over 75 % of the RTT); beneath either, startlab's
RFC 9438 CUBIC or Google QUIC's sender (`sender`). The client sends the hint —
`factor` × the profile's true bottleneck rate in kbit/s, unless `hint_kbps` gives it
outright, and the access technology (`auto`: the profile's, e.g. dsl on dsl-fast) — in
the request header of its stream (hosts/quic/src/request.rs): quinn 0.11 cannot carry a
custom transport parameter, and the request is the client's first stream data, so the
server holds the hint before its first response byte.

The kernel's sock_diag cannot see a QUIC connection's congestion control, so the server
part declares transport 'quic': the run checks the controller the server itself reports
per connection (Blitzstart only where the hint arrived and was applied) and the first
flight it measures on the wire (hosts/quic_endpoints.py, analysis/flow_checks.py).
"""
from __future__ import annotations

from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from machine import binaries
from wire.blitzstart import TECHNOLOGIES, hint_kbps
from wire.quic_report import udp_payload

SERVER_BIN, CLIENT_BIN = "startlab-quic-server", "startlab-quic-client"
CONTROLLERS = ("cubic-iw32", "blitz", "careful-resume")
# Whose CUBIC runs beneath the start: startlab's RFC 9438 one, or Google QUIC's (hosts/quic/src/gquic.rs).
SENDERS = ("rfc9438", "gquic")
IW_DATAGRAMS = 32                     # the server's initial window without a hint


class Quic(Implementation):
    name = "quic"
    summary = "startlab's QUIC endpoints (quinn): CUBIC IW32 paced as Google QUIC, or Blitzstart with the client's hint"
    roles = ("server", "client")
    params = {
        "cc": Param("cubic-iw32", "server: congestion controller", choices=CONTROLLERS),
        "sender": Param("rfc9438", "server: whose CUBIC: 'rfc9438' (startlab's, with RFC 9406 HyStart) or "
                                   "'gquic' (Google QUIC's: two emulated connections, HybridSlowStart)",
                        choices=SENDERS),
        "pacing": Param("paper", "server: 'paper' (a window over ss_pacing_rtt / ca_pacing_rtt of an RTT) or "
                                 "'quinn' (quinn's pacer unchanged: 0.8 RTT)", choices=("paper", "quinn")),
        "ss_pacing_rtt": Param(0.5, "server: share of an RTT a slow-start window is paced over", low=0.05, high=0.8),
        "ca_pacing_rtt": Param(0.75, "server: share of an RTT a congestion-avoidance (and Blitzstart) window is "
                                     "paced over", low=0.05, high=0.8),
        "datagram_pacing": Param(False, "server: release each datagram at the time Google QUIC's pacer gives it "
                                        "(10 unpaced after quiescence, then pairs at the 'pacing' rates) from a "
                                        "socket beneath quinn, instead of in quinn's bursts of 10"),
        "hystart": Param(True, "server: HyStart's delay-increase exit from slow start (rfc9438 sender; "
                               "the gquic sender's HybridSlowStart is always on)"),
        "hystartpp": Param(False, "server: with hystart, RFC 9406's HyStart++: Conservative Slow Start on the "
                                  "increase (5 rounds a quarter as fast, undone when the RTT falls) before leaving"),
        "rapid_start": Param(False, "server: Rapid Start (draft-kazuho-ccwg-rapid-start-02) for the initial slow "
                                    "start: 3x a round while the RTT floor holds, the first recovery ending at "
                                    "beta x what was delivered (rfc9438 sender)"),
        "iw": Param(10, "server, careful-resume: initial window in datagrams (Reconnaissance starts from it)",
                    low=1, high=100, integer=True),
        "cr_lifetime_s": Param(3600.0, "server, careful-resume: how long saved parameters may be used",
                               low=0.001, high=86400.0 * 7),
        "cr_max_jump": Param(0, "server, careful-resume: the largest jump_cwnd in datagrams (0: saved_cwnd / 2)",
                             low=0, high=100000, integer=True),
        "cr_beta": Param(0.5, "server, careful-resume: ssthresh = PipeSize x beta when Safe Retreat ends",
                         low=0.5, high=1.0),
        "cr_min_save": Param(4, "server, careful-resume: save observations of at least min_save x IW",
                             low=0, high=1000, integer=True),
        "factor": Param(0.0, "client: hint as a factor of the profile's true bottleneck rate (0 = no hint)",
                        low=0.0, high=100.0),
        "hint_kbps": Param(0, "client: the hint in kbit/s outright (0 = use factor)", low=0, high=2 ** 32 - 1,
                           integer=True),
        "tech": Param("auto", "client: access technology sent with the hint ('auto': the profile's)",
                      choices=("auto", *TECHNOLOGIES)),
    }

    def unavailable(self, role: str, params: dict) -> str | None:
        name = SERVER_BIN if role == "server" else CLIENT_BIN
        if binaries.built(name) is None:
            return f"{binaries.RELEASE / name} is not built; {binaries.QUIC_BUILD_HINT}"
        return None

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        # The scheme is the program: check it is there now, not when the traffic starts.
        name = SERVER_BIN if role == "server" else CLIENT_BIN
        if binaries.built(name) is None:
            raise RuntimeError(f"{binaries.RELEASE / name} is not built; {binaries.QUIC_BUILD_HINT}")
        udp_payload_checked(ctx.mtu)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Nothing to undo: the endpoints are processes the workload's session stops."""

    def endpoint_args(self, role: str, params: dict, ctx: InstallContext) -> list[str]:
        args = ["--udp-payload", str(udp_payload_checked(ctx.mtu))]
        if role == "server":
            args += ["--cc", params["cc"], "--sender", params["sender"], "--pacing", params["pacing"],
                     "--ss-pacing-rtt", f"{params['ss_pacing_rtt']:g}",
                     "--ca-pacing-rtt", f"{params['ca_pacing_rtt']:g}"]
            if params["datagram_pacing"]:
                if params["pacing"] != "paper":
                    raise ValueError("datagram_pacing paces at the 'paper' rates; it needs pacing: paper")
                args.append("--datagram-pacing")
            if params["cc"] == "careful-resume":
                if params["sender"] != "rfc9438" or params["datagram_pacing"]:
                    raise ValueError("careful-resume runs over the rfc9438 sender and times its own jump (no datagram_pacing)")
                args += ["--iw", str(params["iw"]), "--cr-lifetime-s", f"{params['cr_lifetime_s']:g}",
                         "--cr-max-jump", str(params["cr_max_jump"]), "--cr-beta", f"{params['cr_beta']:g}",
                         "--cr-min-save", str(params["cr_min_save"])]
            if params["sender"] == "gquic":
                if not params["hystart"] or params["hystartpp"] or params["rapid_start"]:
                    raise ValueError("hystart, hystartpp and rapid_start apply to the rfc9438 sender; gquic's "
                                     "HybridSlowStart is quiche's")
                return args
            if params["hystartpp"] and not params["hystart"]:
                raise ValueError("hystartpp is HyStart's: it needs hystart: true")
            if params["rapid_start"] and (params["hystartpp"] or params["cc"] == "careful-resume"):
                raise ValueError("rapid_start is the initial slow start itself: not with hystartpp or careful-resume")
            return args + ["--hystart", "on" if params["hystart"] else "off"] + \
                (["--hystart-pp"] if params["hystartpp"] else []) + (["--rapid-start"] if params["rapid_start"] else [])
        kbps = client_hint_kbps(params, ctx.rate_bps)
        if kbps is None:
            return args
        tech = ctx.access if params["tech"] == "auto" else params["tech"]
        return args + ["--hint-kbps", str(kbps), "--tech", tech]

    def declares(self, role, params, defaults) -> Declared | None:
        if role != "server":
            return None
        # Blitzstart sizes its first flight itself (hint × RTT, checked against the window
        # the server reports); the baseline's is its 32 datagrams.
        # Careful Resume's resumed windows are its own (a first connection starts from `iw`).
        iw = IW_DATAGRAMS if params["cc"] == "cubic-iw32" else None
        return Declared(cc=(controller_name(params["cc"], params["sender"]),), iw=iw, transport="quic")


def controller_name(cc: str, sender: str) -> str:
    """A server controller's name as runs record and check it: the sender prefixes it when
    it is Google QUIC's ('gquic-blitz'), so a run shows which CUBIC ran beneath the start."""
    return f"gquic-{cc}" if sender == "gquic" else cc


def client_hint_kbps(params: dict, rate_bps: float) -> int | None:
    """The hint a client with these parameters sends on a path of `rate_bps` (None: no hint)."""
    if params["hint_kbps"]:
        return int(params["hint_kbps"])
    if params["factor"] > 0:
        return hint_kbps(rate_bps, float(params["factor"]))
    return None


def udp_payload_checked(mtu: int) -> int:
    """The path's datagram size, refused below QUIC's 1200-byte minimum (RFC 9000 §14)."""
    size = udp_payload(mtu)
    if size < 1200:
        raise RuntimeError(f"an MTU of {mtu} bytes leaves {size}-byte datagrams, below QUIC's 1200-byte minimum")
    return size


IMPLEMENTATION = Quic()
