"""httperf's output, as startlab's web workload runs it: the URI tags of its calls and a
parser of what it prints, plain or time-stamped per line.

The web workload (hosts/workloads/web.py) writes the session file with tagged URIs and
checks each run with this parser; its analysis (analysis/workloads/web.py) reads the same
logs again, so both live here, below either of them.

Every URI of a replayed session carries its user, page and object (`?u=3&p=5&o=2`,
ignored by a static file server), so a call maps back to the session; a stationary
start's warm-up request is tagged `?u=N&w=1` and never counts as a page.

httperf prints no timestamps. Per call it can print the request and reply headers and a
size summary (`--print-request=header`, `--print-reply=header`: lines SH/SS at send
time, RH as the reply header arrives, RS when the reply is complete); the stamper
(hosts/workloads/httperf_stamp.py) prefixes each line with the time it arrived, which
gives every call's send, first-byte and completion time. Checked against httperf 0.9.0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable


# --- names the workload and its analysis share ------------------------------------------------

WEB_MODELS = ("surge-default", "large-files")              # hosts/workloads/surge.py MODELS
HTTP_MODES = ("http10", "http11", "http11-pipelined")     # hosts/workloads/httperf.py MODES


# --- URI tags --------------------------------------------------------------------------------

def call_tag(user: int, page: int, obj: int) -> str:
    return f"?u={user}&p={page}&o={obj}"


def warmup_tag(user: int) -> str:
    return f"?u={user}&w=1"


TAG = re.compile(r"\?u=(\d+)&p=(\d+)&o=(\d+)$")
WARMUP = re.compile(r"\?u=(\d+)&w=1$")


# --- parsing ---------------------------------------------------------------------------------

NUM = r"(-?(?:nan|inf|\d+(?:\.\d+)?))"
STAMP = re.compile(r"^(\d+\.\d+) (.*)$")
CALL_LINE = re.compile(r"^(SH|SS|RH|RS)(\d+):(.*)$")
SUMMARY: list[tuple[re.Pattern, tuple[str, ...]]] = [
    (re.compile(rf"^Total: connections {NUM} requests {NUM} replies {NUM} test-duration {NUM} s"),
     ("connections", "requests", "replies", "duration_s")),
    (re.compile(rf"^Connection rate: {NUM} conn/s \({NUM} ms/conn, <={NUM} concurrent connections\)"),
     ("conn_rate", "conn_period_ms", "max_concurrent_conns")),
    (re.compile(rf"^Connection time \[ms\]: min {NUM} avg {NUM} max {NUM} median {NUM} stddev {NUM}"),
     ("conn_time_min_ms", "conn_time_avg_ms", "conn_time_max_ms", "conn_time_median_ms", "conn_time_sd_ms")),
    (re.compile(rf"^Connection time \[ms\]: connect {NUM}"), ("connect_ms",)),
    (re.compile(rf"^Connection length \[replies/conn\]: {NUM}"), ("replies_per_conn",)),
    (re.compile(rf"^Request rate: {NUM} req/s"), ("request_rate",)),
    (re.compile(rf"^Request size \[B\]: {NUM}"), ("request_bytes",)),
    (re.compile(rf"^Reply rate \[replies/s\]: min {NUM} avg {NUM} max {NUM} stddev {NUM} \({NUM} samples\)"),
     ("reply_rate_min", "reply_rate_avg", "reply_rate_max", "reply_rate_sd", "reply_rate_samples")),
    (re.compile(rf"^Reply time \[ms\]: response {NUM} transfer {NUM}"), ("response_ms", "transfer_ms")),
    (re.compile(rf"^Reply size \[B\]: header {NUM} content {NUM} footer {NUM} \(total {NUM}\)"),
     ("reply_header_bytes", "reply_content_bytes", "reply_footer_bytes", "reply_bytes")),
    (re.compile(rf"^Reply status: 1xx={NUM} 2xx={NUM} 3xx={NUM} 4xx={NUM} 5xx={NUM}"),
     ("status_1xx", "status_2xx", "status_3xx", "status_4xx", "status_5xx")),
    (re.compile(rf"^CPU time \[s\]: user {NUM} system {NUM} \(user {NUM}% system {NUM}% total {NUM}%\)"),
     ("cpu_user_s", "cpu_system_s", "cpu_user_pct", "cpu_system_pct", "cpu_total_pct")),
    (re.compile(rf"^Net I/O: {NUM} KB/s"), ("net_io_kBps",)),
    (re.compile(rf"^Session rate \[sess/s\]: min {NUM} avg {NUM} max {NUM} stddev {NUM} \({NUM}/{NUM}\)"),
     ("session_rate_min", "session_rate_avg", "session_rate_max", "session_rate_sd",
      "sessions_completed", "sessions_ended")),
    (re.compile(rf"^Session: avg {NUM} connections/session"), ("conns_per_session",)),
    (re.compile(rf"^Session lifetime \[s\]: {NUM}"), ("session_lifetime_s",)),
    (re.compile(rf"^Session failtime \[s\]: {NUM}"), ("session_failtime_s",)),
]
ERRORS = re.compile(r"^Errors: (.*)$")
HISTOGRAM = re.compile(r"^Session length histogram:(.*)$")
HARMLESS_STDERR = ("open file limit > FD_SETSIZE",)


@dataclass
class Call:
    """One request/response, from httperf's per-call lines (times only when stamped)."""
    id: int
    uri: str = ""
    sent_s: float | None = None          # request written to the socket
    first_byte_s: float | None = None    # reply status line received
    done_s: float | None = None          # reply complete
    status: int | None = None
    header_bytes: int | None = None
    content_bytes: int | None = None

    @property
    def tag(self) -> tuple[int, int, int] | None:
        """(user, page, object) from the URI's tag, None for an untagged URI."""
        m = TAG.search(self.uri)
        return (int(m[1]), int(m[2]), int(m[3])) if m else None

    @property
    def warmup(self) -> bool:
        return WARMUP.search(self.uri) is not None

    @property
    def complete(self) -> bool:
        return self.content_bytes is not None


