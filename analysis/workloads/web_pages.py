"""Pages and connections of a web run, from the captures and httperf's per-call log.

The per-call log (wire/httperf_log.py) says which calls make up a page (URI tags
user/page/object) and how long each reply was (header + content bytes); the captures say
when things happened on the wire. The request lines of the small filtered capture
(web_handshakes.py) put each call on its connection (pipelined requests sharing a segment
are placed on their user's connection of that moment); on a connection the replies come
in request order, so call i's reply ends at byte Σ_{j≤i} (header_j + content_j) of the
server's stream, and its last byte is there when every byte below that offset has
arrived at the clients' uplink (cap-client.pcap).

Object download time of a page (Scharf Fig. 8): from the client's SYN of the connection
that carries the base document's request — where that request opens its connection (every
page in HTTP/1.0, a persistent connection's first page) — or else from the document's
request, to the last byte of the page's last reply.

Every per-packet step is numpy over whole columns (sorting, searchsorted, cumulative
sums and maxima per connection); Python loops run over calls and connections only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from analysis.packets import ACK, Capture, synacks
from analysis.workloads.web_handshakes import Handshake, Request
from wire.httperf_log import TAG, WARMUP, HttperfReport

US = 1_000_000


@dataclass
class Calls:
    """All calls of a run as columns (one row per call httperf made)."""
    combo: np.ndarray        # index into the run's combos
    user: np.ndarray
    page: np.ndarray         # -1 for a stationary start's warm-up request
    obj: np.ndarray
    client: np.ndarray       # the client host's address (big-endian integer)
    sent: np.ndarray         # stamped send time (NaN if unstamped)
    done: np.ndarray         # stamped completion (NaN if incomplete)
    reply_bytes: np.ndarray  # header + content (0 if incomplete)
    ok: np.ndarray           # complete with status 200
    uri: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.user)


def ip_int(dotted: str) -> int:
    a, b, c, d = (int(x) for x in dotted.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def calls_of(reports: list[tuple[int, str, HttperfReport]]) -> Calls:
    """Columns of every tagged call of (combo index, client address, report) triples."""
    rows = []
    for combo, client, rep in reports:
        cip = ip_int(client)
        for c in rep.calls.values():
            m, w = TAG.search(c.uri), WARMUP.search(c.uri)
            if m:
                user, page, obj = int(m[1]), int(m[2]), int(m[3])
            elif w:
                user, page, obj = int(w[1]), -1, 0
            else:
                continue
            ok = c.complete and c.status == 200
            rows.append((combo, user, page, obj, cip, c.sent_s if c.sent_s is not None else np.nan,
                         c.done_s if c.done_s is not None and ok else np.nan,
                         (c.header_bytes or 0) + (c.content_bytes or 0) if ok else 0, ok, c.uri))
    if not rows:
        z = np.zeros(0, dtype=np.int64)
        return Calls(z, z, z, z, z, np.zeros(0), np.zeros(0), z, np.zeros(0, dtype=bool), [])
    cols = list(zip(*rows))
    return Calls(np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.int64),
                 np.array(cols[2], dtype=np.int64), np.array(cols[3], dtype=np.int64),
                 np.array(cols[4], dtype=np.int64), np.array(cols[5], dtype=float), np.array(cols[6], dtype=float),
                 np.array(cols[7], dtype=np.int64), np.array(cols[8], dtype=bool), list(cols[9]))


# --- connections -------------------------------------------------------------------------------

def tuple_keys(addr: np.ndarray, port: np.ndarray, addresses: np.ndarray) -> np.ndarray:
    """A small integer per (client address, port): the address's rank among `addresses`
    (a handful of client hosts) above the 16 port bits."""
    rank = np.searchsorted(addresses, addr)
    return (rank.astype(np.int64) << 16) | port.astype(np.int64)


def latest_started(keys: np.ndarray, starts_us: np.ndarray, q_keys: np.ndarray, q_us: np.ndarray,
                   ids: np.ndarray) -> np.ndarray:
    """For each query, ids[i] of the entry with the same key that started last at or before
    the query time; -1 where there is none. Keys < 2^22, times in µs < 2^40."""
    comp = (keys << 40) | starts_us
    order = np.argsort(comp, kind="stable")
    comp_sorted = comp[order]
    q = (q_keys << 40) | np.clip(q_us, 0, (1 << 40) - 1)
    pos = np.searchsorted(comp_sorted, q, side="right") - 1
    found = (pos >= 0) & (keys[order][np.maximum(pos, 0)] == q_keys)
    return np.where(found, ids[order][np.maximum(pos, 0)], -1)


@dataclass
class WebConns:
    """The client-initiated connections to the server port at one capture point."""
    index: np.ndarray        # connection indices in the capture's table
    client: np.ndarray
    port: np.ndarray
    start: np.ndarray        # SYN time (first packet if the SYN was missed)
    end: np.ndarray          # last packet
    isn: np.ndarray          # the server's initial sequence number (-1 if no SYN-ACK seen)


def web_conns(cap: Capture, server_port: int) -> WebConns:
    conns, pk = cap.conns, cap.packets
    idx = np.flatnonzero(conns["dport"] == server_port)
    syn = conns["syn_ts"][idx]
    start = np.where(np.isnan(syn), conns["first_ts"][idx], syn)
    isn = np.full(len(conns), -1, dtype=np.int64)
    synack = synacks(pk["flags"]) & (pk["dir"] == 1)
    isn[pk["conn"][synack]] = pk["seq"][synack]
    return WebConns(idx, conns["src"][idx].astype(np.int64), conns["sport"][idx].astype(np.int64), start,
                    conns["last_ts"][idx], isn[idx])


def match_conns(a: WebConns, b: WebConns, origin: float) -> np.ndarray:
    """For each connection of `a`, its position in `b` (another capture point): same
    client address and port, the latest that started before `a`'s connection ended."""
    addresses = np.unique(np.concatenate([a.client, b.client]))
    return latest_started(tuple_keys(b.client, b.port, addresses), _us(b.start, origin),
                          tuple_keys(a.client, a.port, addresses), _us(a.end, origin), np.arange(len(b.index)))


