"""Replaying SURGE user sessions with httperf, in three HTTP modes.

One httperf process on a client host replays several users: each user's session becomes
one session of an `--wsesslog` file (a burst per page: the document, then its embedded
objects; the think time after the burst), and httperf starts the sessions `start_spread_s`
apart. Everything here was checked against httperf 0.9.0 (Debian) and lighttpd 1.4.69
with packet captures:

* ``http10``: `--http-version=1.0`, one request per connection (httperf's default of one
  piped call for HTTP/1.0) and lighttpd `server.max-keep-alive-requests = 0`: every object
  has its own TCP connection, closed right after the response by the server and by
  httperf, which closes a 1.0 connection as soon as the reply is complete (the capture:
  one SYN per object, one request per connection, the first FIN from either side).
  HTTP/1.1 requests against a server that closes do not work: httperf pipelines into the
  closing connection, counts resets and sends requests again.
* ``http11``: one persistent connection per user (`--max-connections=1`) and one request
  at a time (`--max-piped-calls=1`): one SYN per user, never two requests in flight.
* ``http11-pipelined``: the same connection, `--max-piped-calls=32` (httperf's maximum):
  the document alone, and once it has arrived all embedded objects of the page at once
  (the capture shows them sent back to back, up to 32 unanswered).

For both persistent modes lighttpd must keep an idle connection open longer than any
think time (`server.max-keep-alive-idle` at least the run's length; its default of 5 s
closes it mid-session) and for more requests than a user makes
(`server.max-keep-alive-requests`). Otherwise the next request goes into a closed
connection, httperf sees a reset and reconnects: an extra round trip and a `connreset`
error in every such page.

Each URI carries its user, page and object (wire/httperf_log.py, which also parses what
httperf prints), and httperf runs under the stamper (httperf_stamp.py), which
time-stamps every line it prints: the per-call log gives each call's send, first-byte
and completion time.

Two httperf options need care. `--timeout` bounds a whole reply from its request (or its
status line), however steadily data flows, so it must exceed the longest transfer
(`reply_timeout_s`); a persistent connection idle in a think time has none. httperf sets
SO_RCVBUF on every socket to `--recv-buffer` (default 16 KB), which fixes the receive
window (window scale 0, about 19 KB at 16 KB) and turns autotuning off, so it must be at
least the path's BDP; the kernel caps it at net.core.rmem_max.

httperf 0.9.0 busy-polls: select() with a zero timeout in a loop, so the process takes
a whole core whatever it does. `POLL_SHIM_SOURCE` is an LD_PRELOAD library that lets
select() wait for up to 1 ms instead of returning at once; timers (think times) then fire
up to 1 ms late, and httperf costs only the work it does. The same library makes stdout
line-buffered.
"""
from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wire.httperf_log import HttperfReport, call_tag, warmup_tag

STAMPER = Path(__file__).resolve().with_name("httperf_stamp.py")

HTTPERF_MAX_CONNECTIONS = 4      # httperf's limit per session (MAX_CONN in session.c)
HTTPERF_MAX_PIPED = 32           # httperf's limit per connection (MAX_PIPED)
HTTPERF_MAX_SESSIONS = 1000      # session definitions one --wsesslog file may hold
SELECT_FD_LIMIT = 1024           # FD_SETSIZE: httperf's select() sees no descriptor above it


# --- modes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HttpMode:
    name: str
    http_version: str          # httperf --http-version
    max_piped_calls: int       # httperf --max-piped-calls: requests in flight on a connection
    server_keepalive: bool     # lighttpd keeps connections open (persistent) or closes each


MODES: dict[str, HttpMode] = {
    "http10": HttpMode("http10", "1.0", 1, False),
    "http11": HttpMode("http11", "1.1", 1, True),
    "http11-pipelined": HttpMode("http11-pipelined", "1.1", HTTPERF_MAX_PIPED, True),
}


def http_mode(name: str) -> HttpMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown HTTP mode {name!r}: one of {', '.join(MODES)}") from None


def lighttpd_directives(mode: str, keepalive_idle_s: float = 3600.0) -> list[str]:
    """lighttpd.conf lines that make the server side of `mode` (see the module docstring).

    keepalive_idle_s must exceed the longest think time of the run; the run's duration is
    a safe choice (Pareto think times of α = 1.4 exceed ten minutes now and then).
    """
    if not http_mode(mode).server_keepalive:
        return ["server.max-keep-alive-requests = 0"]
    return ["server.max-keep-alive-requests = 30000",
            f"server.max-keep-alive-idle = {max(1, math.ceil(keepalive_idle_s))}"]


