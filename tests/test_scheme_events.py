"""A scheme's logged decisions on the captures' time axis (analysis.scheme_events): the
run's clock pair maps BPF's monotonic times onto the wall clock, a QUIC server's phases are
read on the wall clock from the measured connection's metrics, only the measured window
counts, and per-round bookkeeping is left out."""
from __future__ import annotations

from analysis.scheme_events import connection_events, label

MONO, WALL = 1000.0, 1_700_000_000.0           # the clock pair read together


def ns(wall_s: float) -> int:
    """The monotonic nanoseconds of a wall-clock moment."""
    return round((wall_s - WALL + MONO) * 1e9)


def meta(*events: dict) -> dict:
    return {"clock": {"monotonic_s": MONO, "realtime_s": WALL},
            "server_counters": {"sv1": {"cc_set": 2, "careful_resume": [
                {"local": "10.2.0.1:80", "remote": "10.1.0.1:40000", "events": list(events)}]}}}


def test_events_fall_on_the_capture_clock_within_the_window():
    syn = WALL - 5.0
    m = meta({"t_ns": ns(syn - 1.0), "new": "reconnaissance"},            # an earlier connection's
             {"t_ns": ns(syn + 0.05), "new": "unvalidated"},
             {"t_ns": ns(syn + 0.25), "new": "safe_retreat"},
             {"t_ns": ns(syn + 9.0), "new": "normal"})                    # after the flow ended
    got = connection_events(m, {}, syn, syn + 2.0)
    assert [text for _, text in got] == ["unvalidated", "safe retreat"]
    assert abs(got[0][0] - 0.05) < 1e-6 and abs(got[1][0] - 0.25) < 1e-6


def test_bookkeeping_is_left_out_and_decisions_are_named():
    assert label({"event": "round", "round": 3}) is None and label({"event": "check"}) is None
    assert label({"event": "tail", "growth": 4}) == "4x" and label({"event": "tail", "growth": 0}) == "SUSS off"
    assert label({"event": "exit", "why": "cap"}) == "exit (cap)" and label({"event": "loss"}) == "loss"
    assert label({"new": "congestion_avoidance"}) == "congestion avoidance"


def test_a_run_without_a_clock_or_logs_has_no_events():
    assert connection_events({"server_counters": {"sv1": {"cc_set": 1}}}, {}, 0.0, 1e12) == []
    assert connection_events({"clock": {"monotonic_s": 1.0, "realtime_s": 2.0}, "server_counters": {}}, {},
                             0.0, 1e12) == []


def test_quic_phases_come_from_the_measured_connection_on_the_wall_clock():
    syn = WALL + 3.0
    metrics = {"short": {"endpoint": {"careful_resume": {"unit": "bytes", "events": [
        {"t_unix_s": syn + 0.6, "old": "observing", "new": "reconnaissance"},
        {"t_unix_s": syn + 0.9, "old": "reconnaissance", "new": "unvalidated"},
        {"t_unix_s": syn + 1.2, "old": "unvalidated", "new": "safe_retreat"}]}}}}
    # No clock and no BPF logs: a QUIC run's server parts log nothing of their own.
    got = connection_events({"server_counters": {}}, metrics, syn, syn + 1.0)
    assert [text for _, text in got] == ["reconnaissance", "unvalidated"]
    assert abs(got[1][0] - 0.9) < 1e-6
    assert connection_events({}, {"short": {"endpoint": {"careful_resume": None}}}, 0.0, 1e12) == []
