"""SEARCH (draft-chung-ccwg-search, the "4.0" form of -09): slow start ends when the bytes
delivered over a window of the last 3.5 initial RTTs fall short of the bytes sent over the
same window one RTT earlier by THRESH or more (the path has stopped carrying more).

Server only (the sender): the kernel's CUBIC from `iw`, its HyStart off, with the congestion
control search of search.bpf.c (beside this module), whose header says how the draft's bins
sit on the kernel's counters and where it departs (no drain at the exit: ssthresh = cwnd,
as neqo). THRESH and the window are the variant's parameters, in the object's configuration
map under the install's generation, which the socket's mark carries.

Every connection's checks (norm, prev_sent, curr_delv in bytes, the RTT sample that placed
"one RTT earlier") and its exit are logged; a run records them in its server counters under
`search`.
"""
from __future__ import annotations

import struct

from hosts.bpf import loader
from hosts.implementations.base import Param
from hosts.implementations.per_install import SlowStartScheme


class Search(SlowStartScheme):
    name = "search"
    summary = "SEARCH (draft-chung-ccwg-search) over the kernel's CUBIC: slow start ends when delivered bytes stop tracking sent bytes"
    ccs = loader.congestion_controls(__file__)
    kind = "search"
    tag = 0x53000000                     # search.bpf.c STL_SEARCH_MARK_TAG
    log_events = {                       # enum search_event: name, its four values
        1: ("check", ("norm_milli", "prev_sent", "curr_delv", "rtt_us")),
        2: ("exit", ("norm_milli", "prev_sent", "curr_delv", "initial_rtt_us")),
        3: ("reset", ("bins_passed", "unused1", "unused2", "unused3")),
    }
    params = {
        "iw": Param(10, "initial window (segments)", low=1, high=100, integer=True),
        "thresh": Param(0.26, "THRESH: the shortfall of delivered against sent bytes (share of sent) that ends "
                              "slow start (-09 as neqo implements it; the authors' Linux module: 0.35)",
                        low=0.01, high=1.0),
        "window_rtts": Param(3.5, "the window in initial RTTs (W = 10 bins of a tenth of it)", low=0.5, high=20.0),
    }

    def config_value(self, p: dict) -> bytes:
        """struct search_config"""
        return struct.pack("<8I", round(p["thresh"] * 1000), round(p["window_rtts"] * 100), 0, 0, 0, 0, 0, 0)


IMPLEMENTATION = Search()
