"""Delivery-opportunity traces (links/traces.py): mahimahi's format and the seeded models."""
from __future__ import annotations

import numpy as np
import pytest

from links import traces
from machine.errors import UserError

PACKET_BITS = 1500 * 8


def test_reads_mahimahi_format_and_names_the_bad_line(tmp_path):
    t = traces.parse("1\n1\n3\n\n7\n")
    assert t.opportunities_ms == (1, 1, 3, 7) and t.period_ms == 7
    assert t.mean_bps() == pytest.approx(4 * PACKET_BITS / 0.007)
    assert traces.parse(t.text()) == t
    for text, why in (("1\nx\n", "line 2: 'x' is not a whole number"), ("5\n3\n", "line 2: 3 ms comes before"),
                      ("-1\n2\n", "line 1: '-1' is not a whole number"), ("", "no delivery opportunity"),
                      ("0\n0\n", "no period")):
        with pytest.raises(UserError, match=why):
            traces.parse(text, "t.trace")
    with pytest.raises(UserError, match="cannot read the trace"):
        traces.read(tmp_path / "missing.trace")


def test_a_constant_trace_offers_its_rate_in_every_millisecond_window():
    t = traces.constant(48e6, 1.0)                       # 4 packets per ms exactly
    assert t.period_ms == 1000 and len(t.opportunities_ms) == 4000
    assert set(np.bincount(t.opportunities_ms)[1:]) == {4}
    odd = traces.constant(10e6, 1.2)                     # 0.8333 packets per ms
    assert len(odd.opportunities_ms) == 1000 and odd.period_ms == 1200
    # Never more than one packet apart from the exact rate at any ms.
    due = np.arange(1, 1201) * 10e6 / PACKET_BITS / 1e3
    have = np.searchsorted(odd.opportunities_ms, np.arange(1, 1201), side="right")
    assert np.max(np.abs(have - due)) <= 1


def test_poisson_traces_are_seeded_and_have_their_rate():
    a, b = traces.poisson(12e6, 20.0, seed=7), traces.poisson(12e6, 20.0, seed=7)
    assert a == b and a != traces.poisson(12e6, 20.0, seed=8)
    # 1000 packets/s for 20 s: 20,000 ± 3 standard deviations (√20000 ≈ 141).
    assert abs(len(a.opportunities_ms) - 20_000) < 3 * 141
    # Exponential gaps: at one packet per ms, the next one falls in the same ms with
    # probability ∫₀¹ (1 − e^−(1−u)) du = 1/e.
    same_ms = np.mean(np.diff(a.opportunities_ms) == 0)
    assert abs(same_ms - 1 / np.e) < 0.02, same_ms


def test_an_onoff_trace_has_silences_and_its_on_rate():
    t = traces.onoff(24e6, mean_on_s=0.5, mean_off_s=0.5, duration_s=60.0, seed=3)
    windows = t.rates_bps(100)
    off = np.mean(windows == 0)
    assert 0.3 < off < 0.6, off                 # about half the time off (in 100 ms windows)
    on = windows[windows > 0]
    assert np.median(on) == pytest.approx(24e6, rel=0.25)
    assert traces.MODELS["onoff"] is traces.onoff


def test_the_catalogue_traces_are_their_models():
    """Every trace in links/traces/catalogue.yaml is its seeded model's output, loops over its
    duration and has its model's rate: exactly for a constant one, within 2 % (a 60 s
    realisation) for Poisson, between off and on for on/off (its sojourns last seconds)."""
    entries = traces.catalogue()
    assert {e.model for e in entries.values()} == set(traces.MODELS)
    for entry in entries.values():
        t = traces.read(entry.path)
        assert entry.generate() == t, entry.name
        assert t.period_ms == round(entry.params["duration_s"] * 1e3), entry.name
        if entry.model == "onoff":
            assert entry.params["rate_off_bps"] < t.mean_bps() < entry.params["rate_on_bps"], entry.name
        else:
            rel = 0 if entry.model == "constant" else 0.02
            assert t.mean_bps() == pytest.approx(entry.params["rate_bps"], rel=rel, abs=1), entry.name
        assert entry.source


def test_a_constant_catalogue_entry_regenerates_exactly(tmp_path):
    [entry] = [e for e in traces.catalogue().values() if e.name == "constant-77.72mbps"]
    assert entry.generate().text() == entry.path.read_text()