# --- the session file ------------------------------------------------------------------------

def wsesslog_text(fs, sessions: Sequence, tag_calls: bool = True) -> str:
    """The --wsesslog file for `sessions` (surge.Session) over file set `fs` (surge.FileSet).

    One session per user, in order; a burst per visit: the page's document on a line of
    its own with `think=` (httperf waits that long after the burst's last reply), its
    embedded objects on the following lines, indented. The think time after the last
    page is written too; httperf ends the session after the last burst regardless.

    A session with a start offset (a stationary start) begins with a HEAD request for its
    first document, followed by the offset as think time: httperf cannot delay one
    session's start on its own, so a request of a few hundred bytes stands in. Its URI
    is tagged `?u=N&w=1`, so it never counts as a page.
    """
    if len(sessions) > HTTPERF_MAX_SESSIONS:
        raise ValueError(f"{len(sessions)} sessions: one httperf reads at most {HTTPERF_MAX_SESSIONS}")
    out = [f"# startlab web workload: model {fs.model.name}, seed {fs.seed}, {len(sessions)} users"]
    for s in sessions:
        offset = getattr(s, "start_offset_s", 0.0)
        if not s.visits and offset <= 0:
            raise ValueError(f"user {s.user} has no visits")
        out.append("")
        out.append(f"# user {s.user}: {len(s.visits)} pages" + (f" after {offset:.3f} s" if offset > 0 else ""))
        if offset > 0:
            doc = fs.urls(s.visits[0].page)[0] if s.visits else "/" + fs.files[fs.pages[0].document].name
            out.append(f"{doc}{warmup_tag(s.user) if tag_calls else ''} method=HEAD think={offset:.3f}")
        for p, visit in enumerate(s.visits):
            for o, url in enumerate(fs.urls(visit.page)):
                uri = url + (call_tag(s.user, p, o) if tag_calls else "")
                out.append(f"{uri} think={visit.think_s:.3f}" if o == 0 else f"\t{uri}")
    return "\n".join(out) + "\n"


def requests_of(fs, sessions: Sequence) -> int:
    """Requests the session file makes: every object of every visit, plus the warm-ups."""
    return sum(sum(len(fs.pages[v.page].files) for v in s.visits) + (getattr(s, "start_offset_s", 0.0) > 0)
               for s in sessions)


def write_wsesslog(path: Path, fs, sessions: Sequence, tag_calls: bool = True) -> Path:
    path.write_text(wsesslog_text(fs, sessions, tag_calls))
    return path


def failed_users(report: HttperfReport, fs, sessions: Sequence) -> list[int]:
    """Users whose replies fall short of their sessions (needs tagged calls and a run that
    was not stopped early): a failed session stops issuing calls."""
    calls = report.user_calls()
    return [s.user for s in sessions if calls.get(s.user, (0, 0))[1] < requests_of(fs, [s])]


# --- the command line ------------------------------------------------------------------------

def httperf_argv(server: str, sesslog: Path, users: int, mode: str = "http11", *, port: int = 80,
                 connections: int = 1, timeout_s: float = 60.0, start_spread_s: float = 7.0,
                 recv_buffer: int = 8 << 20, send_buffer: int = 64 << 10, per_call: bool = True,
                 client: tuple[int, int] = (0, 1), preload: Path | None = None,
                 httperf: str = "httperf") -> list[str]:
    """httperf's argv for one client host replaying `users` sessions of `sesslog`.

    connections: connections a user may have open at once (1 for the three modes as
    defined; up to 4, httperf's limit, for browser-like parallel connections; embedded
    objects are then spread over them).
    timeout_s: a call whose reply has not completed timeout_s after its request was sent
    (or after its status line arrived) fails, and with it the user's session. httperf
    does not extend this while data flows (its man page says it does; the code and a
    test say no), so it must exceed the longest reply's transfer time: see
    `reply_timeout_s`. An idle persistent connection during a think time has no timeout.
    start_spread_s: users start start_spread_s / users apart (the first at once), so
    they do not all fetch their first page in the same instant.
    recv_buffer: httperf sets SO_RCVBUF on every socket (default 16 KB, which would cap
    the receive window far below a path's BDP and disable autotuning); the kernel caps it
    at net.core.rmem_max of the client's namespace.
    per_call: print request/reply headers per call for `stamp` (stdout line-buffered by
    the preload library or, without it, by stdbuf).
    preload: the poll shim (`build_poll_shim`), run through env LD_PRELOAD=...
    """
    m = http_mode(mode)
    if not 1 <= users <= HTTPERF_MAX_SESSIONS:
        raise ValueError(f"users must be 1..{HTTPERF_MAX_SESSIONS}")
    if not 1 <= connections <= HTTPERF_MAX_CONNECTIONS:
        raise ValueError(f"connections must be 1..{HTTPERF_MAX_CONNECTIONS}")
    if users * connections >= SELECT_FD_LIMIT - 16:
        raise ValueError(f"{users} users × {connections} connections exceed what httperf's select() can watch")
    period = max(start_spread_s / users, 1e-3)
    argv = [httperf, "--hog", f"--client={client[0]}/{client[1]}", f"--server={server}", f"--port={port}",
            f"--http-version={m.http_version}", f"--max-connections={connections}",
            f"--max-piped-calls={m.max_piped_calls}", f"--wsesslog={users},0,{sesslog}",
            f"--period=d{period:.6f}", f"--timeout={timeout_s:g}",
            f"--recv-buffer={recv_buffer}", f"--send-buffer={send_buffer}"]
    if per_call:
        argv += ["--print-request=header", "--print-reply=header"]
    if preload is not None:
        return ["env", f"LD_PRELOAD={preload}", *argv]
    return ["stdbuf", "-oL", *argv] if per_call else argv


