"""Reading captures with every header field kept, for the tests that check schemes on the wire.

The columnar extractor (analysis/pcapcols) keeps what the metrics need and drops
options; these tests need the IP and TCP options and the IP TTL of the handshake, and
their captures are small, so a plain Python reader does.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from links.profiles import LinkProfile
from wire import pcap

SYN, ACK = 0x02, 0x10
MSS = 1448
KERNEL_UNPACED = 10          # the kernel does not pace a connection's first 10 data segments
# A flight paced over one RTT ends when the first ACK of its data comes back: its last
# segments race that ACK by a few hundred microseconds. The kernel's pacing timer fires
# late when the CPUs are busy (measured: up to several ms with one of the two cores
# spinning), so a correct sender's last paced segments can leave just after that ACK.
# A paced segment counts as part of the first flight if it left within this share of
# the RTT after the ACK; ACK-clocked slow start could add only a handful of segments in
# that time, far fewer than any window the tests distinguish.
PACING_SLACK_RTTS = 0.25


def test_profile(name: str, rate_mbps: float, rtt_ms: float) -> LinkProfile:
    """A small dumbbell profile with a queue deep enough never to drop a first flight."""
    return LinkProfile(name=f"{name}-{rate_mbps:g}", down_mbps=rate_mbps, up_mbps=rate_mbps,
                       rtt_ms=rtt_ms, buffer_pkts=400)


test_profile.__test__ = False    # a helper, not a test, despite its name


@dataclass
class Packet:
    ts: float
    src: str
    dst: str
    ttl: int
    ip_options: bytes
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    win: int
    payload: int
    tcp_options: bytes
    ip_header: bytes


def paced_flight(data: list["Packet"], first_ack_ts: float, window: int, rtt_s: float) -> list["Packet"]:
    """The first `window` data segments that left before the first ACK of data came back
    (give or take the pacing timer's lateness, PACING_SLACK_RTTS): a sender that released a
    window of `window` segments in its first RTT has all of them here."""
    deadline = first_ack_ts + PACING_SLACK_RTTS * rtt_s
    return [s for s in data[:window] if s.ts < deadline]


def pacing_span_ok(flight: list["Packet"], pace_s: float, rtt_s: float) -> tuple[bool, float, float]:
    """Whether the segments after the kernel's unpaced first ten were spread over about
    `pace_s` × (share of the flight they are), as (ok, measured span, ideal span).

    The bounds are what a correct pacer meets on a loaded two-core machine: a late timer
    shortens the span by catching up (the kernel credits lateness against the next gaps)
    or lengthens it by the slack the flight definition allows. A burst (span ≈ 0), pacing at
    twice the rate (half the span) or at half the rate (twice the span) fail either bound.
    """
    n = len(flight)
    span = flight[-1].ts - flight[min(KERNEL_UNPACED, n - 1)].ts
    ideal = pace_s * (n - KERNEL_UNPACED) / n
    return 0.65 * ideal <= span <= 1.1 * ideal + PACING_SLACK_RTTS * rtt_s, span, ideal


def ip_checksum_ok(header: bytes) -> bool:
    """An IPv4 header (options included) whose checksum verifies."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def read_pcap(path: Path) -> list[Packet]:
    """Ethernet/IPv4/TCP records of a classic pcap file (tcpdump -w), options kept."""
    return [Packet(ts=p.ts, src=pcap.dotted(p.src), dst=pcap.dotted(p.dst), ttl=p.ttl, ip_options=p.ip_options,
                   sport=p.sport, dport=p.dport, seq=p.seq, ack=p.ack, flags=p.flags, win=p.win,
                   payload=p.payload_len, tcp_options=p.tcp_options, ip_header=p.ip_header)
            for p in pcap.tcp_packets(path)]
