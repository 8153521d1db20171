"""The fidelity verdict: what counts as the emulator's fault, on made-up measurements."""
import pytest

from scenarios.emulator_check import judge, slope_bps
from links.profiles import LinkProfile

PROFILE = LinkProfile(name="p", down_mbps=20, up_mbps=10, rtt_ms=40, buffer_pkts=50)


def flood(rate_error: float = 0.0, loaded: float | None = None, saturated: bool = True, out_of_order: int = 0,
          expected: float = 70.0) -> dict:
    return {"rate_bps": 20e6 * (1 + rate_error), "rate_error": rate_error, "saturated": saturated,
            "out_of_order": out_of_order, "rtt_loaded_ms": expected if loaded is None else loaded,
            "rtt_loaded_expected_ms": expected, "queue_tolerance_ms": 2.0, "queue_sent_pkts": 100,
            "queue_dropped_pkts": 40}


def verdict(rtts=(40.1,) * 100, down=None, up=None, delay=None) -> dict:
    delay = delay if delay is not None else [{"drops": 0, "lateness_us": {"p50": 20, "p99": 300, "max": 900}}]
    return judge(PROFILE, "delayline", list(rtts), {"down": down or flood(), "up": up or flood()},
                 {"goodput_bps": 18e6, "retransmits": 3}, delay, {}, {"wall_s": 1.0})


def test_a_faithful_emulator_is_ok_and_reports_the_design_keys():
    r = verdict()
    assert r["ok"] and all(r["checks"].values())
    for key in ("profile", "delay_backend", "rtt_configured_ms", "rtt_mean_ms", "rtt_p99_ms", "rate_configured_mbps",
                "goodput_mbps", "goodput_ideal_mbps", "delay_drops", "ok"):
        assert key in r, key


@pytest.mark.parametrize("change,check", [
    ({"down": flood(rate_error=-0.05)}, "rate_down"),           # the shaper 5 % slow
    ({"up": flood(rate_error=0.012)}, "rate_up"),               # 1.2 % fast
    ({"rtts": (42.0,) * 100}, "rtt"),                           # the delay 5 % long
    ({"down": flood(loaded=75.0)}, "queue_down"),               # the buffer ~7 % too deep
    ({"up": flood(saturated=False)}, "queue_up"),               # could not fill it: no verdict
    ({"delay": [{"drops": 3, "lateness_us": {"p99": 100}}]}, "delay_drops"),
    ({"delay": [{"drops": 0, "lateness_us": {"p99": 1500}}]}, "delay_lateness"),
    ({"down": flood(out_of_order=2)}, "reordering"),
])
def test_each_fault_of_the_emulator_fails_its_own_check(change, check):
    r = verdict(**change)
    assert not r["ok"]
    failed = {k for k, v in r["checks"].items() if not v}
    # a stream that could not fill the queue leaves the rate of that direction unjudged too
    assert failed == ({check, "rate_up"} if check == "queue_up" else {check})


def test_tcp_goodput_is_information_only():
    r = judge(PROFILE, "delayline", [40.1] * 100, {"down": flood(), "up": flood()},
              {"goodput_bps": 0.5e6, "retransmits": 900, "omitted_s": 2.0, "per_second_mbps": [0.1, 0.5, 0.4]},
              [{"drops": 0, "lateness_us": {}}], {}, {})
    assert r["ok"] and r["goodput_fraction"] < 0.1
    # Every second's rate is kept, the omitted ones first, so a reader sees the ramp and the stalls.
    assert r["goodput_per_second_mbps"] == [0.1, 0.5, 0.4] and r["goodput_omitted_s"] == 2.0


