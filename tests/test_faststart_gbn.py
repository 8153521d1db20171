"""Root integration: TCP Fast Start's recovery from multiple losses (§3.3.4) on the wire.

Without SACK, a partial ACK during fast recovery cuts cwnd to 1 and slow-starts at once,
go-back-N from that ACK (fs-gbn, the kernel module hosts/kmod/stl_fs_gbn.c). The same
download runs with fs-gbn and with fs (NewReno's recovery, one loss per round trip), and
the bottleneck drops the same segments in both: the first transmission of segment A, and of
B, B+1 and B+2, all in one window (the fault program by sequence number,
hosts/bpf/stl_fault.bpf.c). The loss of A starts fast recovery; the retransmission of A
brings the partial ACK of B. The module needs a kernel that loads it: the stock-kernel
guest (tests/vm), on the virtual clock, where the round trips below have one length.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hosts.apps import curl_fetch
from hosts.bpf import loader
from links.profiles import LinkProfile
from webpath import web_path
from wiretrace import ACK, SYN, read_pcap

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

MSS = 1000                      # an MTU of 1052 with timestamps
RTT_S = 0.1
SIZE = 120_000
# Slow start from one segment: rounds of 1, 2, 4, 8, 16; the fifth holds segments 15-30.
FIRST_LOSS = 18
SECOND_LOSS = (24, 25, 26)
ACK_REACHES_SENDER_S = 0.001


def profile() -> LinkProfile:
    return LinkProfile(name="fs-gbn-test", down_mbps=10, up_mbps=10, rtt_ms=RTT_S * 1e3, buffer_pkts=200, mtu=1052)


@dataclass
class Download:
    data: list                  # the server's data segments, before the bottleneck (with the dropped ones)
    acks: list                  # the client's ACKs toward the server
    isn: int
    sack: bool                  # SACK negotiated: the server's SYN-ACK permitted it, or an ACK carried blocks
    entered: int                # partial ACKs that entered go-back-N (the server's counter)
    dropped: int                # what the fault program dropped

    def index(self, seq: int) -> int:
        """The segment number of a sequence number (0: the first data segment)."""
        return ((seq - self.isn - 1) % 2 ** 32) // MSS

    def ack_index(self, ack: int) -> int:
        """The number of the first segment an ACK does not acknowledge."""
        return ((ack - self.isn - 1) % 2 ** 32) // MSS


def _has_option(options: bytes, kind: int) -> bool:
    i = 0
    while i < len(options):
        k = options[i]
        if k == 0:
            return False
        if k == 1:
            i += 1
            continue
        if k == kind:
            return True
        i += max(2, options[i + 1] if i + 1 < len(options) else 2)
    return False


def download(tmp: Path, variant: str) -> Download:
    with web_path(tmp, profile(), variant, [SIZE]) as w:
        queue = w.net.queue("down")
        loader.fault_drop_segments(w.session.instance, w.net.host(queue.node), queue.intf,
                                   [i * MSS for i in (FIRST_LOSS, *SECOND_LOSS)])
        w.session.capture_standard()
        w.session.ready()
        got = curl_fetch(w.client, w.url(), w.work, w.session.instance, 60)
        assert got["http_code"] == 200 and int(got["size_download"]) == SIZE, got
        dropped = loader.fault_counts(w.session.instance, queue.intf)["dropped"]
    entered = w.session.record()["server_counters"].get(w.server.name, {}).get("gbn_entered", 0)
    packets = read_pcap(w.work / "cap-bneck-in.pcap")
    syns = [p for p in packets if p.flags & SYN]
    isn = next(p.seq for p in syns if p.src == w.server_ip)
    return Download(data=[p for p in packets if p.src == w.server_ip and p.payload > 0],
                    acks=[p for p in packets if p.src == w.client_ip and p.flags & ACK and not p.flags & SYN],
                    isn=isn, sack=any(_has_option(p.tcp_options, 4) for p in syns if p.src == w.server_ip)
                    or any(_has_option(p.tcp_options, 5) for p in packets if p.src == w.client_ip),
                    entered=entered, dropped=dropped)


def partial_ack(d: Download):
    """The ACK that the retransmission of the first loss brings: it acknowledges up to the
    second loss, short of what was sent (the recovery point)."""
    return next(a for a in d.acks if d.ack_index(a.ack) == SECOND_LOSS[0])


def sent_between(d: Download, t0: float, t1: float) -> list[int]:
    return [d.index(p.seq) for p in d.data if t0 < p.ts < t1]


def next_advance(d: Download, t: float, beyond: int):
    """The first ACK after `t` that acknowledges segment `beyond` (duplicate ACKs of data
    sent earlier may come in between)."""
    return next(a for a in d.acks if a.ts > t and d.ack_index(a.ack) > beyond)


def timeline(d: Download, t0: float, t1: float) -> str:
    """What the sender sent and received between two moments, for a failure's message."""
    events = [(p.ts, f"data {d.index(p.seq)}") for p in d.data if t0 <= p.ts <= t1]
    events += [(a.ts, f"ack {d.ack_index(a.ack)}") for a in d.acks if t0 <= a.ts <= t1]
    return ", ".join(f"{(t - t0) * 1e3:.1f} ms {what}" for t, what in sorted(events))


