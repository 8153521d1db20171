"""Unit tests (no root): what a capture's counters say it missed (hosts/capture.unwritten)."""
from __future__ import annotations

from hosts.capture import not_exact, unwritten


def test_only_packets_taken_before_the_drain_count_as_the_runs():
    # caught up at 1000 taken; 30 more arrived after the processes stopped, 2 of them unwritten
    assert unwritten(2, 1030, 1000) == (0, 2)
    # 40 unwritten but only 30 came after the drain: 10 of the run's are missing
    assert unwritten(40, 1030, 1000) == (10, 30)
    # never drained (the drain timed out): every unwritten packet may be the run's
    assert unwritten(5, 1030, None) == (5, 0)
    assert unwritten(-3, 1030, 1000) == (0, 0)
    assert unwritten(None, None, None) == (None, 0)


def test_a_tail_left_unwritten_keeps_the_capture_exact():
    tail = {"file": "cap-client.pcap", "dropped_by_kernel": 0, "unwritten": 0, "unwritten_after_traffic": 2}
    run = {**tail, "unwritten": 1}
    assert not_exact([tail]) == [] and not_exact([run]) == [run]


def test_the_clock_offset_is_read_where_the_reads_bracket_it_tightly():
    import time
    from links.delay import monotonic_minus_realtime_ns
    a = monotonic_minus_realtime_ns()
    b = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - time.time_ns()
    assert abs(a - b) < 1_000_000            # the same offset, within a millisecond of scheduling