def _us(t: np.ndarray, origin: float) -> np.ndarray:
    return np.round((np.nan_to_num(t, nan=origin) - origin) * US).astype(np.int64)


# --- calls onto connections ----------------------------------------------------------------------

def place_calls(calls: Calls, conns: WebConns, requests: list[Request], windows: np.ndarray,
                origin: float) -> tuple[np.ndarray, np.ndarray]:
    """(connection position per call or -1, the capture time of its request line or NaN).

    A request line seen on the wire names its call exactly (the URI carries its tag; the
    combo comes from the time window it fell in). A call whose line was not seen (it shared
    a segment with an earlier pipelined request) goes on the connection its user's seen
    calls used at that moment.
    """
    conn_of = np.full(len(calls), -1, dtype=np.int64)
    req_ts = np.full(len(calls), np.nan)
    if not len(calls):
        return conn_of, req_ts
    addresses = np.unique(conns.client)
    if requests:
        r_ts = np.array([r.ts for r in requests])
        r_conn = latest_started(tuple_keys(conns.client, conns.port, addresses), _us(conns.start, origin),
                                tuple_keys(np.array([r.client for r in requests], dtype=np.int64),
                                           np.array([r.client_port for r in requests], dtype=np.int64), addresses),
                                _us(r_ts, origin), np.arange(len(conns.index)))
        r_combo = np.searchsorted(windows, r_ts, side="right") - 1
        seen = {(int(c), r.uri): (int(k), float(t)) for c, r, k, t in zip(r_combo, requests, r_conn, r_ts) if k >= 0}
        for i, uri in enumerate(calls.uri):
            hit = seen.get((int(calls.combo[i]), uri))
            if hit:
                conn_of[i], req_ts[i] = hit
    # The rest: the user's connection that started last before the call was sent.
    unplaced = np.flatnonzero((conn_of < 0) & ~np.isnan(calls.sent))
    placed = np.flatnonzero(conn_of >= 0)
    if len(unplaced) and len(placed):
        user_key = (calls.combo << 20) | calls.user
        starts = conns.start[conn_of[placed]]
        hit = latest_started(user_key[placed], _us(starts, origin), user_key[unplaced],
                             _us(calls.sent[unplaced], origin), conn_of[placed])
        conn_of[unplaced] = hit
    return conn_of, req_ts


