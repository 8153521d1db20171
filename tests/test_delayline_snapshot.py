"""Delay-element snapshots: interval figures from two snapshots (unit) and the line's
SIGUSR1 snapshots around a UDP probe (root)."""
from __future__ import annotations

import os

import pytest
from timing import timing_check

from links import delay


def _dir(tx: int, fine: list[list[int]], **extra) -> dict:
    base = {"rx_frames": tx, "rx_bytes": 100 * tx, "tx_frames": tx, "tx_bytes": 100 * tx,
            "ring_overflows": 0, "send_errors": 0, "rx_errors": 0, "socket_drops": 0,
            "link_tx_drops": 0, "reorders_seen": 0, "lateness_fine_us": fine}
    return {**base, **extra}


def _snap(gen: int, ab: dict, ba: dict, elapsed: float = 1.0) -> dict:
    return {"backend": "delayline", "generation": gen, "final": False, "elapsed_s": elapsed,
            "a_to_b": ab, "b_to_a": ba, "drops": 0, "reorders": 0}


# -- unit: histogram figures ----------------------------------------------------------------

def test_histogram_figures_use_the_lines_rank_rule():
    # 100 frames at 0..99 µs: p50 is the 50th frame's bucket (49), p99 the 99th (98).
    hist = {us: 1 for us in range(100)}
    assert delay.histogram_figures(hist) == {"p50": 49, "p99": 98, "max": 99}
    assert delay.histogram_figures({7: 3}) == {"p50": 7, "p99": 7, "max": 7}
    assert delay.histogram_figures({}) == {"p50": None, "p99": None, "max": None}
    assert delay.histogram_figures(None) == {"p50": None, "p99": None, "max": None}
    # Zero-count buckets (left over from a difference) do not count as the max.
    assert delay.histogram_figures({5: 2, 900: 0})["max"] == 5


# -- unit: intervals --------------------------------------------------------------------------

def test_interval_is_the_difference_of_two_snapshots():
    before = _snap(1, _dir(10, [[3, 8], [40, 2]]), _dir(5, [[2, 5]]), elapsed=2.0)
    # In the interval a→b sent 100 frames: 90 at 3 µs, 8 at 1500 µs, 2 at 30 000 µs;
    # b→a sent none. The earlier buckets must not leak into the interval's quantiles.
    after = _snap(2, _dir(110, [[3, 98], [40, 2], [1500, 8], [30000, 2]], socket_drops=3,
                          ring_overflows=1, reorders_seen=2),
                  _dir(5, [[2, 5]], link_tx_drops=4), elapsed=5.5)
    f = delay.interval_figures(before, after)
    assert f["frames"] == 100 and f["a_to_b"]["frames"] == 100 and f["b_to_a"]["frames"] == 0
    assert f["drops"] == 8
    assert f["drops_by_kind"] == {"ring_overflows": 1, "send_errors": 0, "socket_drops": 3,
                                  "link_tx_drops": 4, "rx_errors": 0}
    assert f["reorders"] == 2
    assert f["lateness_us"] == {"p50": 3, "p99": 30000, "max": 30000}
    assert f["late_over_1ms"] == 10
    assert f["b_to_a"]["lateness_us"] == {"p50": None, "p99": None, "max": None}
    assert f["b_to_a"]["late_over_1ms"] == 0
    assert f["seconds"] == pytest.approx(3.5)
    assert f["generations"] == [1, 2]
    assert f["queue_drops"] is None


def test_interval_without_frames_has_no_lateness():
    s1 = _snap(1, _dir(4, [[1, 4]]), _dir(0, []))
    s2 = _snap(2, _dir(4, [[1, 4]]), _dir(0, []))
    f = delay.interval_figures(s1, s2)
    assert f["frames"] == 0 and f["drops"] == 0
    assert f["lateness_us"] == {"p50": None, "p99": None, "max": None}
    assert f["late_over_1ms"] == 0


def test_exactly_one_millisecond_late_counts_as_late():
    s1 = _snap(1, _dir(0, []), _dir(0, []))
    s2 = _snap(2, _dir(3, [[999, 1], [1000, 1], [1001, 1]]), _dir(0, []))
    assert delay.interval_figures(s1, s2)["late_over_1ms"] == 2


def test_first_snapshot_can_be_compared_with_an_empty_start():
    empty = _snap(1, _dir(0, []), _dir(0, []))
    later = _snap(2, _dir(50, [[12, 50]]), _dir(0, []))
    assert delay.interval_figures(empty, later)["lateness_us"]["max"] == 12


