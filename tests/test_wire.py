"""The first-flight and pacing checks the on-the-wire tests share (tests/wire.py), on
synthetic flights: a correct pacer whose timer fires late passes, a burst, pacing at the
wrong rate and slow start fail."""
from wiretrace import KERNEL_UNPACED, Packet, paced_flight, pacing_span_ok

RTT = 0.040


def segment(ts: float, i: int) -> Packet:
    return Packet(ts=ts, src="10.2.0.1", dst="10.1.0.1", ttl=64, ip_options=b"", sport=80, dport=40000,
                  seq=i * 1448, ack=0, flags=0x10, win=0, payload=1448, tcp_options=b"", ip_header=b"")


def paced(n: int, over_s: float, late_tail: int = 0, late_s: float = 0.0) -> list[Packet]:
    """n segments: the first ten at once, the rest evenly over `over_s` × (n − 10)/n; the
    last `late_tail` of them `late_s` late (a busy CPU delaying the pacing timer)."""
    gap = over_s / n
    out = [segment(0.0, i) for i in range(KERNEL_UNPACED)]
    out += [segment((i - KERNEL_UNPACED + 1) * gap, i) for i in range(KERNEL_UNPACED, n)]
    for s in out[n - late_tail:]:
        s.ts += late_s
    return out


def test_a_correct_pacer_with_a_late_timer_passes():
    n = 104
    data = paced(n, RTT, late_tail=3, late_s=0.004)       # the last three leave after the first ACK
    first_ack = RTT                                        # the first segment's ACK
    assert sum(s.ts < first_ack for s in data) < n         # the old, strict definition missed them
    flight = paced_flight(data, first_ack, n, RTT)
    assert len(flight) == n
    assert pacing_span_ok(flight, RTT, RTT)[0]


def test_a_burst_or_the_wrong_rate_fails():
    n = 104
    burst = [segment(i * 1e-5, i) for i in range(n)]
    assert not pacing_span_ok(paced_flight(burst, RTT, n, RTT), RTT, RTT)[0]
    twice_as_fast = paced(n, RTT / 2)
    assert not pacing_span_ok(twice_as_fast, RTT, RTT)[0]
    half_as_fast = paced(n, 2 * RTT)
    assert not pacing_span_ok(half_as_fast, RTT, RTT)[0]
    assert len(paced_flight(half_as_fast, RTT, n, RTT)) < n   # and its tail misses the first flight


def test_slow_start_does_not_pass_for_a_paced_window():
    """IW10, then two segments per ACK as the ACKs of the first ten return 0.6 ms apart."""
    data = [segment(0.0, i) for i in range(10)]
    for k in range(10):
        data += [segment(RTT + k * 0.0006, 10 + 2 * k), segment(RTT + k * 0.0006, 11 + 2 * k)]
    flight = paced_flight(data, RTT, 104, RTT)
    assert len(flight) == 30 and len(flight) < 104 - 3