# --- reply completion from the server's byte stream -------------------------------------------

def completion_times(cap: Capture, conns: WebConns, conn_pos: np.ndarray, end_offset: np.ndarray,
                     origin: float) -> np.ndarray:
    """For each (connection position, stream offset X): when every byte of the server's
    stream below X had arrived at this capture point (NaN if some never did)."""
    pk = cap.packets
    out = np.full(len(conn_pos), np.nan)
    if not len(conn_pos):
        return out
    # Position in `conns` of each packet's connection (-1 for other connections).
    pos_of = np.full(len(cap.conns), -1, dtype=np.int64)
    pos_of[conns.index] = np.arange(len(conns.index))
    p = pos_of[pk["conn"]]
    data = (p >= 0) & (pk["dir"] == 1) & (pk["payload"] > 0) & (pk["newbytes"] > 0)
    p = p[data]
    isn = conns.isn[p]
    have = isn >= 0
    p, isn = p[have], isn[have]
    start = (pk["seq"][data][have].astype(np.int64) - isn - 1) % (1 << 32)
    end = start + pk["payload"][data][have].astype(np.int64)
    ts = pk["ts"][data][have] - origin
    order = np.lexsort((start, p))
    p, start, end, ts = p[order], start[order], end[order], ts[order]
    # Running maxima of arrival time and of covered end within each connection: offsets keep
    # the groups apart (later connections sort after earlier ones).
    span_t = float(np.nanmax(ts)) + 1.0 if len(ts) else 1.0
    t_max = np.maximum.accumulate(ts + p * span_t) - p * span_t
    e_max = np.maximum.accumulate(end + p * (1 << 34)) - p * (1 << 34)
    keys = (p << 34) | start
    ok = (conn_pos >= 0) & (end_offset > 0)
    q = (conn_pos[ok] << 34) | np.minimum(end_offset[ok], (1 << 34) - 1)
    at = np.searchsorted(keys, q, side="left") - 1
    valid = (at >= 0) & (p[np.maximum(at, 0)] == conn_pos[ok]) & (e_max[np.maximum(at, 0)] >= end_offset[ok])
    got = np.where(valid, t_max[np.maximum(at, 0)] + origin, np.nan)
    out[ok] = got
    return out


