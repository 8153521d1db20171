"""SUSS (Arghavani et al., SIGCOMM 2024): slow start that, in its early rounds, grows the
window 4x instead of 2x while the round's ACK train shows the path has room (the train is
short against the minimum RTT and the RTT has not risen), pacing the extra segments over
the rest of the round.

Server only for the scheme (the sender): the kernel's CUBIC from `iw`, its HyStart off,
with the congestion control suss of suss.bpf.c (beside this module), whose header says how
the authors' kernel patch maps onto a BPF congestion control and where it departs (pacing
starts once the blue segments are sent, at the rate that ends when the patch's would; the
window is raised at once).
Client: a receive buffer and initial receive window that do not cap the sender (the patch
overrides the peer's window instead). Parameters: `suss_max` (the patch's 3: rounds 2 to
4 may accelerate) and `min_rtt_ms` (10: below it, plain slow start). The patch's
`suss_kmax` is declared and never used there; it is not a parameter here.

Every connection's rounds (start, and the decision at the blue tail: dt_bat, G, the
window limit and the red segments' pacing rate) and the exit from slow start (by the delay
detector, the ACK train, SUSS's cap or a loss) are logged; a run records them in its
server counters under `suss`.
"""
from __future__ import annotations

import struct

from hosts.bpf import loader
from hosts.implementations.base import Param
from hosts.implementations.per_install import SlowStartScheme
from hosts.implementations.receiver import RECEIVER_PARAMS

EXITS = {1: "delay", 2: "ack_train", 3: "cap", 4: "loss"}         # suss.bpf.c enum suss_exit


class Suss(SlowStartScheme):
    name = "suss"
    summary = "SUSS (SIGCOMM 2024) over the kernel's CUBIC: 4x a round in the early rounds while the ACK train shows room"
    ccs = loader.congestion_controls(__file__)
    kind = "suss"
    tag = 0x55000000                     # suss.bpf.c STL_SUSS_MARK_TAG
    log_events = {                       # enum suss_event: name, its four values
        1: ("round", ("jumps", "growing_4x", "state", "unused")),
        2: ("tail", ("dt_bat_us", "growth", "limit", "pacing_rate_Bps")),
        3: ("exit", ("why", "round_min_rtt_us", "min_rtt_us", "jumps")),
    }
    params = {
        "iw": Param(10, "initial window (segments); the rounds' blue segments count from it", low=1, high=100,
                    integer=True),
        "suss_max": Param(3, "rounds that may grow 4x: round r < suss_max + 2 (the patch's 3: rounds 2-4)",
                          low=0, high=14, integer=True),
        "min_rtt_ms": Param(10.0, "SUSS only where the minimum RTT exceeds this", low=0.0, high=10000.0),
        **RECEIVER_PARAMS,
    }
    roles = ("server", "client")

    def config_value(self, p: dict) -> bytes:
        """struct suss_config"""
        return struct.pack("<8I", p["iw"], p["suss_max"], round(p["min_rtt_ms"] * 1000), 0, 0, 0, 0, 0)

    def decode_log(self, key: bytes, value: bytes) -> dict:
        log = super().decode_log(key, value)
        for e in log["events"]:
            if e["event"] == "exit":
                e["why"] = EXITS.get(e["why"], e["why"])
        return log


IMPLEMENTATION = Suss()
