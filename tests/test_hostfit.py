"""Host calibration and what it decides: the arithmetic (unit) and both outcomes on a real
host (root): a host made unfit on purpose is refused before any network, or, when asked,
runs with every run flagged; the calibration's prediction is compared with fidelity."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from machine.host import HostTiming, quantiles
from links import hostfit
from links.profiles import LinkProfile

from timing import timing_check

ROOT = Path(__file__).resolve().parent.parent


def timing(hist: list, steal: float = 0.0) -> HostTiming:
    figures = quantiles(hist)
    figures["max"] = max(us for us, _ in hist)
    return HostTiming(timer_wakeup_us=figures, steal_fraction=steal, cpus=2, seconds=10, samples=sum(n for _, n in hist),
                      interval_us=500, rt_priority=10, loaded=True, histogram=hist)


QUIET = timing([[40, 9000], [60, 950], [150, 45], [300, 5]])                   # the machine it was built on
STALLS = timing([[50, 9000], [120, 800], [900, 180], [4000, 15], [12000, 5]])   # late wake-ups and 12 ms stalls
PROFILE = LinkProfile(name="dsl-fast", down_mbps=50, up_mbps=50, rtt_ms=50, buffer_pkts=208)


def test_quantiles_follow_the_nearest_rank_rule():
    assert quantiles([[1, 98], [5, 1], [900, 1]]) == {"p50": 1, "p99": 5, "p999": 900}
    assert quantiles([]) == {"p50": None, "p99": None, "p999": None}


def test_the_spin_window_follows_the_measured_p99_and_fixed_keeps_the_old_constants():
    assert hostfit.tuning_for(None) == hostfit.FIXED
    assert (hostfit.FIXED.spin_lead_us, hostfit.FIXED.spin_max_us) == (80, 100)
    quiet = hostfit.tuning_for(QUIET)
    assert quiet.source == "measured" and quiet.spin_lead_us == 60 + hostfit.SPIN_MARGIN_US
    assert quiet.spin_max_us == quiet.spin_lead_us + hostfit.SPIN_SLACK_US
    assert hostfit.tuning_for(STALLS).spin_lead_us == 900 + hostfit.SPIN_MARGIN_US
    assert quiet.delayline_flags() == ["--spin-lead-us", "70", "--spin-max-us", "90"]


def test_tbf_rate_loss_is_the_mean_excess_over_the_bucket_per_frame_time():
    # One wake-up in 100 is 1 ms late; a bucket absorbing 0.5 ms loses 0.5 ms per 100 frames
    # of 0.25 ms: 2 % of the rate.
    hist = [[0, 99], [1000, 1]]
    assert hostfit.tbf_rate_loss(hist, 250e-6, 500e-6) == pytest.approx(0.02)
    assert hostfit.tbf_rate_loss(hist, 250e-6, 1000e-6) == 0.0
    assert hostfit.tbf_rate_loss([], 250e-6, 0.0) == 0.0


def test_the_tbf_bucket_grows_with_the_stalls_a_host_shows():
    quiet = hostfit.tbf_bucket_frames(QUIET, PROFILE, "down")
    stalls = hostfit.tbf_bucket_frames(STALLS, PROFILE, "down")
    assert quiet == 3                           # the minimum: nothing to absorb
    assert stalls > quiet
    stall_s = hostfit.tbf_stall_s(STALLS, PROFILE, "down")
    frame_s = PROFILE.frame_bytes * 8 / PROFILE.rate_bps("down")
    assert hostfit.tbf_rate_loss(STALLS.histogram, frame_s, stall_s) <= hostfit.TBF_RATE_LOSS
    assert hostfit.tbf_rate_loss(STALLS.histogram, frame_s, stall_s - frame_s) > hostfit.TBF_RATE_LOSS
    # Unmeasured: the fixed 500 µs bucket of old.
    assert hostfit.FIXED.tbf_burst_bytes(PROFILE, "down") == PROFILE.tbf_burst_bytes("down") == 3 * 1514


def test_verdicts_name_the_host_property():
    assert hostfit.verdict(PROFILE, QUIET).ok
    v = hostfit.verdict(PROFILE, STALLS)
    assert not v.ok and "timer wake-ups p99 900 µs" in v.reason
    assert hostfit.verdict(PROFILE, timing([[40, 9000], [700, 200]], steal=0.25)).reason.endswith("steal 25 %")


def test_run_flags_split_delay_from_rate():
    late = [{"lateness_us": {"p99": 1500}}]
    assert hostfit.delay_flags(QUIET, [{"lateness_us": {"p99": 200}}]) == []
    flags = hostfit.delay_flags(QUIET, late)
    assert len(flags) == 1 and flags[0].startswith("delay lateness p99 1.50 ms")
    assert hostfit.delay_flags(STALLS, None)[0].startswith("host timer wake-ups p99 900 µs")
    tbf = [{"direction": "down", "rate_bps": 50e6, "burst_bytes": 3 * 1514, "frame_bytes": 1514}]
    assert hostfit.rate_flags(QUIET, tbf) == []
    assert "would lose" in hostfit.rate_flags(STALLS, tbf)[0]
    assert hostfit.run_flags(STALLS, late, tbf) == hostfit.delay_flags(STALLS, late) + hostfit.rate_flags(STALLS, tbf)


def test_lateness_is_put_on_the_host_only_where_something_measured_it_late():
    """A frame late by the line's own work (beyond how late its wait ended) is the emulator's
    fault, and the tests fail on that flag; frames late because the line's waits ended late
    (its timer, a stall while spinning) are the host's, as the monitor's late wake-ups are."""
    own_work = {"lateness_us": {"p99": 1500}, "own_lateness_us": {"p99": 1400}, "wakeup_us": {"p99": 90},
                "spin_stall_max_us": 40.0, "send_call_max_us": 1300.0}
    flag = hostfit.delay_flags(QUIET, [own_work])[0]
    assert flag.endswith(hostfit.LINE_ITSELF_LATE) and "own work p99 1400 µs" in flag and "longest send 1.3 ms" in flag
    # Kept off its CPU while working (preempted, stolen): the line leaves that out of its own
    # work, and the flag says how long, so a reader sees where the lateness went.
    kept_off = dict(own_work, own_lateness_us={"p99": 80}, off_cpu_max_us=7300.0)
    kept_off_flag = hostfit.delay_flags(QUIET, [kept_off])[0]
    assert (hostfit.LINE_ITSELF_LATE not in kept_off_flag
            and "longest off its CPU while working 7.3 ms" in kept_off_flag)
    woke_late = dict(own_work, own_lateness_us={"p99": 120}, wakeup_us={"p99": 2100})
    assert "host woke or kept the line late" in hostfit.delay_flags(QUIET, [woke_late])[0]
    # Own work late on a CPU whose wake-ups were late too (the line's p99 above 500 µs): the
    # calibration would call that CPU unfit, so it is the host's.
    busy_cpu = dict(own_work, wakeup_us={"p99": 633})
    assert "host woke or kept the line late" in hostfit.delay_flags(QUIET, [busy_cpu])[0]
    # A line that does not split its lateness (an older build): judged by the monitor alone.
    unsplit = {"lateness_us": {"p99": 1500}}
    assert hostfit.delay_flags(QUIET, [unsplit])[0].endswith(hostfit.LINE_ITSELF_LATE)
    assert hostfit.LINE_ITSELF_LATE not in hostfit.delay_flags(STALLS, [unsplit])[-1]
    with pytest.raises(AssertionError, match="emulator was late on a punctual host"):
        timing_check("a release", [flag], True)


# -- root: a host made unfit on purpose ---------------------------------------------------

HOG = (3000, 10000)        # SCHED_FIFO above the emulator, busy 3 ms of every 10 on each CPU


def test_a_mean_pulled_off_by_a_stall_is_the_hosts_and_a_shifted_path_is_not():
    """One or two pings a host stall held up pull a mean of ten off; the other pings are as
    declared and the monitor measured a stall as long: the host's. Every ping late (a path
    whose delay is off), or a tail longer than the stall measured, or a host without a stall:
    not explained (then the delay line is suspect)."""
    from hosts.ping import ping_tail_flags, rtt_figures
    expected = 97.596
    pings = [97.9, 98.0, 97.9, 109.3, 98.1, 97.9, 98.0, 98.0, 97.9, 98.0]
    tail = rtt_figures(pings, expected)
    assert tail["rtt_late"]["late"] == 1 and abs(tail["rtt_late"]["late_max_ms"] - 11.704) < 1e-6
    [flag] = ping_tail_flags(tail, STALLS)                   # 12 ms stalls measured
    assert flag.startswith("1 of 10 pings late by up to 11.7 ms") and "a host stall" in flag, flag
    assert ping_tail_flags(tail, QUIET) == []                 # no stall that long
    longer = rtt_figures(pings[:3] + [115.3] + pings[4:], expected)  # later than any stall measured
    assert ping_tail_flags(longer, STALLS) == []
    assert ping_tail_flags(tail, None) == []
    shifted = rtt_figures([expected + 1.5 + 0.1 * (i % 3) for i in range(10)], expected)
    assert shifted["rtt_late"]["late"] == 10 and ping_tail_flags(shifted, STALLS) == []
    many = rtt_figures([98.0] * 7 + [105.0] * 3, expected)           # three of ten: more than a stall holds
    assert ping_tail_flags(many, STALLS) == []
    # The others' mean comes from ping's exact mean where given (printed samples are truncated).
    exact = rtt_figures([20.1] * 99 + [35.0], 20.0, {"min": 20.1, "avg": 20.29, "max": 35.0})
    assert exact["rtt_late"]["rest_mean_ms"] == pytest.approx((20.29 * 100 - 35.0) / 99, abs=1e-3)


def hog(seconds: float) -> subprocess.Popen:
    """An unfit host made on purpose: the probe binary's hog threads for `seconds`."""
    from machine import binaries
    return subprocess.Popen([str(binaries.delayline()), "probe", "--seconds", str(seconds), "--interval-us", "1000",
                             "--hog", f"{HOG[0]},{HOG[1]}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_py(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=timeout)


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_a_cluster_node_is_calibrated_once_per_job_then_adopted_while_fresh(tmp_path, monkeypatch):
    """check_node: the job's first task on a node measures, the next adopt those figures
    (judged again: an unfit host is still refused), and a calibration past NODE_REUSE_S is
    measured again. The measurement is stubbed: only the sharing is under test here."""
    from datetime import datetime, timedelta, timezone

    from machine import host
    from machine.errors import HostUnfit
    from scenarios import hostcheck
    measured = []
    monkeypatch.setattr(host, "calibrate", lambda: measured.append(1) or QUIET)
    kept = tmp_path / "slurm" / "host-7-node1.json"
    first = hostcheck.check_node([PROFILE], False, kept)
    second = hostcheck.check_node([PROFILE], False, kept)
    assert len(measured) == 1 and "adopted" not in first and second["adopted"] == kept.name
    assert second["calibration"] == first["calibration"] and second["calibrated"] == first["calibrated"]
    assert hostcheck.run_record(second, "dsl-fast")["adopted"] == kept.name
    old = json.loads(kept.read_text())
    old["calibrated"] = (datetime.now(timezone.utc) - timedelta(seconds=hostcheck.NODE_REUSE_S + 1)).isoformat()
    kept.write_text(json.dumps(old))
    assert "adopted" not in hostcheck.check_node([PROFILE], False, kept) and len(measured) == 2
    kept.write_text(json.dumps({**old, "calibrated": datetime.now(timezone.utc).isoformat(),
                                "calibration": STALLS.as_record()}))
    with pytest.raises(HostUnfit):
        hostcheck.check_node([PROFILE], False, kept)


def test_a_campaign_on_an_unfit_host_is_refused_before_any_network_then_runs_flagged_when_asked(tmp_path):
    out = tmp_path / "campaign"
    h = hog(20)
    try:
        time.sleep(0.5)
        refused = run_py("run", "smoke", "--reps", "1", "--variants", "cubic-iw10", "--out", str(out))
    finally:
        h.wait(timeout=60)
    assert refused.returncode == 4, refused.stderr[-1500:]
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "cannot emulate dsl-fast" in lines[0] and "timer wake-ups p99" in lines[0] and "--unfit-host" in lines[0]
    assert not out.exists(), "nothing is written for a refused campaign"
    h = hog(60)
    try:
        time.sleep(0.5)
        forced = run_py("run", "smoke", "--reps", "1", "--variants", "cubic-iw10", "--out", str(out), "--unfit-host")
    finally:
        h.terminate()
        h.wait(timeout=30)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert "every run is flagged" in forced.stderr
    host = json.loads((out / "host.json").read_text())
    assert host["forced"] and host["unfit_profiles"]
    metas = [json.loads(p.read_text()) for p in out.glob("*/meta.json")]
    assert metas, "the forced campaign finished its run"
    from analysis.flow_checks import emulator_flags
    report = (out / "report.html").read_text()
    for meta in metas:
        flags = emulator_flags(meta)
        assert any(f.startswith("run on a host the calibration found unfit") for f in flags), flags
        assert meta["host_check"]["calibration"]["timer_wakeup_us"]["p99"] > hostfit.HOST_WAKEUP_P99_US
        assert meta["host_check"]["monitor"]["samples"] > 0
        assert meta["run_id"] in report
    assert "Runs the emulator flagged" in report


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_fidelity_on_an_unfit_host_names_the_host_property(tmp_path):
    from scenarios.emulator_check import measure
    from links.profiles import get_profile
    result = measure(get_profile("js-dumbbell"), pings=100, tcp=False, monitor_hog=HOG, workdir=tmp_path)
    flags = result["host"]["flags"]
    assert flags and any("timer wake-ups p99" in f for f in flags), flags
    assert result["host"]["monitor"]["timer_wakeup_us"]["p99"] > hostfit.HOST_WAKEUP_P99_US
    if not result["ok"]:
        assert "host timer wake-ups" in result["explanation"], result["explanation"]
    print(result["explanation"] or "ok despite the hog", flags)


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_doctor_reports_the_host_and_a_verdict_for_every_profile():
    from links.profiles import load_profiles
    res = run_py("doctor", "--json", timeout=120)
    assert res.returncode in (0, 1), res.stderr[-1500:]
    host = json.loads(res.stdout)["host"]
    assert set(host["timer_wakeup_us"]) >= {"p50", "p99", "p999", "max"}
    assert host["timer_wakeup_us"]["p50"] <= host["timer_wakeup_us"]["p99"] <= host["timer_wakeup_us"]["p999"]
    assert host["steal_fraction"] is None or 0 <= host["steal_fraction"] <= 1
    assert set(host["profiles"]) == set(load_profiles())
    for name, v in host["profiles"].items():
        assert isinstance(v["ok"], bool) and (v["ok"] or v["reason"]), (name, v)
    assert host["tuning"]["spin_lead_us"] <= host["tuning"]["spin_max_us"]


def test_tail_figures_are_flagged_by_the_wakeups_p999():
    spiky = timing([[40, 9980], [3000, 20]])               # p99 40 µs, p99.9 3 ms
    assert hostfit.delay_flags(spiky, None) == []
    assert "p99.9 3000 µs" in hostfit.delay_flags(spiky, None, tail=True)[0]
    assert hostfit.delay_flags(QUIET, None, tail=True) == []