def reply_offsets(calls: Calls, conn_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(end offset of each call's reply in its connection's server stream, the call's rank
    on its connection), replies in the order the requests were sent."""
    n = len(calls)
    offset, rank = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    on = np.flatnonzero(conn_of >= 0)
    if not len(on):
        return offset, rank
    order = on[np.lexsort((np.nan_to_num(calls.sent[on], nan=np.inf), conn_of[on]))]
    c = conn_of[order]
    csum = np.cumsum(calls.reply_bytes[order])
    first = np.concatenate(([True], c[1:] != c[:-1]))
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    before = np.where(group_start > 0, csum[group_start - 1], 0)
    offset[order] = csum - before
    rank[order] = np.arange(len(c)) - group_start
    return offset, rank


# --- first flights at the sender's side ----------------------------------------------------------

def first_flights(cap: Capture, conns: WebConns, mss: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per connection (positions of `conns` in this capture): the data the server sent before
    the first ACK of its data came back, in segments and bytes, and the segments of the
    first reply (the server's new data before the client's second request arrived: all a
    first flight may carry; the whole connection for HTTP/1.0)."""
    pk = cap.packets
    n = len(conns.index)
    pos_of = np.full(len(cap.conns), -1, dtype=np.int64)
    pos_of[conns.index] = np.arange(n)
    p = pos_of[pk["conn"]]
    mine = p >= 0
    ts, d = pk["ts"], pk["dir"]
    data = mine & (d == 1) & (pk["payload"] > 0) & (pk["retx"] == 0)
    # The first data byte of each connection (capture order is time order).
    dp = p[data]
    first_idx = np.full(n, -1, dtype=np.int64)
    uniq, at = np.unique(dp, return_index=True)
    first_idx[uniq] = np.flatnonzero(data)[at]
    has = first_idx >= 0
    first_seq = np.zeros(n, dtype=np.int64)
    first_seq[has] = pk["seq"][first_idx[has]]
    # The first ACK from the client that acknowledges new data.
    back = mine & (d == 0) & ((pk["flags"] & ACK) != 0)
    bp = p[back]
    advance = (pk["ack"][back].astype(np.int64) - first_seq[bp]) % (1 << 32)
    acking = has[bp] & (advance > 0) & (advance < (1 << 31))
    t_ack = np.full(n, np.inf)
    uniq, at = np.unique(bp[acking], return_index=True)
    t_ack[uniq] = ts[back][acking][at]
    # The client's second request (its second first-transmitted data segment).
    req = mine & (d == 0) & (pk["payload"] > 0) & (pk["retx"] == 0)
    rp = p[req]
    t_req2 = np.full(n, np.inf)
    if len(rp):
        uniq, at, counts = np.unique(rp, return_index=True, return_counts=True)
        two = counts >= 2
        t_req2[uniq[two]] = ts[req][at[two] + 1]
    segs = np.ceil(pk["payload"][data].astype(np.int64) / max(1, mss)).astype(np.int64)
    tdata = ts[data]
    in_flight = tdata < t_ack[dp]
    in_reply = tdata < t_req2[dp]
    flight_segs = np.bincount(dp[in_flight], weights=segs[in_flight], minlength=n).astype(np.int64)
    flight_bytes = np.bincount(dp[in_flight], weights=pk["payload"][data][in_flight], minlength=n).astype(np.int64)
    reply_segs = np.bincount(dp[in_reply], weights=segs[in_reply], minlength=n).astype(np.int64)
    return flight_segs, flight_bytes, reply_segs


# --- drops at the bottleneck queue ---------------------------------------------------------------

def server_segment_keys(cap: Capture, server_port: int) -> tuple[np.ndarray, np.ndarray]:
    """(key, time) of every data segment the server sent, one key per transmission: client
    port, sequence number and IP ID (a retransmission has a new IP ID)."""
    pk = cap.packets
    m = (pk["sport"] == server_port) & (pk["payload"] > 0)
    key = (pk["dport"][m].astype(np.uint64) << np.uint64(48)) | (pk["seq"][m].astype(np.uint64) << np.uint64(16)) \
        | pk["ipid"][m].astype(np.uint64)
    return key, pk["ts"][m]


def dropped_between(before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray],
                    windows: np.ndarray) -> np.ndarray:
    """Data segments seen before the queue and never after it, per time window (by the time
    they reached the queue); `windows` are the windows' start times."""
    k_in, t_in = before
    k_out = np.unique(after[0])
    lost = ~np.isin(k_in, k_out)
    which = np.searchsorted(windows, t_in[lost], side="right") - 1
    return np.bincount(which[which >= 0], minlength=len(windows))


# --- one run -------------------------------------------------------------------------------------

@dataclass
class PageTable:
    """One row per page httperf logged (warm-ups excluded)."""
    combo: np.ndarray
    user: np.ndarray
    page: np.ndarray
    objects: np.ndarray
    bytes: np.ndarray
    start: np.ndarray        # SYN or document request at the capture
    end: np.ndarray          # last byte of the last reply at the capture
    log_start: np.ndarray    # the document's request as stamped
    log_end: np.ndarray      # the last reply's completion as stamped
    complete: np.ndarray     # every object 200 and complete, and seen on the wire

    @property
    def download_s(self) -> np.ndarray:
        return self.end - self.start


