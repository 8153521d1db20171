"""httperf replay: the session file, command lines per HTTP mode, the stamper, the parser.

The parser's inputs in tests/data/httperf/ are real httperf 0.9.0 runs against lighttpd
1.4.69 in a private namespace pair, made by `benchmarks/surge_model.py samples`: the
three modes stamped, one run unstamped with full headers, a stationary start, and one
run per failure (nobody listening, a persistent connection closed by the server while
the user thinks, a missing file, a reply longer than --timeout, a run stopped by SIGINT).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from io import BytesIO, StringIO
from pathlib import Path

import pytest

from hosts.workloads import httperf as hp
from hosts.workloads import httperf_stamp as stamp
from wire import httperf_log as hl
from hosts.workloads.surge import SURGE_DEFAULT, FileSet, Page, Session, Visit, WebFile

DATA = Path(__file__).resolve().parent / "data" / "httperf"


def tiny_file_set() -> FileSet:
    files = (WebFile("b0000.bin", 1000, "base", 0.5), WebFile("l0000.bin", 300, "loner", 0.3),
             WebFile("e0000.bin", 2000, "embedded", 0.15), WebFile("e0001.bin", 40, "embedded", 0.05))
    return FileSet(model=SURGE_DEFAULT, seed=7, files=files,
                   pages=(Page((0, 2, 3), 0.625), Page((1,), 0.375)))


# --- the session file ------------------------------------------------------------------------

def test_wsesslog_text_of_a_known_session():
    fs = tiny_file_set()
    sessions = [Session(0, (Visit(0, 3.25), Visit(1, 2.0), Visit(0, 10.1234))), Session(1, (Visit(1, 4.0),))]
    assert hp.wsesslog_text(fs, sessions) == (
        "# startlab web workload: model surge-default, seed 7, 2 users\n"
        "\n"
        "# user 0: 3 pages\n"
        "/b0000.bin?u=0&p=0&o=0 think=3.250\n"
        "\t/e0000.bin?u=0&p=0&o=1\n"
        "\t/e0001.bin?u=0&p=0&o=2\n"
        "/l0000.bin?u=0&p=1&o=0 think=2.000\n"
        "/b0000.bin?u=0&p=2&o=0 think=10.123\n"
        "\t/e0000.bin?u=0&p=2&o=1\n"
        "\t/e0001.bin?u=0&p=2&o=2\n"
        "\n"
        "# user 1: 1 pages\n"
        "/l0000.bin?u=1&p=0&o=0 think=4.000\n")
    assert hp.requests_of(fs, sessions) == 8


def test_wsesslog_untagged_and_stationary_start():
    fs = tiny_file_set()
    text = hp.wsesslog_text(fs, [Session(3, (Visit(1, 2.0),), start_offset_s=12.5)], tag_calls=False)
    assert text.splitlines()[2:] == ["# user 3: 1 pages after 12.500 s",
                                     "/l0000.bin method=HEAD think=12.500",
                                     "/l0000.bin think=2.000"]
    idle = hp.wsesslog_text(fs, [Session(4, (), start_offset_s=99.0)])
    assert idle.splitlines()[-1] == "/b0000.bin?u=4&w=1 method=HEAD think=99.000"
    assert hp.requests_of(fs, [Session(4, (), start_offset_s=99.0), Session(3, (Visit(0, 2.0),), 1.0)]) == 5


def test_wsesslog_limits(tmp_path):
    fs = tiny_file_set()
    with pytest.raises(ValueError):
        hp.wsesslog_text(fs, [Session(0, ())])
    with pytest.raises(ValueError):
        hp.wsesslog_text(fs, [Session(u, (Visit(1, 2.0),)) for u in range(1001)])
    path = hp.write_wsesslog(tmp_path / "s.log", fs, [Session(0, (Visit(1, 2.0),))])
    assert path.read_text().endswith("/l0000.bin?u=0&p=0&o=0 think=2.000\n")


# --- command lines ---------------------------------------------------------------------------

def opts(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in argv if a.startswith("--"))


@pytest.mark.parametrize("mode, version, piped", [("http10", "1.0", "1"), ("http11", "1.1", "1"),
                                                  ("http11-pipelined", "1.1", "32")])
def test_command_line_per_mode(mode, version, piped):
    argv = hp.httperf_argv("10.2.0.1", Path("/w/s.log"), 10, mode, per_call=False)
    assert argv[0] == "httperf"
    o = opts(argv)
    assert o["http-version"] == version and o["max-piped-calls"] == piped and o["max-connections"] == "1"
    assert o["wsesslog"] == "10,0,/w/s.log" and o["server"] == "10.2.0.1" and o["port"] == "80"
    assert o["period"] == "d0.700000"          # 7 s spread over 10 users
    assert o["recv-buffer"] == str(8 << 20) and "hog" in o
    assert "print-reply" not in o


def test_command_line_per_call_output_and_preload():
    plain = hp.httperf_argv("h", Path("s"), 2, "http11")
    assert plain[:3] == ["stdbuf", "-oL", "httperf"]
    assert {"print-request", "print-reply"} <= set(opts(plain))
    assert opts(plain)["print-reply"] == "header"
    shimmed = hp.httperf_argv("h", Path("s"), 2, "http11", preload=Path("/x/shim.so"), connections=4)
    assert shimmed[:3] == ["env", "LD_PRELOAD=/x/shim.so", "httperf"]
    assert opts(shimmed)["max-connections"] == "4"
    for bad in (dict(users=0), dict(users=1001), dict(connections=5), dict(users=300, connections=4)):
        kw = {"users": 1, **bad}
        with pytest.raises(ValueError):
            hp.httperf_argv("h", Path("s"), kw.pop("users"), "http11", **kw)
    with pytest.raises(ValueError):
        hp.httperf_argv("h", Path("s"), 1, "spdy")


def test_lighttpd_directives_and_timeout():
    assert hp.lighttpd_directives("http10") == ["server.max-keep-alive-requests = 0"]
    assert hp.lighttpd_directives("http11-pipelined", 1800.2) == [
        "server.max-keep-alive-requests = 30000", "server.max-keep-alive-idle = 1801"]
    assert hp.reply_timeout_s(10_000_000, 10e6) == pytest.approx(30 + 24)
    assert hp.reply_timeout_s(10_000_000, 10e6, sharing=4, slack_s=0) == pytest.approx(96)


# --- the stamper -----------------------------------------------------------------------------

def test_stamp_lines_keeps_what_the_parser_reads():
    src = BytesIO(b"SH3:GET /a?u=0&p=0&o=0 HTTP/1.1\nSH3:User-Agent: httperf/0.9.0\nSH3:Host: x\nSH3:\n"
                  b"SS3: header 67 content 0\nRH3:HTTP/1.1 200 OK\nRH3:Content-Length: 5\nRH3:\n"
                  b"RS3: header 200 content 5 footer 0\nTotal: connections 1\n")
    clock = iter(range(100, 200))
    dst = StringIO()
    assert stamp.stamp_lines(src, dst, clock=lambda: next(clock)) == 5
    assert dst.getvalue().splitlines() == [
        "100.000000 SH3:GET /a?u=0&p=0&o=0 HTTP/1.1", "104.000000 SS3: header 67 content 0",
        "105.000000 RH3:HTTP/1.1 200 OK", "108.000000 RS3: header 200 content 5 footer 0",
        "109.000000 Total: connections 1"]
    src.seek(0)
    assert stamp.stamp_lines(src, StringIO(), keep_all=True) == 10


def test_stamper_passes_a_stop_on_to_httperf(tmp_path):
    """SIGTERM to the stamper reaches the child as SIGINT, whose handler still prints."""
    child = ("import signal, sys, time\n"
             "signal.signal(signal.SIGINT, lambda *a: (print('Total: connections 0 requests 0 replies 0 "
             "test-duration 1.0 s', flush=True), sys.exit(0)))\n"
             "print('ready', flush=True)\ntime.sleep(30)\n")
    out = tmp_path / "run.out"
    stamper = subprocess.Popen([sys.executable, str(Path(stamp.__file__)), "--out", str(out), "--",
                                sys.executable, "-c", child])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (out.exists() and "ready" in out.read_text()):
        time.sleep(0.02)
    stamper.send_signal(signal.SIGTERM)
    assert stamper.wait(timeout=10) == 0
    rep = hl.parse_files(out)
    assert rep.stamped and rep.summary_printed and rep.figures["duration_s"] == 1.0


def test_a_killed_stamper_leaves_no_child(tmp_path):
    out, pidfile = tmp_path / "run.out", tmp_path / "child.pid"
    child = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    stamper = subprocess.Popen([sys.executable, str(Path(stamp.__file__)), "--out", str(out), "--",
                                sys.executable, "-c", child])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (pidfile.exists() and pidfile.read_text()):
        time.sleep(0.02)
    pid = int(pidfile.read_text())
    stamper.kill()
    stamper.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and \
            Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.02)
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_poll_shim_makes_a_zero_timeout_select_wait(tmp_path):
    lib = hp.build_poll_shim(tmp_path)
    assert hp.build_poll_shim(tmp_path) == lib
    probe = ("import select, time\nt = time.monotonic()\nfor _ in range(20): select.select([], [], [], 0)\n"
             "print(time.monotonic() - t)\n")
    plain = float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout)
    shimmed = float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                   env={**os.environ, "LD_PRELOAD": str(lib)}).stdout)
    assert plain < 0.01 and shimmed >= 0.018      # 20 selects of up to 1 ms each


# --- the parser on real httperf output -------------------------------------------------------

def sample(name: str) -> hl.HttperfReport:
    return hl.parse_files(DATA / f"{name}.out", DATA / f"{name}.err")


def sesslog_uris(name: str) -> list[str]:
    return [line.split()[0] for line in (DATA / f"{name}.wsesslog").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("mode", ["http10", "http11", "http11-pipelined"])
def test_parse_clean_runs_per_mode(mode):
    rep = sample(f"{mode}-stamped")
    uris = sesslog_uris("two-users")
    assert rep.stamped and rep.summary_printed
    assert rep.problems(users=2, expected_replies=len(uris)) == []
    assert rep.figures["replies"] == rep.figures["requests"] == len(uris) == 13
    assert rep.sessions_completed == 2 and rep.sessions_failed == 0
    assert rep.errors["total"] == 0 and rep.figures["status_2xx"] == 13
    assert sorted(c.uri for c in rep.calls.values()) == sorted(uris)
    for c in rep.calls.values():
        assert c.status == 200 and c.complete and c.sent_s <= c.first_byte_s <= c.done_s
    assert sum(c.header_bytes + c.content_bytes for c in rep.calls.values()) == \
        pytest.approx(rep.reply_bytes_total, rel=1e-3)
    loads = rep.page_loads()
    assert [(pl.user, pl.page, pl.objects) for pl in loads] == [(0, 0, 3), (0, 1, 8), (1, 0, 1), (1, 1, 1)]
    assert all(pl.complete and pl.load_time_s > 0 for pl in loads)
    assert rep.user_calls() == {0: (11, 11), 1: (2, 2)}
    # Think time 0.5 s between the end of a page and the next page's first request.
    assert loads[1].start_s - loads[0].end_s == pytest.approx(0.5, abs=0.01)
    conns = {"http10": 13, "http11": 2, "http11-pipelined": 2}[mode]
    assert rep.figures["connections"] == conns


def in_flight_max(rep: hl.HttperfReport, user: int) -> int:
    calls = [c for c in rep.calls.values() if c.tag and c.tag[0] == user]
    return max(sum(1 for o in calls if o is not c and o.sent_s <= c.sent_s < o.done_s) + 1 for c in calls)


def test_pipelining_shows_in_the_stamped_calls():
    assert in_flight_max(sample("http11-stamped"), 0) == 1
    assert in_flight_max(sample("http10-stamped"), 0) == 1
    assert in_flight_max(sample("http11-pipelined-stamped"), 0) == 7   # page 1: 7 embedded objects


def test_parse_unstamped_output_with_full_headers():
    rep = sample("http11-plain")
    assert not rep.stamped and rep.problems(users=2, expected_replies=13) == []
    assert len(rep.calls) == 13 and all(c.sent_s is None and c.complete and c.status == 200
                                        for c in rep.calls.values())
    f = rep.figures
    assert f["connections"] == 2 and f["conns_per_session"] == 1.0 and f["max_concurrent_conns"] == 2
    assert f["reply_bytes"] == pytest.approx(f["reply_header_bytes"] + f["reply_content_bytes"])
    assert f["cpu_total_pct"] >= 0 and rep.session_lengths[-1] == 1 and sum(rep.session_lengths) == 2


def test_parse_stationary_start_warmup():
    rep = sample("stationary-stamped")
    warm = [c for c in rep.calls.values() if c.warmup]
    assert len(warm) == 1 and warm[0].content_bytes == 0 and warm[0].tag is None
    assert rep.problems(users=1, expected_replies=12) == []
    loads = rep.page_loads()
    assert len(loads) == 2 and loads[0].start_s - warm[0].done_s == pytest.approx(0.8, abs=0.01)
    assert rep.user_calls() == {0: (12, 12)}


def test_parse_failures():
    refused = sample("refused")
    assert refused.errors["connrefused"] == 2 and refused.sessions_failed == 2
    assert "2 connrefused errors" in refused.problems(users=2) and "2 sessions failed" in refused.problems()

    idle = sample("idle-close")
    assert idle.errors["connreset"] == 1 and idle.sessions_completed == 1
    assert idle.figures["requests"] == 3 and idle.figures["replies"] == 2
    assert idle.problems(users=1, expected_replies=2) == ["1 connreset errors"]

    missing = sample("missing")
    assert missing.problems(users=1, expected_replies=2) == ["1 replies with status 4xx"]
    assert sorted(c.status for c in missing.calls.values()) == [200, 404]

    timeout = sample("timeout")
    assert timeout.errors["client-timo"] == 1 and timeout.sessions_failed == 1
    assert not next(iter(timeout.calls.values())).complete
    assert set(timeout.problems(users=1, expected_replies=1)) == {
        "1 client-timo errors", "1 sessions failed", "1 of 1 sessions did not complete", "0 of 1 replies"}


def test_parse_a_run_stopped_by_signal():
    rep = sample("stopped")
    assert rep.summary_printed and rep.sessions_completed == 0 and rep.sessions_failed == 0
    assert rep.problems(users=2, expected_replies=4, stopped=True) == []
    assert "2 of 2 sessions did not complete" in rep.problems(users=2, expected_replies=4)


def test_failed_users_from_tagged_calls():
    fs = tiny_file_set()
    sessions = [Session(0, (Visit(0, 2.0),)), Session(1, (Visit(1, 2.0),))]
    lines = ["SH0:GET /b0000.bin?u=0&p=0&o=0 HTTP/1.1", "SS0: header 1 content 0", "RH0:HTTP/1.1 200 OK",
             "RS0: header 1 content 1000 footer 0", "SH1:GET /e0000.bin?u=0&p=0&o=1 HTTP/1.1",
             "SH2:GET /l0000.bin?u=1&p=0&o=0 HTTP/1.1", "RH2:HTTP/1.1 200 OK", "RS2: header 1 content 300 footer 0"]
    rep = hl.parse_httperf("\n".join(lines))
    assert hp.failed_users(rep, fs, sessions) == [0]
    assert rep.page_loads()[0].complete is False and rep.page_loads()[1].complete is True
    assert rep.problems() == ["httperf printed no statistics (killed, or failed to start)"]


def test_harmless_stderr_is_ignored():
    rep = hl.parse_httperf("", "httperf: warning: open file limit > FD_SETSIZE; limiting max. # of open files "
                               "to FD_SETSIZE\nhttperf: can't open /nope\n")
    assert rep.stderr == ["httperf: can't open /nope"]
