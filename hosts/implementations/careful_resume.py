"""Careful Resume (RFC 9959, draft-ietf-tsvwg-careful-resume-24): the IETF's successor of
Fast Start. A connection observes the path's capacity (the data acknowledged in an RTT) and
minimum RTT; a later connection to the same path reconnoitres from the initial window,
then jumps to half the saved window, paced over the current RTT, validates the jump and
retreats safely when it caused congestion.

Server only (the sender): the kernel's CUBIC from `iw` with the congestion control
cr_cubic of careful_resume.bpf.c (beside this module), whose header says how each phase
maps onto the kernel's TCP. The saved parameters live per path (local address,
destination) and install (a generation number in the socket's mark, so one run's state
never resumes another's); this install's lifetime, max_jump, beta and min_save sit in the
object's configuration map, keyed by that generation.

Every connection's phase changes are kept in the object's event map (the state after each
change, as the qlog draft's CarefulResumePhaseUpdated); counters() returns them, so a run
records them beside its other counters.
"""
from __future__ import annotations

import struct

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.per_install import PerInstall, connection, events

CCS = loader.congestion_controls(__file__)
KIND = "cr_cubic"
CR_MARK_TAG = 0x43000000                 # careful_resume.bpf.c STL_CR_MARK_TAG
PHASES = ("observing", "reconnaissance", "unvalidated", "validating", "safe_retreat", "normal")
# The qlog draft's triggers (careful-resume-qlog-02 §3.2), in the BPF enum's order; 0: none.
TRIGGERS = (None, "congestion_window_limited", "rtt_exceeded", "first_unvalidated_packet_acknowledged",
            "last_unvalidated_packet_sent", "last_unvalidated_packet_acknowledged", "rtt_not_validated",
            "rate_limited", "path_changed", "packet_loss", "ECN_CE", "exit_recovery")
CONFIG_FORMAT = "<QIIII"                 # struct cr_config
EVENTS = 8                               # STL_CR_EVENTS
EVENT_FORMAT = "<QBBBBIIIIIIIII"         # struct cr_event
LOG_FORMAT = "<II" + EVENT_FORMAT[1:] * EVENTS
PATH_FORMAT = "<III"                     # struct cr_path: local address, destination, generation
SAVED_FORMAT = "<QIIII"                  # struct cr_saved
SAVED_FIELDS = ("saved_ns", "saved_cwnd", "saved_rtt_us", "in_use", "observations")
SETTINGS = PerInstall(CCS, KIND, CR_MARK_TAG, "stl_cr_config", "stl_cr_events")


def config_value(lifetime_s: float, max_jump: int, beta: float, min_save: int) -> bytes:
    return struct.pack(CONFIG_FORMAT, int(lifetime_s * 1e9), max_jump, round(beta * 1000), min_save, 0)


def decode_saved(key: bytes, value: bytes) -> dict:
    """One path's saved parameters from stl_cr_cache, with the generation that keys them."""
    return {**dict(zip(SAVED_FIELDS, struct.unpack(SAVED_FORMAT, value))),
            "generation": struct.unpack(PATH_FORMAT, key)[2]}


def decode_log(key: bytes, value: bytes) -> dict:
    """One connection's phase changes from the event map (addresses dotted, times in ns)."""
    mss, logged = events(value, EVENT_FORMAT, EVENTS)
    out = []
    for t, old, new, trig, _, cwnd, ssthresh, pipe, first, last, saved_cwnd, saved_rtt, srtt, rate in logged:
        out.append({"t_ns": t, "old": PHASES[old], "new": PHASES[new], "trigger": TRIGGERS[trig],
                    "congestion_window": cwnd, "ssthresh": ssthresh, "pipesize": pipe,
                    "first_unvalidated_packet": first, "last_unvalidated_packet": last,
                    "saved_congestion_window": saved_cwnd, "saved_rtt_us": saved_rtt,
                    "srtt_us": srtt, "pacing_rate_Bps": rate})
    return {**connection(key), "mss": mss, "events": out}


class CarefulResume(Implementation):
    name = "careful-resume"
    summary = "Careful Resume (RFC 9959): saved capacity, reconnaissance, a paced half jump, safe retreat"
    roles = ("server",)
    params = {
        "iw": Param(10, "initial window (Reconnaissance starts from it)", low=1, high=100, integer=True),
        "lifetime_s": Param(3600.0, "how long saved parameters may be used (the draft: minutes for "
                                    "changing paths, hours for stable ones)", low=0.001, high=86400.0 * 7),
        "max_jump": Param(0, "the largest jump_cwnd in segments (0: no limit but saved_cwnd / 2)",
                          low=0, high=100000, integer=True),
        "beta": Param(0.5, "ssthresh = PipeSize x beta when Safe Retreat ends (the draft: 0.5 .. 1)",
                      low=0.5, high=1.0),
        "min_save": Param(4, "save an observation only of at least min_save x IW segments (the draft's 4)",
                          low=0, high=1000, integer=True),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        SETTINGS.install(node, role, ctx, params["iw"],
                         config_value(params["lifetime_s"], int(params["max_jump"]), params["beta"],
                                      int(params["min_save"])))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        SETTINGS.remove(node, role, ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        # A resumed connection's window is the scheme's; a first connection starts from `iw`.
        return Declared(cc=(KIND,), iw=None) if role == "server" else None

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """The sock_ops counters, every connection's Careful Resume phase changes, and the
        saved parameters as the run left them (what a connection that did not resume asks)."""
        return {**(loader.node_counters(ctx.instance, node) or {}),
                "careful_resume": SETTINGS.logs(node, ctx, decode_log),
                "careful_resume_saved": SETTINGS.logs(node, ctx, decode_saved, "stl_cr_cache")}


IMPLEMENTATION = CarefulResume()