def reply_timeout_s(largest_reply_bytes: int, rate_bps: float, sharing: int = 1, slack_s: float = 30.0) -> float:
    """A --timeout that no healthy reply reaches: three times the largest reply's transfer
    time at its share of the bottleneck (rate_bps / sharing), plus slack for handshakes,
    retransmission timeouts and queueing."""
    return slack_s + 3 * 8 * largest_reply_bytes * max(1, sharing) / rate_bps


# --- the poll shim ---------------------------------------------------------------------------

POLL_SHIM_SOURCE = r"""
/* Loaded into httperf with LD_PRELOAD. httperf calls select() with a zero timeout in a
 * loop (it polls). Here a zero timeout becomes up to 1 ms of waiting: select() still
 * returns as soon as a descriptor is ready, and httperf's timers run at most 1 ms late.
 * stdout is made line-buffered, so per-call lines reach a reader as they are printed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/select.h>

typedef int (*select_fn)(int, fd_set *, fd_set *, fd_set *, struct timeval *);

__attribute__((constructor)) static void line_buffered_stdout(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	static select_fn real;
	if (!real)
		real = (select_fn)dlsym(RTLD_NEXT, "select");
	if (tv && tv->tv_sec == 0 && tv->tv_usec == 0) {
		struct timeval bounded = { 0, 1000 };
		return real(n, r, w, e, &bounded);
	}
	return real(n, r, w, e, tv);
}
"""


def poll_shim_path(directory: Path) -> Path:
    """Where the shim of this source version lives in `directory`."""
    digest = hashlib.sha256(POLL_SHIM_SOURCE.encode()).hexdigest()[:12]
    return Path(directory) / f"httperf-poll-shim-{digest}.so"


def build_poll_shim(directory: Path, cc: str = "cc") -> Path:
    """Compile POLL_SHIM_SOURCE into `directory` (once per source version); returns the .so."""
    lib = poll_shim_path(directory)
    digest = lib.stem.rsplit("-", 1)[1]
    if lib.exists():
        return lib
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"httperf-poll-shim-{digest}.c"
    src.write_text(POLL_SHIM_SOURCE)
    tmp = lib.with_suffix(f".so.tmp{os.getpid()}")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(src), "-ldl"], check=True,
                   capture_output=True)
    tmp.replace(lib)
    return lib


def stamped(python: str, out: Path, argv: Sequence[str]) -> list[str]:
    """The command that runs `argv` (httperf's) under the stamper, its log going to `out`
    (stderr to out.with_suffix('.err'))."""
    return [python, str(STAMPER), "--out", str(out), "--", *argv]


def main(argv: Sequence[str]) -> int:
    """`python3 -m hosts.workloads.httperf build-shim DIR`: provisioning builds the shim."""
    if len(argv) == 2 and argv[0] == "build-shim":
        existed = poll_shim_path(Path(argv[1])).exists()
        lib = build_poll_shim(Path(argv[1]))
        print(f"{'present' if existed else 'built'} {lib}")
        return 0
    print("usage: python3 -m hosts.workloads.httperf build-shim DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
