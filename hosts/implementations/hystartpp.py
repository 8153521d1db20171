"""HyStart++ (RFC 9406): slow start that, on an RTT increase, goes on more gently
(Conservative Slow Start, CSS) for a few rounds instead of ending, and returns to slow start
when the increase was spurious. Linux has the original HyStart, not ++.

Server only (the sender): the kernel's CUBIC from `iw` with the congestion control hspp of
hystartpp.bpf.c (beside this module), whose header says how the RFC's algorithm sits on the
kernel's CUBIC. The RFC's constants are the variant's parameters (defaults the RFC's), in the
object's configuration map under the install's generation, which the socket's mark carries.

Every connection's phase changes (slow start → CSS → congestion avoidance, and CSS back to
slow start) are kept with the round's RTTs and the window; counters() returns them, so a
run records them beside its other counters.
"""
from __future__ import annotations

import struct

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.per_install import PerInstall, connection, events

CCS = loader.congestion_controls(__file__)
KIND = "hspp"
MARK_TAG = 0x48000000                    # hystartpp.bpf.c STL_HSPP_MARK_TAG
PHASES = ("slow_start", "css", "congestion_avoidance")
CONFIG_FORMAT = "<8I"                    # struct hspp_config
EVENTS = 64                              # STL_HSPP_EVENTS
EVENT_FORMAT = "<QBBBBIIIIIII"           # struct hspp_event
INFINITE_SSTHRESH = 0x7FFFFFFF           # the kernel's: ssthresh not set
SETTINGS = PerInstall(CCS, KIND, MARK_TAG, "stl_hspp_config", "stl_hspp_events")


def config_value(p: dict) -> bytes:
    return struct.pack(CONFIG_FORMAT, round(p["min_rtt_thresh_ms"] * 1000), round(p["max_rtt_thresh_ms"] * 1000),
                       p["min_rtt_divisor"], p["n_rtt_sample"], p["css_growth_divisor"], p["css_rounds"], p["l"], 0)


def decode_log(key: bytes, value: bytes) -> dict:
    """One connection's phase changes from the event map (times in ns, RTTs in µs)."""
    mss, logged = events(value, EVENT_FORMAT, EVENTS)
    out = []
    for t, old, new, css_rounds, _, cwnd, ssthresh, rnd, cur, last, base, samples in logged:
        none = lambda us: None if us == 0xFFFFFFFF else us   # noqa: E731
        # A change to congestion avoidance is logged before a loss sets ssthresh, after CSS
        # has (ssthresh = cwnd): an unset ssthresh there means a loss ended it. A return to
        # slow start is logged with the baseline cleared: the last one is the entry's.
        out.append({"t_ns": t, "old": PHASES[old], "new": PHASES[new], "css_rounds": css_rounds,
                       "cwnd": cwnd, "ssthresh": ssthresh, "round": rnd, "current_round_min_rtt_us": none(cur),
                       "last_round_min_rtt_us": none(last), "css_baseline_min_rtt_us": none(base),
                       "rtt_samples": samples,
                       "by_loss": PHASES[new] == "congestion_avoidance" and ssthresh >= INFINITE_SSTHRESH})
    baseline = None
    for e in out:
        if e["new"] == "css":
            baseline = e["css_baseline_min_rtt_us"]
        e["last_css_baseline_us"] = baseline
    return {**connection(key), "mss": mss, "events": out}


class HyStartPP(Implementation):
    name = "hystartpp"
    summary = "HyStart++ (RFC 9406) over the kernel's CUBIC: Conservative Slow Start on an RTT increase"
    roles = ("server",)
    params = {
        "iw": Param(10, "initial window (segments)", low=1, high=100, integer=True),
        "min_rtt_thresh_ms": Param(4.0, "MIN_RTT_THRESH: the least RTT increase that counts", low=0.0, high=1000.0),
        "max_rtt_thresh_ms": Param(16.0, "MAX_RTT_THRESH: the largest threshold", low=0.0, high=1000.0),
        "min_rtt_divisor": Param(8, "MIN_RTT_DIVISOR: the threshold is lastRoundMinRTT over this", low=1,
                                 high=1000, integer=True),
        "n_rtt_sample": Param(8, "N_RTT_SAMPLE: RTT samples a round needs before it is judged", low=1,
                              high=1000, integer=True),
        "css_growth_divisor": Param(4, "CSS_GROWTH_DIVISOR: CSS grows this many times slower", low=2,
                                    high=1000, integer=True),
        "css_rounds": Param(5, "CSS_ROUNDS: rounds of CSS before congestion avoidance", low=1, high=100,
                            integer=True),
        "l": Param(8, "L: the most segments one ACK may add (8 without pacing, the kernel's CUBIC does not pace)",
                   low=1, high=100000, integer=True),
    }

    def resolve(self, given: dict) -> dict:
        params = super().resolve(given)
        if params["min_rtt_thresh_ms"] > params["max_rtt_thresh_ms"]:
            raise ValueError(f"min_rtt_thresh_ms {params['min_rtt_thresh_ms']:g} is above "
                             f"max_rtt_thresh_ms {params['max_rtt_thresh_ms']:g}")
        return params

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        SETTINGS.install(node, role, ctx, params["iw"], config_value(params))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        SETTINGS.remove(node, role, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        return Declared(cc=(KIND,), iw=params["iw"]) if role == "server" else None

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """The sock_ops counters and every connection's HyStart++ phase changes."""
        return {**(loader.node_counters(ctx.instance, node) or {}),
                "hystartpp": SETTINGS.logs(node, ctx, decode_log)}


IMPLEMENTATION = HyStartPP()