def test_departures_are_judged_against_the_opportunities():
    """A link that sent one frame per opportunity, a little late, passes; a frame that left
    before its opportunity overdraws the one before, and a window short of frames is found."""
    t = traces.onoff(24e6, mean_on_s=0.3, mean_off_s=0.1, duration_s=2.0, seed=5)
    opp = np.asarray(t.opportunities_ms) / 1e3
    left = np.concatenate([opp, opp + 2.0]) + 120e-6              # two loops, 120 µs late
    ok = traces.departures_against(t, left, backlogged=(0.1, 3.9))
    assert ok["overdrawn"] == 0 and ok["lateness_p50_us"] == pytest.approx(120, abs=1)
    assert ok["window_mismatch_max"] == 0 and ok["windows"] == 38
    # The first frame of a busy millisecond (one with an opportunity in the ms before) left
    # 0.3 ms before its opportunity, past the horizon from the first frame (before that,
    # the previous loop's opportunities were not used: the link was idle).
    ms = np.asarray(t.opportunities_ms)
    first = next(j for j in range(1, len(ms)) if ms[j] > 200 and ms[j] != ms[j - 1] and ms[j] - 1 in set(ms))
    early = left.copy()
    early[first] -= 0.0003
    assert traces.departures_against(t, early, backlogged=(0.1, 3.9))["overdrawn"] == 1
    short = traces.departures_against(t, np.delete(left, np.s_[100:110]), backlogged=(0.0, 4.0))
    assert short["window_mismatch_max"] >= 5 and short["overdrawn"] == 0


def test_frames_a_stall_held_back_read_as_late_not_early():
    """A stall of 2.4 ms releases the frames of the milliseconds it missed together: they take
    those opportunities (late by up to the stall), and none reads as early."""
    t = traces.constant(24e6, duration_s=2.0)
    opp = np.asarray(t.opportunities_ms) / 1e3
    left = opp + 50e-6
    stalled = (opp >= 1.0) & (opp < 1.003)
    left[stalled] = 1.0024
    got = traces.departures_against(t, left, backlogged=(0.1, 1.9))
    assert got["overdrawn"] == 0 and got["window_mismatch_max"] == 0
    assert got["lateness_max_us"] == pytest.approx(2400, abs=1)
    # A frame sent ahead of its opportunity, with every opportunity before it used, is early.
    early = np.sort(np.append(left, 1.5003))
    assert traces.departures_against(t, early, backlogged=(0.1, 1.9))["overdrawn"] == 1


def test_offered_bytes_loop_over_the_period_and_count_the_last_line_as_the_next_loops_first():
    t = traces.parse("2\n5\n5\n10\n")                   # period 10 ms; the 10 is the next loop's 0
    assert traces.offered_bytes(t, 0, 10, 1) == 3         # at 2, 5, 5 (the one at 10 is not before 10)
    assert traces.offered_bytes(t, 0, 10.5, 1) == 4
    assert traces.offered_bytes(t, 5, 6, 1) == 2
    assert traces.offered_bytes(t, 3, 32, 1) == 2 + 3 + 3 + 3   # 5,5 | 10,12,15,15 | ... up to 32
    assert traces.offered_bytes(t, 4, 4, 1500) == 0


def test_window_rates_take_every_start_of_the_loop():
    t = traces.parse("1\n10\n")                          # opportunities at 1 and 10 (= 0) in each 10 ms
    rates = traces.window_rates_bps(t, 5, packet_bytes=1)
    assert len(rates) == 10
    # a window from s holds the ms s..s+4 of the loop (10 is the next loop's 0)
    assert list(rates * 5e-3 / 8) == [2, 1, 0, 0, 0, 0, 1, 2, 2, 2]
    onoff = traces.onoff(40e6, 0.08, 0.02, 20.0, seed=1)
    assert np.mean(traces.window_rates_bps(onoff, 30)) == pytest.approx(onoff.mean_bps(), rel=1e-6)


def test_a_trace_clock_reads_the_trace_from_its_epoch():
    t = traces.constant(12e6, 1.0)                       # one packet per ms
    clock = traces.TraceClock(t, epoch_s=100.0, packet_bytes=1514)
    assert clock.offered_bytes(100.0, 100.5) == 499 * 1514          # at 1 … 499 ms
    assert clock.rate_bps(101.25, 101.35) == pytest.approx(100 * 1514 * 8 / 0.1)
    assert clock.rate_bps(5.0, 5.0) == 0.0