def test_queue_drops_are_reported_apart_from_the_elements_drops():
    q0 = {"dropped": 5}
    q1 = {"dropped": 12}
    s1 = _snap(1, _dir(0, [], queue=q0), _dir(0, [], queue=None))
    s2 = _snap(2, _dir(9, [[1, 9]], queue=q1), _dir(0, [], queue=None))
    f = delay.interval_figures(s1, s2)
    assert f["queue_drops"] == 7 and f["drops"] == 0
    assert f["a_to_b"]["queue_drops"] == 7 and f["b_to_a"]["queue_drops"] is None


def test_snapshots_out_of_order_or_mixed_are_refused():
    s1 = _snap(1, _dir(10, [[3, 10]]), _dir(0, []))
    s2 = _snap(2, _dir(20, [[3, 20]]), _dir(0, []))
    with pytest.raises(ValueError, match="does not follow"):
        delay.interval_figures(s2, s1)
    with pytest.raises(ValueError, match="different backends"):
        delay.interval_figures(s1, {**s2, "backend": "netem"})
    # Same generation numbers but counters going down: another run's snapshot.
    bad = _snap(3, _dir(5, [[3, 5]]), _dir(0, []))
    with pytest.raises(ValueError, match="went down"):
        delay.interval_figures(s2, bad)


def test_netem_snapshots_give_frames_and_drops_but_no_lateness():
    def netem(gen, tx, drops):
        d = {"tx_frames": tx, "tx_bytes": 1500 * tx, "qdisc_drops": drops}
        return {"backend": "netem", "generation": gen, "elapsed_s": gen, "a_to_b": d,
                "b_to_a": {"tx_frames": 0, "tx_bytes": 0, "qdisc_drops": 0}, "drops": drops,
                "reorders": 0}
    f = delay.interval_figures({**netem(1, 100, 1), "core": "c1"}, {**netem(2, 350, 4), "core": "c1"})
    assert (f["frames"], f["drops"], f["reorders"]) == (250, 3, 0)
    assert f["drops_by_kind"] == {"qdisc_drops": 3}
    assert f["lateness_us"] == {"p50": None, "p99": None, "max": None}
    assert f["late_over_1ms"] is None and f["core"] == "c1"


# -- root integration ---------------------------------------------------------------------------

ONE_WAY_S = 0.010


@pytest.mark.root
def test_snapshots_around_a_probe_count_exactly_its_frames(clean_machine, tmp_path, host_watch):
    if delay.delayline_binary() is None:
        pytest.fail(f"delay line not built; {delay.BUILD_HINT}")
    from links.delayline.line_net import line_net
    with line_net() as ln:
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, ONE_WAY_S, ONE_WAY_S, 1e8, 1e8,
                      tmp_path / "delayline", ln.instance)
        try:
            before = element.snapshot()
            probe = ln.udp_probe(count=2000, burst=10, gap_us=1000)
            after = element.snapshot()
            # Snapshots do not stop the line: a third one still answers and counts on.
            again = element.snapshot()
        finally:
            final = element.stop()
    assert probe["lost"] == 0 and probe["reordered"] == 0, probe
    assert (before["generation"], after["generation"], again["generation"]) == (1, 2, 3)
    assert before["final"] is False and after["final"] is False
    f = delay.interval_figures(before, after)
    # Offloads are off and the probe is the only traffic: one frame per datagram.
    assert f["a_to_b"]["frames"] == 2000, f
    assert f["b_to_a"]["frames"] == 0, f
    assert f["drops"] == 0, f
    assert f["reorders"] == 0, (f, after["a_to_b"]["reorder_max_us"])
    lat = f["a_to_b"]["lateness_us"]
    assert lat["p50"] is not None and lat["p50"] <= lat["p99"] <= lat["max"], f
    timing_check("at most 1 % of the probe's frames released 1 ms late", host_watch.flags([f]),
                 f["late_over_1ms"] <= 20, f"{f['late_over_1ms']} of 2000 late by 1 ms or more, lateness {lat}")
    assert sum(n for _, n in after["a_to_b"]["lateness_fine_us"]) == after["a_to_b"]["tx_frames"]
    assert 0 < f["seconds"] < 30
    # The exit write is the last generation and covers everything.
    raw = delay.read_stats(element.stats_path)
    assert raw["final"] is True and raw["generation"] == 4
    assert raw["a_to_b"]["tx_frames"] >= after["a_to_b"]["tx_frames"]
    assert final["drops"] == 0


def test_snapshot_before_start_is_an_error(tmp_path):
    fake = tmp_path / "startlab-delayline"
    fake.write_text("")
    with pytest.raises(RuntimeError, match="not started"):
        delay.DelayLine(fake).snapshot()
    with pytest.raises(RuntimeError, match="not started"):
        delay.NetemDelay().snapshot()
