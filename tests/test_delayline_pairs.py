"""Per-pair delays in the delay line: the table file (unit) and two pairs with their own
delays through a real line at once (root)."""
from __future__ import annotations

import pytest

from timing import timing_check
from links import delay


# -- unit ----------------------------------------------------------------------------------

def test_pair_table_text_is_sorted_whole_microseconds():
    text = delay.pair_delay_text({("10.0.0.2", "10.0.0.1"): 0.1, ("10.0.0.1", "10.0.0.2"): 0.0050004})
    assert text == "10.0.0.1 10.0.0.2 5000\n10.0.0.2 10.0.0.1 100000\n"
    assert delay.pair_delay_text({}) == ""


@pytest.mark.parametrize("table, message", [
    ({("10.0.0.1", "fe80::1"): 0.01}, "not an IPv4 address"),
    ({("10.0.0.1", "10.0.0.300"): 0.01}, "not an IPv4 address"),
    ({("10.0.0.1", "10.0.0.2"): -0.001}, "0..10 s"),
    ({("10.0.0.1", "10.0.0.2"): 11}, "0..10 s"),
])
def test_pair_table_refuses_bad_entries(table, message):
    with pytest.raises(ValueError, match=message):
        delay.pair_delay_text(table)


def test_ring_is_sized_for_the_longest_delay_of_the_direction():
    assert delay.longest_delay(0.02, None) == 0.02
    assert delay.longest_delay(0.02, {("1.1.1.1", "2.2.2.2"): 0.3, ("2.2.2.2", "1.1.1.1"): 0.001}) == 0.3
    assert delay.longest_delay(0.02, {("1.1.1.1", "2.2.2.2"): 0.005}) == 0.02


def test_line_command_names_the_pair_files(tmp_path):
    line = delay.DelayLine(tmp_path / "startlab-delayline")
    cmd = line.command("a", "b", 0.01, 0.01, 1000, 1000, tmp_path / "s.json", pairs_ab=tmp_path / "p.txt")
    assert cmd[-2:] == ["--pairs-ab", str(tmp_path / "p.txt")]
    assert "--pairs-ba" not in cmd


# -- root integration ---------------------------------------------------------------------------

DEFAULT_S = 0.020
NEAR_S, FAR_S = 0.005, 0.100
FAR_H1, FAR_H2 = "10.77.0.11", "10.77.0.12"
TOLERANCE_US = 300


@pytest.mark.root
def test_each_pair_gets_its_own_delay_without_waiting_behind_another(clean_machine, tmp_path, host_watch):
    if delay.delayline_binary() is None:
        pytest.fail(f"delay line not built; {delay.BUILD_HINT}")
    from links.delayline.line_net import H1_IP, H2_IP, line_net
    with line_net() as ln:
        ln.add_pair(FAR_H1, FAR_H2)
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, DEFAULT_S, DEFAULT_S, 1e8, 1e8,
                      tmp_path / "delayline", ln.instance,
                      pair_delays_ab={(H1_IP, H2_IP): NEAR_S, (FAR_H1, FAR_H2): FAR_S})
        try:
            # Three streams at once, interleaved in the line: the 5 ms pair, the 100 ms
            # pair, and a pair not in the table (default delay).
            flows = {"near": (H1_IP, H2_IP, NEAR_S, 5621), "far": (FAR_H1, FAR_H2, FAR_S, 5622),
                     "default": (H1_IP, FAR_H2, DEFAULT_S, 5623)}
            probes = {name: ln.start_probe(1500, 5, 5000, port, src=src, dst=dst)
                      for name, (src, dst, _, port) in flows.items()}
            results = {name: p.finish() for name, p in probes.items()}
            stats = element.snapshot()
        finally:
            final = element.stop()
    flags = host_watch.flags([final])
    for name, (_, _, want_s, _) in flows.items():
        r, want_us = results[name], want_s * 1e6
        owd = r["owd_us"]
        print(f"{name}: configured {want_us:.0f} us, mean {owd['mean']:.1f} (error {owd['mean'] - want_us:+.1f}), "
              f"min {owd['min']:.1f}, p99 {owd['p99']:.1f}, max {owd['max']:.1f}")
        assert r["lost"] == 0 and r["reordered"] == 0 and r["duplicates"] == 0, (name, r)
        assert owd["min"] >= want_us, (name, owd)                      # never early, whatever the host
        timing_check(f"{name} pair's one-way delay mean within {TOLERANCE_US} us", flags,
                     abs(owd["mean"] - want_us) <= TOLERANCE_US, f"{owd} for {want_us:.0f} us configured")
    # Frames of the 5 ms pair never queued behind the 100 ms pair's.
    timing_check("near pair's p99 within 1 ms of its delay", host_watch.flags([final], tail=True),
                 results["near"]["owd_us"]["p99"] < NEAR_S * 1e6 + 1000, f"{results['near']['owd_us']}")
    cfg = stats["a_to_b_config"]
    assert cfg["pair_delays"] == 2 and cfg["fifo_delays_us"] == [20000, 5000, 100000], cfg
    ab = stats["a_to_b"]
    assert stats["drops"] == 0, {k: ab[k] for k in delay.DROP_KINDS if k in ab}
    assert stats["reorders"] == 0, (ab["reorders_seen"], ab["reorder_max_us"])
