"""The analytical transfer-time model of the Quick-Start paper (Allman, Floyd, Sarolahti §5.1).

Equation 2 counts the round trips R one connection needs for N packets when it starts
with a window of W packets on a path whose delay-bandwidth product is M packets,
alone on the path, with a delay-bandwidth product of buffering (so once the window
reaches M the pipe stays full):

    M = bandwidth × RTT / packet_size
    R = log2(max(min(N, M) / W + 1, 2)) + ceil(N / M)

R includes the handshake's round trip. The relative improvement of Quick-Start's
window W_qs over slow start's initial window W_ss is 1 − R(W_qs) / R(W_ss), which the
report draws next to the measured 1 − T_QS / T_SS (the paper's Figs. 2 and 3).
"""
from __future__ import annotations

import math


def path_packets(rate_bps: float, rtt_s: float, packet_bytes: int) -> float:
    """M: the delay-bandwidth product of the path in packets."""
    return rate_bps * rtt_s / 8 / packet_bytes


def round_trips(n_packets: float, window: float, m_packets: float) -> float:
    """R of Equation 2: round trips to send n_packets from an initial window of `window`."""
    if n_packets <= 0 or window <= 0 or m_packets <= 0:
        raise ValueError("Equation 2 needs positive N, W and M")
    return math.log2(max(min(n_packets, m_packets) / window + 1, 2)) + math.ceil(n_packets / m_packets)


def relative_improvement(size_bytes: int, payload_bytes: int, packet_bytes: int, rate_bps: float,
                         rtt_s: float, qs_window: float, initial_window: float) -> float:
    """1 − R(Quick-Start window) / R(initial window) for an object of size_bytes, carried in
    segments of payload_bytes, on a path of rate_bps and rtt_s with packets of packet_bytes."""
    n = math.ceil(size_bytes / payload_bytes)
    m = path_packets(rate_bps, rtt_s, packet_bytes)
    return 1 - round_trips(n, qs_window, m) / round_trips(n, initial_window, m)