@dataclass
class PageLoad:
    user: int
    page: int
    objects: int
    start_s: float | None     # the document's request sent
    end_s: float | None       # the page's last reply complete
    bytes: int                # reply bytes, headers included
    complete: bool

    @property
    def load_time_s(self) -> float | None:
        return None if self.start_s is None or self.end_s is None else self.end_s - self.start_s


@dataclass
class HttperfReport:
    figures: dict[str, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    session_lengths: list[int] = field(default_factory=list)   # sessions that ended after n replies
    calls: dict[int, Call] = field(default_factory=dict)
    stderr: list[str] = field(default_factory=list)
    stamped: bool = False

    @property
    def summary_printed(self) -> bool:
        return "replies" in self.figures

    @property
    def sessions_completed(self) -> int:
        return int(self.figures.get("sessions_completed", 0))

    @property
    def sessions_failed(self) -> int:
        return int(self.figures.get("sessions_ended", 0) - self.figures.get("sessions_completed", 0))

    @property
    def reply_bytes_total(self) -> float:
        """Bytes of all replies (headers and content) as httperf counted them."""
        return self.figures.get("reply_bytes", 0.0) * self.figures.get("replies", 0.0)

    def problems(self, users: int | None = None, expected_replies: int | None = None,
                 stopped: bool = False) -> list[str]:
        """Everything that says a user's replay went wrong; empty when the run is clean.

        users / expected_replies: what the session file asked for. stopped: the run was
        ended by a signal before its sessions could finish, so unfinished sessions and
        missing replies are expected (failed sessions, errors and bad statuses are not).
        """
        found: list[str] = []
        if not self.summary_printed:
            return ["httperf printed no statistics (killed, or failed to start)"] + self.stderr[:3]
        found += [f"{n} {name} errors" for name, n in self.errors.items() if n and name != "total"]
        if self.sessions_failed:
            found.append(f"{self.sessions_failed} sessions failed")
        bad = {k: int(self.figures.get(k, 0)) for k in ("status_1xx", "status_3xx", "status_4xx", "status_5xx")}
        found += [f"{n} replies with status {k[-3:]}" for k, n in bad.items() if n]
        if not stopped:
            if users is not None and self.sessions_completed < users:
                found.append(f"{users - self.sessions_completed} of {users} sessions did not complete")
            if expected_replies is not None and self.figures.get("replies", 0) < expected_replies:
                found.append(f"{int(self.figures.get('replies', 0))} of {expected_replies} replies")
        found += self.stderr
        return found

    def user_calls(self) -> dict[int, tuple[int, int]]:
        """Per user (from the URI tags, warm-ups included): (calls sent, replies complete)."""
        out: dict[int, list[int]] = {}
        for c in self.calls.values():
            m = TAG.search(c.uri) or WARMUP.search(c.uri)
            if m:
                counts = out.setdefault(int(m[1]), [0, 0])
                counts[0] += 1
                counts[1] += c.complete
        return {u: (n, done) for u, (n, done) in out.items()}

    def page_loads(self) -> list[PageLoad]:
        """Per (user, page): the page's object download time (Scharf Fig. 8), from tagged calls."""
        groups: dict[tuple[int, int], list[Call]] = {}
        for c in self.calls.values():
            if c.tag is not None:
                groups.setdefault(c.tag[:2], []).append(c)
        loads = []
        for (user, page), calls in sorted(groups.items()):
            calls.sort(key=lambda c: c.tag[2])
            doc = calls[0] if calls[0].tag[2] == 0 else None
            complete = doc is not None and all(c.complete for c in calls)
            ends = [c.done_s for c in calls if c.done_s is not None]
            loads.append(PageLoad(user, page, len(calls), doc.sent_s if doc else None,
                                  max(ends) if complete and ends else None,
                                  sum((c.header_bytes or 0) + (c.content_bytes or 0) for c in calls), complete))
        return loads


def _num(s: str) -> float:
    return float(s)


def parse_httperf(stdout: str | Iterable[str], stderr: str = "") -> HttperfReport:
    """Parse httperf's stdout, plain or stamped by `stamp`, and its stderr."""
    rep = HttperfReport()
    lines = stdout.splitlines() if isinstance(stdout, str) else stdout
    for raw in lines:
        line = raw.rstrip("\r\n")
        t = None
        m = STAMP.match(line)
        if m:
            t, line = float(m[1]), m[2]
            rep.stamped = True
        cm = CALL_LINE.match(line)
        if cm:
            kind, cid, rest = cm[1], int(cm[2]), cm[3]
            call = rep.calls.setdefault(cid, Call(cid))
            if kind == "SH" and not call.uri and " HTTP/" in rest:
                call.uri = rest.split(" ")[1]
            elif kind == "SS" and call.sent_s is None:
                call.sent_s = t
            elif kind == "RH" and call.status is None and rest.startswith("HTTP/"):
                parts = rest.split(" ")
                call.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
                call.first_byte_s = t
            elif kind == "RS":
                sizes = rest.split()
                call.header_bytes, call.content_bytes = int(sizes[1]), int(sizes[3])
                call.done_s = t
            continue
        for pattern, names in SUMMARY:
            sm = pattern.match(line)
            if sm:
                rep.figures.update({n: _num(v) for n, v in zip(names, sm.groups())})
                break
        else:
            em = ERRORS.match(line)
            if em:
                tokens = em[1].split()
                rep.errors.update({tokens[i]: int(tokens[i + 1]) for i in range(0, len(tokens) - 1, 2)})
                continue
            hm = HISTOGRAM.match(line)
            if hm:
                rep.session_lengths = [int(x) for x in hm[1].split()]
    for line in stderr.splitlines():
        line = line.strip()
        if line and not any(h in line for h in HARMLESS_STDERR):
            rep.stderr.append(line)
    return rep


def parse_files(stdout_path: Path, stderr_path: Path | None = None) -> HttperfReport:
    err = stderr_path.read_text(errors="replace") if stderr_path and stderr_path.exists() else ""
    with open(stdout_path, errors="replace") as f:
        return parse_httperf(f, err)