def end_of_recovery(d: Download) -> float:
    """When the ACK of the last lost segment arrived."""
    return next(a.ts for a in d.acks if d.ack_index(a.ack) > SECOND_LOSS[-1])


def never_resent_what_was_acknowledged(d: Download) -> None:
    """No segment leaves after the sender had an ACK of it. The capture stands on the
    router's side of the server's link: an ACK passes it a little before the server has
    it, and a segment the server sent before that may pass it after (0.1 ms measured);
    ACK_REACHES_SENDER_S covers that way in and back out."""
    for p in d.data:
        acked = [a for a in d.acks if a.ts + ACK_REACHES_SENDER_S < p.ts and d.ack_index(a.ack) > d.index(p.seq)]
        assert not acked, f"segment {d.index(p.seq)} sent at {p.ts:.4f} after its ACK at {acked[0].ts:.4f}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Download]:
    return {v: download(tmp_path_factory.mktemp(v), v) for v in ("fs-gbn", "fs")}


def test_a_partial_ack_in_fast_recovery_slow_starts_from_one_segment_go_back_n(runs):
    d = runs["fs-gbn"]
    assert not d.sack, "SACK was negotiated: the rule is for connections without it"
    assert d.dropped == 1 + len(SECOND_LOSS), d.dropped
    assert d.entered == 1, f"the module entered go-back-N {d.entered} times (one partial ACK expected)"
    first = [p for p in d.data if d.index(p.seq) == FIRST_LOSS]
    partial = partial_ack(d)
    assert len(first) == 2, timeline(d, first[0].ts, partial.ts)
    assert partial.ts > first[1].ts
    # cwnd 1 from the partial ACK: the segment it asks for goes alone, and nothing else
    # until its ACK, whatever duplicate ACKs of data sent in fast recovery arrive meanwhile.
    reply = next_advance(d, partial.ts, SECOND_LOSS[0])
    story = timeline(d, partial.ts, reply.ts + 2 * RTT_S)
    assert sent_between(d, partial.ts, reply.ts) == [SECOND_LOSS[0]], story
    # Slow start: its ACK acknowledges one segment and lets two go (cwnd 2), in order.
    assert d.ack_index(reply.ack) == SECOND_LOSS[1], story
    following = next_advance(d, reply.ts, SECOND_LOSS[1])
    assert sent_between(d, reply.ts, following.ts) == list(SECOND_LOSS[1:]), story
    # Go-back-N: from the partial ACK on, the window is sent again in order from it, up to
    # where the receiver's cumulative ACK took over, then new data; nothing twice, and
    # nothing the receiver acknowledged.
    highest = max(d.index(p.seq) for p in d.data if p.ts < partial.ts)
    after = [d.index(p.seq) for p in d.data if p.ts > partial.ts]
    resent = [i for i in after if i <= highest]
    assert resent == list(range(SECOND_LOSS[0], SECOND_LOSS[0] + len(resent))), story
    assert after == sorted(set(after)), story
    never_resent_what_was_acknowledged(d)
    print(f"fs-gbn: partial ACK at {partial.ts:.4f} s, recovery over at {end_of_recovery(d):.4f} s")


def test_without_the_rule_newreno_recovers_one_loss_per_round_trip(runs):
    """fs on the same drops: each partial ACK retransmits one segment, so the second loss's
    three segments take three round trips where go-back-N's slow start takes two."""
    d, gbn = runs["fs"], runs["fs-gbn"]
    assert d.entered == 0 and d.dropped == 1 + len(SECOND_LOSS)
    partial = partial_ack(d)
    resent = [p for p in d.data if p.ts > partial.ts and d.index(p.seq) in SECOND_LOSS]
    assert [d.index(p.seq) for p in resent] == list(SECOND_LOSS)
    gaps = [b.ts - a.ts for a, b in zip(resent, resent[1:])]
    assert all(g > 0.9 * RTT_S for g in gaps), f"retransmissions {gaps} s apart: not one per round trip"
    never_resent_what_was_acknowledged(d)
    took = {v: end_of_recovery(r) - partial_ack(r).ts for v, r in runs.items()}
    sys.stdout.write(f"from the partial ACK to the end of recovery: {took}\n")
    assert took["fs"] - took["fs-gbn"] > 0.9 * RTT_S, took
