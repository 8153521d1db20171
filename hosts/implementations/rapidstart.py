"""Rapid Start (draft-kazuho-ccwg-rapid-start-02): slow start that triples the window each
round while the round's least RTT stays near the connection's minimum (doubling otherwise),
and whose first loss ends in a window of beta x what the lossy round delivered.

Server only (the sender): the kernel's CUBIC from `iw` with the congestion control rs of
rapidstart.bpf.c (beside this module), whose header says how the draft's algorithm sits on
the kernel's CUBIC and where it departs (the kernel's PRR takes the window down in the first
recovery, to the draft's end point). The draft's constants are the variant's parameters
(defaults the draft's, beta CUBIC's), in the object's configuration map under the install's
generation, which the socket's mark carries.

Client (the receiver): a receive buffer and an initial receive window that do not cap the
sender, as Jump Start's and Blitzstart's clients have. A default Linux receiver opens its
window about 2x a round and holds a 3x sender to that (measured on the wire test's path:
rounds ending at 22, 40, 80, 160, 328 segments, where the sender's rule alone gives 30, 70,
210, 630).

Every connection's rounds of the rapid phase (rtt_floor, threshold, segments acknowledged
with 3x and with 2x growth), its first loss and the end of its first recovery are logged;
a run records them in its server counters under `rapidstart`.
"""
from __future__ import annotations

import struct

from hosts.bpf import loader
from hosts.implementations.base import Param
from hosts.implementations.per_install import SlowStartScheme
from hosts.implementations.receiver import RECEIVER_PARAMS


class RapidStart(SlowStartScheme):
    name = "rapidstart"
    summary = "Rapid Start (draft-kazuho-ccwg-rapid-start-02) over the kernel's CUBIC: 3x a round while the RTT floor holds"
    ccs = loader.congestion_controls(__file__)
    kind = "rs"
    tag = 0x52000000                     # rapidstart.bpf.c STL_RS_MARK_TAG
    log_events = {                       # enum rs_event: name, its four values
        1: ("round", ("rtt_floor_us", "threshold_us", "acked_3x", "acked_2x")),
        2: ("loss", ("pre_cwnd", "lost", "target", "acked_in_round")),
        3: ("exit", ("pre_cwnd", "lost", "ssthresh_set", "by_timeout")),
    }
    params = {
        "iw": Param(10, "initial window (segments)", low=1, high=100, integer=True),
        "k_num": Param(2, "K's numerator: K = k_num / k_den (-02: 2/3; -00 and quicly: 11/18)", low=0,
                       high=1000, integer=True),
        "k_den": Param(3, "K's denominator", low=1, high=1000, integer=True),
        "beta": Param(0.7, "beta, the window decrease factor (CUBIC's 0.7; the draft's example 0.5)",
                      low=0.1, high=1.0),
        "thresh_add_ms": Param(4.0, "rtt_floor may exceed min_rtt by this much ...", low=0.0, high=1000.0),
        "thresh_pct": Param(110.0, "... and reach this share of it (%), whichever is smaller, for 3x growth",
                            low=100.0, high=1000.0),
        "floor_div": Param(3, "the first recovery ends no lower than pre_cwnd x beta / floor_div", low=1,
                           high=1000, integer=True),
        "pacing": Param(True, "the kernel's internal pacing"),
        "pacing_ss_ratio": Param(300, "... at this % of cwnd/RTT in slow start (quicly's 3 x while it grows 3x; "
                                      "the kernel's default 200)", low=100, high=1000, integer=True),
        **RECEIVER_PARAMS,
    }
    roles = ("server", "client")

    def resolve(self, given: dict) -> dict:
        params = super().resolve(given)
        if params["k_num"] > params["k_den"]:
            raise ValueError(f"K = {params['k_num']}/{params['k_den']} is above 1")
        return params

    def config_value(self, p: dict) -> bytes:
        """struct rs_config"""
        return struct.pack("<8I", p["k_num"], p["k_den"], round(p["beta"] * 1000), round(p["thresh_add_ms"] * 1000),
                           round(p["thresh_pct"]), p["floor_div"], 0, 0)


IMPLEMENTATION = RapidStart()
