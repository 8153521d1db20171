"""QUIC flows over the UDP datagram columns of analysis.packets.

QUIC encrypts everything a TCP analysis reads (sequence and acknowledgement numbers,
retransmissions), so a QUIC flow on the wire is what remains visible: one direction of a
UDP 4-tuple, its datagrams' sizes and times, and whether a datagram starts with a long
(handshake) header. What the wire cannot tell — which bytes are new, which packets were
resent — comes from the endpoints' own counters, cross-checked against the wire where
both count the same thing (datagrams and bytes sent) and kept beside it where they need not
agree (packets lost: a sender may declare a loss spuriously).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from analysis.flows import PROBE_AFTER_RTTS, FourTuple
from analysis.flows import rolling_mbps as _rolling
from analysis.packets import Datagrams

UDP_HEADER = 8
# The first flight ends at the first datagram the receiver sends this share of an RTT or
# more after the flight began: nothing it sends earlier can acknowledge the flight's data
# (see first_flight).
ACK_RTT_SHARE = 0.9
# Small packets of the flight (HANDSHAKE_DONE, acknowledgements) may add up to one datagram
# when the flight is counted in bytes ÷ datagram size.
FLIGHT_TOLERANCE_DATAGRAMS = 1
# What an acknowledgement of a datagram sent before the flight's data may let out in slow
# start: its space and one full datagram of growth (first_flight's `released_segments`).
RELEASED_PER_EARLY_DATAGRAM = 2
# How a sender's start flight can end before its window is out (first_flight's `sender`).
SENDER_ENDS = ("ack", "loss")


def reverse(t: FourTuple) -> FourTuple:
    return (t[1], t[0], t[3], t[2])


def tuple_mask(dg: Datagrams, t: FourTuple) -> np.ndarray:
    return (dg["src"] == t[0]) & (dg["dst"] == t[1]) & (dg["sport"] == t[2]) & (dg["dport"] == t[3])


def payload(dg: Datagrams) -> np.ndarray:
    """UDP payload bytes of every datagram (from the UDP length: true under a short snap)."""
    return dg["ulen"].astype(np.int64) - UDP_HEADER


def from_port(dg: Datagrams, port: int, after: float | None = None) -> FourTuple | None:
    """The 4-tuple sent from `port` that carried the most bytes (a server's flow toward its
    client; only datagrams after `after`, unix seconds, when given), None if no datagram
    left that port."""
    m = dg["sport"] == port
    if after is not None:
        m &= dg["ts"] >= after
    if not m.any():
        return None
    cols = np.stack([np.asarray(dg[c][m], dtype=np.int64) for c in ("src", "dst", "sport", "dport")], axis=1)
    keys, group = np.unique(cols, axis=0, return_inverse=True)
    totals = np.bincount(group.reshape(-1), weights=payload(dg)[m], minlength=len(keys))
    k = keys[int(np.argmax(totals))]
    return (int(k[0]), int(k[1]), int(k[2]), int(k[3]))


def first_time(dg: Datagrams, t: FourTuple) -> float:
    """Time of the first datagram of `t` (NaN if none)."""
    m = tuple_mask(dg, t)
    return float(dg["ts"][m].min()) if m.any() else float("nan")


def sent(dg: Datagrams, t: FourTuple) -> dict[str, int]:
    """Datagrams and UDP payload bytes of one direction at this capture point."""
    m = tuple_mask(dg, t)
    return {"datagrams": int(m.sum()), "bytes": int(payload(dg)[m].sum())}


def bytes_in_window(dg: Datagrams, t: FourTuple, t0: float, t1: float) -> int:
    """UDP payload bytes of `t` with t0 <= ts <= t1 (resent data included: the wire cannot
    tell it apart)."""
    m = tuple_mask(dg, t) & (dg["ts"] >= t0) & (dg["ts"] <= t1)
    return int(payload(dg)[m].sum())


def first_flight(dg: Datagrams, t: FourTuple, rtt_s: float, datagram_size: int,
                 resent_bytes: int = 0, sender: dict | None = None) -> dict[str, Any]:
    """The sender's first flight of 1-RTT data, read next to the sender (before the queue).

    It starts with the sender's first short-header datagram after the receiver's last
    long-header one before it (the receiver's handshake Finished, which its request
    follows: a server has nothing to send before it) and ends at the first datagram of the
    receiver at least ACK_RTT_SHARE × `rtt_s` (the path's minimum RTT) after the flight's
    first full-size (data) datagram: no earlier datagram can acknowledge data of the
    flight, while the receiver acknowledges what came
    before the flight with its Finished or within its ack delay (25 ms), so 0.9 × `rtt_s`
    must exceed that (every profile's RTT here does but lab-1g's 20 ms, where a delayed
    acknowledgement could cut a flight short and fail its check, never pass it).

    `segments` is the flight's UDP payload in datagrams of `datagram_size` (rounded up);
    `total_segments` the same over the whole flow from the flight's start, less
    `resent_bytes` (what the sender resent, by its own count: the wire cannot tell resent
    data apart, and a flight is compared with the flow's data, not its resends). No resend
    can be in the flight itself: a loss is declared on an acknowledgement or a probe
    timeout, neither of which comes before the flight's end.

    `released_segments`: what acknowledgements of the flight's datagrams before its first
    data (HANDSHAKE_DONE, sent early by a server whose application starts late) may have
    added to it. Such an acknowledgement can come back within the flight's span, one RTT
    after that datagram, and in slow start it frees the datagram's space and grows the
    window by up to one full datagram (RFC 9002 §7.3.1 by bytes, Google QUIC's sender by a
    full datagram per packet): two datagrams each, counted only when a receiver datagram
    arrived in that span. The wire cannot tell them from the window's; a check allows them.

    `sender`: the sender's own account of its start flight (the QUIC server's
    `start_flight`). When the first acknowledgement came back before the window was out
    (a paced window longer than the RTT: `ended_by` "ack", or "loss"), the wire's end above
    does not mark the sender's: the flight is what left up to the time the sender
    processed that acknowledgement (`end_unix_s`, the capture's clock), so that the wire
    and the sender count the same span. `ended_by` says which end was used.
    """
    empty = {"segments": 0, "bytes": 0, "datagrams": 0, "total_segments": 0,
             "tolerance_segments": FLIGHT_TOLERANCE_DATAGRAMS, "released_segments": 0, "ended_by": "wire"}
    ts, size = dg["ts"], payload(dg)
    out = tuple_mask(dg, t) & (dg["qlong"] == 0)
    back = tuple_mask(dg, reverse(t))
    if not out.any():
        return empty
    full = out & (size >= datagram_size)
    first_data = float(ts[full].min()) if full.any() else float(ts[out].min())
    requests = back & (dg["qlong"] == 1) & (ts <= first_data)
    since = float(ts[requests].max()) if requests.any() else float("-inf")
    after = out & (ts >= since)
    start = float(ts[after].min())
    # Anchored at the first data datagram, not at `start`: the server's HANDSHAKE_DONE may
    # leave well before its first data (a busy host schedules the application late), and no
    # acknowledgement of the flight's data can come back before first_data + one RTT.
    acks = back & (ts >= max(start, first_data) + ACK_RTT_SHARE * rtt_s)
    end = float(ts[acks].min()) if acks.any() else float("inf")
    ended_by = "wire"
    if sender and sender.get("ended_by") in SENDER_ENDS and sender.get("end_unix_s") is not None:
        end, ended_by = float(sender["end_unix_s"]), str(sender["ended_by"])
    flight = after & (ts < end)
    early = flight & (ts < first_data)
    early_acks = back & (ts >= start + ACK_RTT_SHARE * rtt_s) & (ts < end)
    released = RELEASED_PER_EARLY_DATAGRAM * int(early.sum()) if early_acks.any() else 0
    nbytes = int(size[flight].sum())
    total = max(nbytes, int(size[after].sum()) - int(resent_bytes))
    d = max(1, int(datagram_size))
    span = float(ts[flight].max()) - first_data if flight.any() else 0.0
    return {"segments": math.ceil(nbytes / d), "bytes": nbytes, "datagrams": int(flight.sum()),
            "total_segments": math.ceil(total / d), "tolerance_segments": FLIGHT_TOLERANCE_DATAGRAMS,
            "released_segments": released, "ended_by": ended_by, "span_s": round(max(0.0, span), 6)}


def disturbed(flight: dict[str, Any], handshake_rtt_s: float, sender: dict | None) -> str:
    """Why a QUIC first flight says nothing about its start window, '' if it does: the
    reasons TCP's have (analysis.flows.first_flight_disturbed), as QUIC shows them.

    A loss before the response: the sender reports window reductions before its flight
    began (a handshake or request datagram lost at a full queue), so the flight starts from
    a smaller window. A probe timeout before the first acknowledgement: a datagram of the
    flight left more than PROBE_AFTER_RTTS handshake RTTs after its first data. A window
    leaves within one RTT (paced over less, or cut by the first acknowledgement, see
    first_flight's `sender`), while a probe waits a PTO (RFC 9002 §6.2.1: smoothed RTT +
    4 × RTT variance + the peer's maximum ack delay) and is sent whatever the window
    (§6.2.4: two probes after a full window of 32 would read as a flight of 34 or 35).
    Both happen to correct senders under load; a check of the start window skips such
    flights and counts them."""
    if sender and int(sender.get("reductions_before") or 0) > 0:
        return "window reduced by a loss before the response"
    if flight.get("segments") and float(flight.get("span_s") or 0.0) > PROBE_AFTER_RTTS * handshake_rtt_s:
        return "probe timeout before the first acknowledgement"
    return ""


def rolling_mbps(dg: Datagrams, t: FourTuple | None, window_s: float, at: np.ndarray) -> np.ndarray:
    """Rolling one-window rate of `t`'s UDP payload (zeros for an absent flow)."""
    if t is None:
        return np.zeros(len(at))
    m = tuple_mask(dg, t)
    return _rolling(np.asarray(dg["ts"][m]), payload(dg)[m], window_s, at)