def test_rate_is_a_least_squares_slope():
    # 50 Mbit/s with frame-sized steps and uneven reading times
    readings = [(0.1 * i + (0.003 if i % 3 else 0), int(50e6 / 8 * 0.1 * i) // 1514 * 1514) for i in range(40)]
    assert slope_bps(readings) == pytest.approx(50e6, rel=0.005)


def test_flow_checks_compare_kernel_and_wire_with_the_declaration():
    from analysis.flow_checks import flow_checks, problems
    meta = {"flows": [
        {"name": "short", "declared_cc": ["cubic"], "declared_iw": 10, "observed_cc": ["cubic"]},
        {"name": "long", "declared_cc": ["blitz"], "declared_iw": None, "observed_cc": ["stl3f_blitz"]},
        {"name": "web", "declared_cc": ["reno"], "declared_iw": 3, "observed_cc": ["reno", "bbr"]},
        {"name": "quiet", "declared_cc": ["cubic"], "declared_iw": 10, "observed_cc": []},
    ]}
    ff = lambda seg, total: {"segments": seg, "total_segments": total, "bytes": seg * 1448}  # noqa: E731
    metrics = {"flows": {"short": {"first_flight": ff(10, 200)}, "long": {"first_flight": ff(55, 1000)},
                         "web": {"first_flights": [ff(3, 50), ff(2, 2), ff(4, 9)]}}}
    checks = {c["flow"]: c for c in flow_checks(meta, metrics)}
    assert checks["short"]["cc_ok"] and checks["short"]["iw_ok"]
    assert checks["long"]["cc_ok"] and "iw_ok" not in checks["long"]        # scheme-sized flight: recorded only
    assert not checks["web"]["cc_ok"] and checks["web"]["iw_wrong"] == 1     # bbr seen; one flight of 4 for IW3
    assert not checks["quiet"]["cc_ok"]                                     # never seen: not verified, not ok
    text = "\n".join(problems(list(checks.values())))
    assert "flow web: congestion control reno, bbr in the kernel, declared reno" in text
    assert "flow web: first flight 4 segments on the wire, declared initial window gives 3 (1 of 3 connections)" in text
    assert "flow quiet: congestion control no connection seen" in text and "short" not in text


def test_flights_a_loss_disturbed_are_counted_not_checked():
    from analysis.flow_checks import flow_checks, problems
    meta = {"flows": [{"name": "down", "declared_cc": ["reno"], "declared_iw": 3, "observed_cc": ["reno"]}]}
    ff = lambda seg, why="": {"segments": seg, "total_segments": 200, "bytes": seg * 1448,  # noqa: E731
                              **({"disturbed": why} if why else {})}
    flights = [ff(3), ff(3), ff(4, "probe timeout before the first ACK"), ff(1, "handshake retransmitted")]
    [check] = flow_checks(meta, {"flows": {"down": {"first_flights": flights}}})
    assert check["iw_ok"] and check["connections"] == 2 and check["iw_unchecked"] == 2
    assert not problems([check])
    # A flight of 4 that nothing disturbed is still wrong.
    [check] = flow_checks(meta, {"flows": {"down": {"first_flights": flights + [ff(4)]}}})
    assert not check["iw_ok"] and check["iw_wrong"] == 1


def test_a_witness_that_fails_outright_is_a_verdict_not_a_traceback(monkeypatch, capsys):
    """`fidelity --json` on a host where a witness dies (pings unanswered, a stream that
    ended early) prints a not-ok verdict with the reason and exits 1."""
    import json as _json

    import scenarios.emulator_check
    from cli.main import main

    def dies(*args, **kwargs):
        raise RuntimeError("only 12 of 100 pings were answered")
    monkeypatch.setattr(scenarios.emulator_check, "measure", dies)
    monkeypatch.setattr("machine.capabilities.require_root", lambda: None)
    assert main(["fidelity", "dsl-fast", "--json"]) == 1
    out = _json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "12 of 100 pings" in out["explanation"] and out["profile"] == "dsl-fast"


def test_the_base_rtt_expects_a_lone_pings_time_in_the_queues():
    # 1.05 ms of wire time in the delay line's queues of a T1 both ways: beyond the 0.5 ms
    # tolerance of a 40 ms RTT, so the verdict turns on counting it (and only where it is).
    rtts = [41.1] * 100
    args = ({"down": flood(), "up": flood()}, None, [{"drops": 0, "lateness_us": {}}], {}, {})
    assert not judge(PROFILE, "delayline", rtts, *args)["checks"]["rtt"]
    r = judge(PROFILE, "delayline", rtts, *args, queued_ms=1.05)
    assert r["checks"]["rtt"] and r["rtt_expected_ms"] == 41.05


def test_only_a_queue_that_emulates_wire_time_holds_a_lone_frame():
    from links.shapers import Queue
    from links.shapers.delayline import DelayLineQueue
    from links.shapers.htb import Htb
    from links.shapers.tbf import Tbf
    q = Queue(node="c", intf="i", direction="up", hop=1, settings={"rate_bps": 1.5e6})
    assert DelayLineQueue().lone_frame_delay_s(q, 98) == pytest.approx(98 * 8 / 1.5e6)
    # a token bucket with a frame's tokens sends a lone frame at once
    assert Tbf().lone_frame_delay_s(q, 98) == 0 and Htb().lone_frame_delay_s(q, 98) == 0


def test_the_fixed_rate_check_refuses_trace_and_lossy_links_with_the_reason():
    """A fixed rate's checks would misjudge them: refused before anything is built."""
    from links.profiles import get_profile
    from machine.errors import UserError
    from scenarios.emulator_check import measure
    with pytest.raises(UserError, match="for fixed-rate links: profile pantheon-india is a trace or lossy link"):
        measure(get_profile("pantheon-india"))


def test_a_trace_link_is_judged_on_its_departures_lateness_order_and_loss(capsys):
    """scenarios/trace_fidelity.py's verdict on made-up figures: every check can fail alone."""
    from links.profiles import get_profile
    from scenarios.trace_fidelity import judge_trace, print_trace_result
    good = {"trace": "t.trace", "flood_bps": 4e6, "out_of_order": 0, "backlogged_s": [1.0, 4.0],
            "departures": {"frames": 3000, "overdrawn": 0, "lateness_p50_us": 30.0, "lateness_p99_us": 90.0,
                           "windows": 30, "window_mismatch_max": 0, "window_offered_max": 40},
            "random_drops": 0, "arrivals": 4500, "loss": 0.0}
    profile = get_profile("pantheon-mexico-cellular")
    ok = judge_trace(profile, {"down": good, "up": good}, [{"drops": 0}])
    assert ok["ok"] and set(ok["checks"]) == {"opportunities_down", "per_interval_down", "lateness_down",
                                              "reordering_down", "opportunities_up", "per_interval_up",
                                              "lateness_up", "reordering_up", "delay_drops"}
    print_trace_result(ok)
    assert "beyond the opportunities  ok" in capsys.readouterr().out
    for change, check in ((("departures", "overdrawn", 2), "opportunities_down"),
                          (("departures", "window_mismatch_max", 3), "per_interval_down"),
                          (("departures", "lateness_p99_us", 2500.0), "lateness_down"),
                          ((None, "out_of_order", 1), "reordering_down")):
        block, key, value = change
        bad = {**good, "departures": dict(good["departures"])}
        (bad[block] if block else bad)[key] = value
        verdict = judge_trace(profile, {"down": bad, "up": good}, [{"drops": 0}])
        assert not verdict["ok"] and [k for k, v in verdict["checks"].items() if not v] == [check]
    # Random loss: 0.0477 of 10,000 arrivals is 477 ± 4 × 21; 300 is not.
    lossy = {**good, "loss": 0.0477, "arrivals": 10_000}
    assert judge_trace(profile, {"down": {**lossy, "random_drops": 470}}, [])["checks"]["loss_down"]
    assert not judge_trace(profile, {"down": {**lossy, "random_drops": 300}}, [])["checks"]["loss_down"]