def pages_of(calls: Calls, conn_of: np.ndarray, req_ts: np.ndarray, rank: np.ndarray, reply_end: np.ndarray,
             conns: WebConns) -> PageTable:
    """Group the calls into pages: start, end and completeness of each."""
    real = calls.page >= 0
    key = (calls.combo[real] << 44) | (calls.user[real] << 24) | calls.page[real]
    uniq, inv = np.unique(key, return_inverse=True)
    n = len(uniq)
    idx = np.flatnonzero(real)
    objects = np.bincount(inv, minlength=n)
    nbytes = np.bincount(inv, weights=calls.reply_bytes[idx], minlength=n).astype(np.int64)
    ok_all = np.bincount(inv, weights=(calls.ok[idx] & ~np.isnan(reply_end[idx])).astype(float), minlength=n) \
        == objects
    end = np.full(n, -np.inf)
    np.maximum.at(end, inv, np.nan_to_num(reply_end[idx], nan=-np.inf))
    log_end = np.full(n, -np.inf)
    np.maximum.at(log_end, inv, np.nan_to_num(calls.done[idx], nan=-np.inf))
    doc = idx[calls.obj[idx] == 0]
    doc_page = inv[calls.obj[idx] == 0]
    start, log_start = np.full(n, np.nan), np.full(n, np.nan)
    has_doc = np.zeros(n, dtype=bool)
    has_doc[doc_page] = True
    c = conn_of[doc]
    opens = (rank[doc] == 0) & (c >= 0)
    first = np.where(opens, conns.start[np.maximum(c, 0)], np.where(np.isnan(req_ts[doc]), calls.sent[doc], req_ts[doc]))
    start[doc_page] = np.where(c >= 0, first, np.nan)
    log_start[doc_page] = calls.sent[doc]
    complete = ok_all & has_doc & np.isfinite(start) & np.isfinite(end)
    end = np.where(np.isfinite(end), end, np.nan)
    log_end = np.where(np.isfinite(log_end), log_end, np.nan)
    return PageTable(uniq >> 44, (uniq >> 24) & 0xFFFFF, uniq & 0xFFFFFF, objects, nbytes, start, end, log_start,
                     log_end, complete)


def in_flight(calls: Calls, conn_of: np.ndarray, reply_end: np.ndarray, origin: float) -> np.ndarray:
    """Per call: how many requests of its connection were unanswered once it was sent, itself
    included (1 = nothing else outstanding), from the stamped send times and the capture's
    reply completions (replies on a connection complete in request order)."""
    out = np.zeros(len(calls), dtype=np.int64)
    on = np.flatnonzero((conn_of >= 0) & ~np.isnan(calls.sent))
    if not len(on):
        return out
    order = np.lexsort((calls.sent[on], conn_of[on]))
    on = on[order]
    c = conn_of[on]
    first = np.concatenate(([True], c[1:] != c[:-1]))
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    sent = calls.sent[on] - origin
    end = np.nan_to_num(reply_end[on] - origin, nan=np.inf)
    span = float(np.max(np.concatenate([sent, end[np.isfinite(end)]]))) + 1.0
    # Times of different connections kept apart by an offset per connection.
    shifted_end = np.sort(np.where(np.isfinite(end), end + c * span, (c + 1) * span - 1e-9))
    done_before = np.searchsorted(shifted_end, sent + c * span, side="left") - np.searchsorted(shifted_end, c * span)
    out[on] = np.arange(len(c)) - group_start + 1 - done_before
    return out


@dataclass
class ConnTable:
    """One row per connection that carried calls, with its Quick-Start handshake."""
    pos: np.ndarray          # positions in WebConns
    combo: np.ndarray
    user: np.ndarray
    calls: np.ndarray
    duration: np.ndarray
    bytes: np.ndarray        # unique bytes server → client
    flight_segments: np.ndarray
    flight_bytes: np.ndarray
    reply_segments: np.ndarray
    qs: list[dict]


def conn_table(cap: Capture, conns: WebConns, calls: Calls, conn_of: np.ndarray, flights: tuple,
               shakes: dict[tuple, Handshake]) -> ConnTable:
    placed = np.flatnonzero(conn_of >= 0)
    order = placed[np.lexsort((np.nan_to_num(calls.sent[placed], nan=np.inf), conn_of[placed]))]
    used, at = np.unique(conn_of[order], return_index=True)
    fc = order[at]                                      # each connection's earliest call
    ncalls = np.bincount(conn_of[placed], minlength=len(conns.index))
    qs = []
    for pos in used:
        h = shakes.get((int(conns.client[pos]), int(conns.port[pos]), int(conns.isn[pos])))
        qs.append(h.figures() if h else {"requested": False, "approved": False})
    seg, byt, rep = flights
    return ConnTable(used, calls.combo[fc], calls.user[fc], ncalls[used], conns.end[used] - conns.start[used],
                     cap.conns["unique_bytes"][conns.index[used], 1].astype(np.int64), seg[used], byt[used],
                     rep[used], qs)
