"""Flow-level quantities over the columnar arrays of analysis.packets.

Everything here is vectorised numpy over whole columns: a run's captures hold
hundreds of thousands of packets and a campaign thousands of runs.
A flow is one direction of one connection: (connection index, direction).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Callable

import numpy as np

from analysis.packets import ACK, CWR, ECE, Connections, Datagrams, Packets, synacks, syns


def by_server_port(conns: Connections, port: int) -> np.ndarray:
    """Indices of connections with `port` on the responder side (or, if the SYN was
    missed and the initiator guessed wrong, on the initiator side)."""
    return np.flatnonzero((conns["dport"] == port) | (conns["sport"] == port))


def direction_from_port(conns: Connections, conn: int, port: int) -> int:
    """The direction whose sender uses `port` (0 = initiator's direction)."""
    return 0 if int(conns["sport"][conn]) == port else 1


def largest(conns: Connections, candidates: np.ndarray) -> int | None:
    """The candidate connection that carried the most unique bytes (e.g. iperf3's data
    connection rather than its control connection), None if there is none."""
    if len(candidates) == 0:
        return None
    totals = conns["unique_bytes"][candidates].sum(axis=1)
    return int(candidates[int(np.argmax(totals))])


def same_connection(conns: Connections, other: Connections, conn: int) -> int | None:
    """Index in `other` (another capture) of the connection with the same 4-tuple.

    Captures at different points see the same addresses (no NAT in the testbed);
    if the tuple was reused, the last connection wins, as in the capture order.
    """
    a = (int(conns["src"][conn]), int(conns["sport"][conn]))
    b = (int(conns["dst"][conn]), int(conns["dport"][conn]))
    fwd = (other["src"] == a[0]) & (other["sport"] == a[1]) & (other["dst"] == b[0]) & (other["dport"] == b[1])
    rev = (other["src"] == b[0]) & (other["sport"] == b[1]) & (other["dst"] == a[0]) & (other["dport"] == a[1])
    hits = np.flatnonzero(fwd | rev)
    return int(hits[-1]) if len(hits) else None


def flow_mask(pk: Packets, conn: int, direction: int) -> np.ndarray:
    return (pk["conn"] == conn) & (pk["dir"] == direction)


def delivered_bytes(conns: Connections, conn: int, direction: int) -> int:
    """Unique payload bytes of one direction seen at this capture point."""
    return int(conns["unique_bytes"][conn, direction])


def sent_bytes(conns: Connections, conn: int, direction: int) -> int:
    """Payload bytes including retransmissions."""
    return int(conns["total_bytes"][conn, direction])


def retransmitted_segments(conns: Connections, conn: int, direction: int) -> int:
    return int(conns["retx_pkts"][conn, direction])


def syn_time(conns: Connections, conn: int) -> float:
    """Time of the initiator's first SYN (NaN if not captured)."""
    return float(conns["syn_ts"][conn])


def last_new_data_time(pk: Packets, conn: int, direction: int) -> float:
    """Arrival of the last packet that carried a byte not seen before (NaN if no data)."""
    m = flow_mask(pk, conn, direction) & (pk["newbytes"] > 0)
    return float(pk["ts"][m].max()) if m.any() else float("nan")


def first_data_time(pk: Packets, conn: int, direction: int) -> float:
    """Arrival of the first packet that carried data (NaN if no data)."""
    m = flow_mask(pk, conn, direction) & (pk["payload"] > 0)
    return float(pk["ts"][m].min()) if m.any() else float("nan")


def bytes_in_window(pk: Packets, conn: int, direction: int, t0: float, t1: float) -> int:
    """New (first-seen) payload bytes with t0 <= ts <= t1: the window is closed so a
    flow's own first and last packets count when the window is its lifetime."""
    m = flow_mask(pk, conn, direction) & (pk["ts"] >= t0) & (pk["ts"] <= t1)
    return int(pk["newbytes"][m].sum(dtype=np.int64))


def segments_missing(
    before: Packets, conn_before: int, dir_before: int,
    after: Packets, conn_after: int | None, dir_after: int, ecn_capable: bool = False,
    within: np.ndarray | None = None,
) -> int:
    """Data segments seen at `before` but not at `after` (e.g. dropped by a queue);
    `ecn_capable`: only those that reached it ECN-capable (ECT or CE), which a marking
    AQM signals to by a mark, so that it drops them only when its buffer is full;
    `within`: only those of `before`'s packets this mask selects (a phase of the flow).

    Each transmission counts on its own (transmission_keys: a retransmission has a new IP ID).
    """
    m_in = flow_mask(before, conn_before, dir_before) & (before["payload"] > 0)
    if within is not None:
        m_in &= within
    if ecn_capable:
        m_in &= (before["tos"] & ECN_FIELD) != 0
    if conn_after is None:
        return int(m_in.sum())
    m_out = flow_mask(after, conn_after, dir_after) & (after["payload"] > 0)
    return int(transmissions_lost(before, m_in, after, m_out).sum())


# One direction of a UDP conversation: (src, dst, sport, dport), addresses as integers.
FourTuple = tuple[int, int, int, int]


@dataclass(frozen=True)
class DatagramLoss:
    """The datagrams of one 4-tuple seen before a queue, and those of them missing after it."""

    sent: int
    lost: np.ndarray  # indices into the "before" datagrams, in capture order

    @property
    def count(self) -> int:
        return len(self.lost)


def datagrams_lost(before: Datagrams, after: Datagrams) -> dict[FourTuple, DatagramLoss]:
    """Per 4-tuple of `before`, the datagrams whose hash never appears at `after` (e.g.
    dropped by the queue between the two capture points).

    The UDP counterpart of segments_missing, for QUIC, whose headers are encrypted:
    the hash identifies a datagram by what no hop rewrites, and QUIC's packet number
    makes it unique, so set membership suffices. Every 4-tuple of `before` is a key,
    with an empty `lost` when nothing was lost.
    """
    tuples = np.stack([np.asarray(before[c], dtype=np.uint64) for c in ("src", "dst", "sport", "dport")], axis=1)
    keys, group = np.unique(tuples, axis=0, return_inverse=True)
    group = group.reshape(-1)  # numpy 2.0.0 returns it two-dimensional when axis is given
    sent = np.bincount(group, minlength=len(keys))
    lost = np.flatnonzero(~np.isin(before["hash"], after["hash"]))
    return {
        (int(k[0]), int(k[1]), int(k[2]), int(k[3])): DatagramLoss(int(sent[g]), lost[group[lost] == g])
        for g, k in enumerate(keys)
    }


def rolling_mbps(ts: np.ndarray, nbytes: np.ndarray, window_s: float, at: np.ndarray) -> np.ndarray:
    """Average rate in Mbit/s over the trailing window (t - window_s, t] for each t in `at`.

    This is the rolling average over one RTT of the Blitzstart paper's Fig. 1 and 3;
    cumulative sums make it O((n + m) log n) for n packets and m sample times.
    """
    order = np.argsort(ts, kind="stable")
    t_sorted = ts[order]
    cum = np.concatenate(([0], np.cumsum(nbytes[order], dtype=np.int64)))
    hi = np.searchsorted(t_sorted, at, side="right")
    lo = np.searchsorted(t_sorted, at - window_s, side="right")
    return (cum[hi] - cum[lo]) * 8 / window_s / 1e6


# How long a flow's start is followed from its first packet: the span of the Blitzstart
# paper's Fig. 1 (top), where CUBIC leaves slow start at ~200 ms and fills the link by 300 ms.
STARTUP_S = 1.0


def startup(first_ts: float, rolling: Callable[[np.ndarray], np.ndarray], step_s: float) -> dict:
    """A flow's rolling throughput over its first STARTUP_S seconds, `t` from its first
    packet; `rolling` gives the flow's rate at given times."""
    at = np.arange(first_ts, first_ts + STARTUP_S + step_s / 2, step_s)
    return {"t": np.round(at - first_ts, 6).tolist(), "mbps": np.round(rolling(at), 3).tolist()}


def flow_rolling_mbps(pk: Packets, conn: int | None, direction: int, window_s: float, at: np.ndarray) -> np.ndarray:
    """rolling_mbps of one flow's new bytes; zeros for an absent flow."""
    if conn is None:
        return np.zeros(len(at))
    m = flow_mask(pk, conn, direction)
    return rolling_mbps(pk["ts"][m], pk["newbytes"][m], window_s, at)


def segments_of(payload: np.ndarray, mss: int) -> int:
    """Segments of MSS that carry these payloads: a GSO super-frame counts as the segments it
    will be cut into, a short segment as one."""
    return int(np.ceil(payload.astype(np.int64) / max(1, mss)).sum())


def opened_in_capture(conns: Connections, idx: np.ndarray) -> np.ndarray:
    """Those of `idx` whose SYN this capture saw. A network serves several runs in turn, and
    a previous run's connection may still be closing (FIN retransmissions at a long RTT)
    while the next run's capture is on: it has no SYN there and is not that run's."""
    return idx[~np.isnan(conns["syn_ts"][idx])]


def between(conns: Connections, ip_a: str, ip_b: str, port: int | None = None) -> np.ndarray:
    """Indices of the connections between two IPv4 addresses (either way), optionally with
    `port` on one side."""
    a, b = (int(ipaddress.IPv4Address(x)) for x in (ip_a, ip_b))
    m = ((conns["src"] == a) & (conns["dst"] == b)) | ((conns["src"] == b) & (conns["dst"] == a))
    if port is not None:
        m &= (conns["sport"] == port) | (conns["dport"] == port)
    return np.flatnonzero(m)


def with_endpoint(conns: Connections, ip: str, port: int) -> int | None:
    """The (last) connection with endpoint ip:port."""
    x = int(ipaddress.IPv4Address(ip))
    hits = np.flatnonzero(((conns["src"] == x) & (conns["sport"] == port)) | ((conns["dst"] == x) & (conns["dport"] == port)))
    return int(hits[-1]) if len(hits) else None


class ConnIndex:
    """The connections a capture saw open, by initiator address and port, for matching an
    application's log to a capture: a lookup is O(1) (a run may have tens of thousands), and
    where the initiator reused a port within the capture (a hundred connections from one
    host reuse one of ~28,000 ephemeral ports with a chance of ~16 %) the connection whose
    SYN is nearest the logged start wins, not the last one as with_endpoint."""

    def __init__(self, conns):
        self.syn = conns["syn_ts"]
        self.by_key: dict[tuple[int, int], list[int]] = {}
        for c in np.flatnonzero(~np.isnan(self.syn)):
            self.by_key.setdefault((int(conns["src"][c]), int(conns["sport"][c])), []).append(int(c))

    def find(self, ip: int, port: int, t: float) -> int | None:
        hits = self.by_key.get((ip, port))
        if not hits:
            return None
        return min(hits, key=lambda c: abs(float(self.syn[c]) - t))


def max_in_flight(pk: Packets, conn: int, direction: int) -> int:
    """Most bytes of one direction sent and not yet acknowledged, read where both the data
    and the returning ACKs pass (next to the sender): what bounded the sender's window."""
    data = flow_mask(pk, conn, direction) & (pk["payload"] > 0)
    acks = flow_mask(pk, conn, 1 - direction) & ((pk["flags"] & ACK) != 0)
    if not data.any() or not acks.any():
        return 0
    base = int(pk["seq"][data][0])
    order = np.flatnonzero(data | acks)                     # capture order is time order
    hi, acked, most = 0, 0, 0
    for i in order:
        if data[i]:
            hi = max(hi, (int(pk["seq"][i]) - base) % 2 ** 32 + int(pk["payload"][i]))
        else:
            rel = (int(pk["ack"][i]) - base) % 2 ** 32
            if rel < 2 ** 31:                              # an ACK of this data, not of the SYN before it
                acked = max(acked, rel)
        most = max(most, hi - acked)
    return most


def first_flight(pk: Packets, conn: int, direction: int, mss: int, after: float = float("-inf")) -> dict[str, int]:
    """The data a sender sent before the first ACK of its data came back.

    Read at a capture point next to the sender: an ACK seen there reaches the sender a few
    microseconds later, so every data packet seen before it left before the sender could
    react. `segments` is the first flight in MSS-sized segments (the initial window where
    the flow had that much to send), `total_segments` the whole flow's new data, so a check
    can expect min(initial window, total_segments). With `after`, the flight that started
    at that time (a restart after idle).
    """
    flight = first_flight_mask(pk, conn, direction, after)
    data = flow_mask(pk, conn, direction) & (pk["payload"] > 0) & (pk["retx"] == 0) & (pk["ts"] >= after)
    return {"segments": segments_of(pk["payload"][flight], mss),
            "bytes": int(pk["payload"][flight].sum(dtype=np.int64)),
            "total_segments": segments_of(pk["payload"][data], mss)}


def first_flight_mask(pk: Packets, conn: int, direction: int, after: float = float("-inf")) -> np.ndarray:
    """The packets of first_flight: new data of the direction sent before the first ACK of
    that data came back (from `after` on)."""
    ts = pk["ts"]
    data = flow_mask(pk, conn, direction) & (pk["payload"] > 0) & (pk["retx"] == 0) & (ts >= after)
    if not data.any():
        return data
    first_seq = int(pk["seq"][data][0])
    back = (pk["conn"] == conn) & (pk["dir"] != direction) & ((pk["flags"] & ACK) != 0)
    advance = (pk["ack"].astype(np.int64) - first_seq) % (1 << 32)
    acks = back & (advance > 0) & (advance < (1 << 31))
    t_ack = float(ts[acks][0]) if acks.any() else float("inf")
    return data & (ts < t_ack)


# TCP's ECN flags (RFC 3168 §6.1.1) and the IP header's ECN field (two low bits of TOS).
ECN_FIELD, CE = 0x03, 0x03


def ecn_negotiated(pk: Packets, conn: int) -> bool:
    """Did the handshake set up ECN (RFC 3168 §6.1.1)? The initiator's SYN carries ECE and
    CWR, the responder's SYN-ACK ECE without CWR."""
    m = pk["conn"] == conn
    flags = pk["flags"]
    syn = m & syns(flags) & (pk["dir"] == 0)
    synack = m & synacks(flags) & (pk["dir"] == 1)
    return bool((syn & ((flags & (ECE | CWR)) == (ECE | CWR))).any()
                and (synack & ((flags & (ECE | CWR)) == ECE)).any())


def ce_marked(pk: Packets, conn: int | None, direction: int) -> int:
    """Packets of one flow that carry Congestion Experienced at this capture point: after a
    queue, the marks it set instead of dropping."""
    if conn is None:
        return 0
    return int((flow_mask(pk, conn, direction) & ((pk["tos"] & ECN_FIELD) == CE)).sum())


def handshake_retransmitted(pk: Packets, conn: int) -> bool:
    """Did the connection's SYN or SYN-ACK go out more than once (seen at this capture)?
    A sender whose handshake was retransmitted starts from one segment (RFC 5681 §3.1,
    Linux's tcp_init_transfer), whatever its initial window."""
    m = pk["conn"] == conn
    syn = syns(pk["flags"])
    synack = synacks(pk["flags"])
    return bool((m & syn).sum() > 1 or (m & synack).sum() > 1)


def first_flight_disturbed(before: Packets, conn: int, direction: int, after: Packets, conn_after: int | None,
                           dir_after: int) -> str:
    """Why a connection's first flight (at `before`, next to its sender) says nothing about
    its initial window, '' if it does: its handshake was retransmitted, or the queue between
    `before` and `after` dropped part of the flight (the duplicate ACKs then release new
    segments by limited transmit before any ACK of new data). Under load both happen to
    correct senders, as does a tail loss probe when the first ACK is delayed by a queue beyond
    two SRTTs (the probe is a new segment); a check of the initial window skips such flights
    and counts them."""
    if handshake_retransmitted(before, conn):
        return "handshake retransmitted"
    flight = first_flight_mask(before, conn, direction)
    if flight.any() and segments_missing(before, conn, direction, after, conn_after, dir_after, within=flight):
        return "first flight lost at the queue"
    rtt = handshake_rtt(before, conn, direction)
    if flight.any() and rtt is not None:
        ts = before["ts"][flight]
        if float(ts.max() - ts.min()) > PROBE_AFTER_RTTS * rtt:
            return "probe timeout before the first ACK"
    return ""


def first_ack_times(pk, n_conns: int) -> np.ndarray:
    """Per connection of a capture: when the first ACK of the responder's data (direction
    1) came back, inf if none — the end of its first flight (and of a Quick-Start phase)."""
    data = (pk["dir"] == 1) & (pk["payload"] > 0)
    first_seq = np.full(n_conns, -1, dtype=np.int64)
    first_ts = np.full(n_conns, np.inf)
    uniq, at = np.unique(pk["conn"][data], return_index=True)
    first_seq[uniq] = pk["seq"][data][at]
    first_ts[uniq] = pk["ts"][data][at]
    back = (pk["dir"] == 0) & ((pk["flags"] & ACK) != 0)
    c = pk["conn"][back]
    adv = (pk["ack"][back].astype(np.int64) - first_seq[c]) % (1 << 32)
    acking = (first_seq[c] >= 0) & (adv > 0) & (adv < (1 << 31)) & (pk["ts"][back] > first_ts[c])
    t_ack = np.full(n_conns, np.inf)
    np.minimum.at(t_ack, c[acking], pk["ts"][back][acking])
    return t_ack


def handshake_rtts(pk, n_conns: int) -> np.ndarray:
    """Per connection: the responder's SYN-ACK to the initiator's next ACK, as seen at this
    capture (handshake_rtt for all at once); inf where not seen."""
    synack = (pk["dir"] == 1) & synacks(pk["flags"])
    t_sa = np.full(n_conns, np.inf)
    np.minimum.at(t_sa, pk["conn"][synack], pk["ts"][synack])
    back = (pk["dir"] == 0) & ((pk["flags"] & ACK) != 0)
    c = pk["conn"][back]
    after = pk["ts"][back] > t_sa[c]
    t_ack = np.full(n_conns, np.inf)
    np.minimum.at(t_ack, c[after], pk["ts"][back][after])
    rtt = np.full(n_conns, np.inf)
    seen = np.isfinite(t_ack)                     # an ACK after a SYN-ACK: both were seen
    rtt[seen] = t_ack[seen] - t_sa[seen]
    return rtt


# Reasons a first flight cannot show the initial window (first_flight_disturbed), by code.
DISTURBANCES = ("", "handshake retransmitted", "first flight lost at the queue", "probe timeout before the first ACK")


def flight_disturbances(pk: Packets, data: np.ndarray, lost: np.ndarray, n_conns: int) -> np.ndarray:
    """first_flight_disturbed for every connection of a capture next to the senders at once:
    `data` selects the responders' data segments, `lost` says which of them (in order) the
    queue dropped (transmissions_lost). A code per connection, an index into DISTURBANCES."""
    conn = pk["conn"][data]
    t_ack = first_ack_times(pk, n_conns)
    new = pk["retx"][data] == 0
    flight = (pk["ts"][data] < t_ack[conn]) & new
    syn = syns(pk["flags"])
    synack = synacks(pk["flags"])
    resent = (np.bincount(pk["conn"][syn], minlength=n_conns) > 1) | (np.bincount(pk["conn"][synack],
                                                                                 minlength=n_conns) > 1)
    dropped = np.bincount(conn[flight & lost], minlength=n_conns) > 0
    first = np.full(n_conns, np.inf)
    last = np.full(n_conns, -np.inf)
    np.minimum.at(first, conn[flight], pk["ts"][data][flight])
    np.maximum.at(last, conn[flight], pk["ts"][data][flight])
    probed = (last - first) > PROBE_AFTER_RTTS * handshake_rtts(pk, n_conns)
    return np.where(resent, 1, np.where(dropped, 2, np.where(probed, 3, 0)))


# A segment of a first flight sent this many handshake RTTs after its first one came from a
# probe timeout (a tail loss probe fires at 2 SRTT without an ACK; QUIC's PTO, later still,
# in quic_flows.disturbed), not from the initial window, which leaves within one RTT even
# when paced over it.
PROBE_AFTER_RTTS = 1.5


def handshake_rtt(pk: Packets, conn: int, direction: int) -> float | None:
    """The RTT the sender of `direction` (the responder) measured on the handshake, read next
    to it: its SYN-ACK to the initiator's first ACK after it; None if not seen."""
    m = pk["conn"] == conn
    synack = m & (pk["dir"] == direction) & synacks(pk["flags"])
    if not synack.any():
        return None
    t0 = float(pk["ts"][synack][0])
    back = m & (pk["dir"] != direction) & ((pk["flags"] & ACK) != 0) & (pk["ts"] > t0)
    return float(pk["ts"][back][0]) - t0 if back.any() else None


def transmission_keys(pk: Packets, m: np.ndarray) -> np.ndarray:
    """One row per packet selected by `m` that names its transmission: addresses, ports,
    sequence number, payload length and IP ID (a retransmission has a new IP ID), so that
    the same transmission seen at two capture points has the same row."""
    return np.stack([pk["src"][m].astype(np.uint64) << np.uint64(32) | pk["dst"][m].astype(np.uint64),
                     pk["seq"][m].astype(np.uint64) << np.uint64(32)
                     | pk["sport"][m].astype(np.uint64) << np.uint64(16) | pk["dport"][m].astype(np.uint64),
                     pk["payload"][m].astype(np.uint64) << np.uint64(16) | pk["ipid"][m].astype(np.uint64)], axis=1)


def transmissions_lost(before: Packets, mask_before: np.ndarray, after: Packets, mask_after: np.ndarray) -> np.ndarray:
    """For each packet of `before` selected by `mask_before` (in order): True if no packet
    of `after` (among `mask_after`) is the same transmission (transmission_keys). For many
    connections at once, e.g. every data segment that reached a queue against those that
    left it."""
    def rows(pk: Packets, m: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(transmission_keys(pk, m))
        return a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    return ~np.isin(rows(before, mask_before), rows(after, mask_after))


def queue_transits(before: Packets, after: Packets) -> tuple[np.ndarray, np.ndarray]:
    """(time each data segment from a responder reached the queue, s; its transit to the
    capture after it, s), sorted by the first, for every segment seen at both as the same
    transmission (transmission_keys). A transit is the segment's sojourn in the queue plus what
    is constant between the two capture points (its serialisation, any delay there): less the
    run's smallest transit, it is the queueing delay the segment met."""
    def keyed(pk: Packets) -> tuple[np.ndarray, np.ndarray]:
        m = (pk["payload"] > 0) & (pk["dir"] == 1)
        return transmission_keys(pk, m), pk["ts"][m]
    k_in, t_in = keyed(before)
    k_out, t_out = keyed(after)
    keys = np.concatenate([k_in, k_out])
    side = np.concatenate([np.zeros(len(k_in), np.uint8), np.ones(len(k_out), np.uint8)])
    ts = np.concatenate([t_in, t_out])
    order = np.lexsort((ts, side, keys[:, 2], keys[:, 1], keys[:, 0]))
    keys, side, ts = keys[order], side[order], ts[order]
    # An arrival directly followed by a departure of the same key is one transit.
    pair = (side[:-1] == 0) & (side[1:] == 1) & (keys[:-1] == keys[1:]).all(axis=1)
    t0, dt = ts[:-1][pair], ts[1:][pair] - ts[:-1][pair]
    by_time = np.argsort(t0, kind="stable")
    return t0[by_time], dt[by_time]


def dip(before_bps: float, during_bps: float) -> dict:
    """A competing flow's throughput before a flow under test began and while it ran, and
    the dip: the share of its rate the flow under test took (None without a rate before)."""
    return {"mbps_before": before_bps / 1e6, "mbps_during": during_bps / 1e6,
            "dip": 1 - during_bps / before_bps if before_bps > 0 else None}
