"""Run httperf with every line it prints time-stamped: the per-call log of the web workload.

    python3 httperf_stamp.py --out FILE [--all] -- httperf ARGS...

httperf prints no timestamps; with `--print-request=header --print-reply=header` and its
stdout line-buffered it prints a call's request line as it sends it and its status line
and size summary as the reply arrives and completes. Stamping each line as it arrives
gives every call's send, first-byte and completion time, within 0.02–0.2 ms (median) and
under 1 ms (p99) of a capture on the client's interface with 200 users on one process.
The lines the parser (wire/httperf_log.py) does not read — the other header lines — are
dropped unless --all. At the end it prints one JSON line on its own stdout: httperf's exit
status and the CPU seconds the stamper and httperf used.

This file imports nothing from startlab: it runs as a script inside a host's network
namespace, next to the httperf it watches.
"""
from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Sequence

DETAIL = re.compile(r"^(SH|RH)\d+:")


def _keep(line: str) -> bool:
    """Drop the header lines the parser does not read: all but a call's request and status lines."""
    if DETAIL.match(line):
        body = line.split(":", 1)[1]
        return line.startswith("SH") and " HTTP/" in body or line.startswith("RH") and body.startswith("HTTP/")
    return True


def stamp_lines(src: IO[bytes], dst: IO[str], keep_all: bool = False, clock=time.time) -> int:
    """Copy lines from src to dst, each prefixed with the time it arrived; returns lines kept."""
    kept = 0
    for raw in iter(src.readline, b""):
        t = clock()
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if keep_all or _keep(line):
            dst.write(f"{t:.6f} {line}\n")
            kept += 1
    return kept


def _die_with_parent() -> None:
    """In the child: SIGTERM when the stamper dies, so a killed stamper leaves no httperf."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_stamped(argv: Sequence[str], out: Path, err: Path | None = None, keep_all: bool = False) -> int:
    """Run httperf with its stdout timestamped into `out`; returns httperf's exit code.

    SIGINT and SIGTERM are passed on to httperf as SIGINT, on which it stops and still
    prints its statistics (sessions under way then count neither as completed nor failed;
    httperf itself dies on SIGTERM without printing). Stop the run by signalling this
    process, not httperf; if this process is killed outright, httperf gets SIGTERM.
    """
    child: list[subprocess.Popen] = []
    stop_asked = []

    def forward(signum, frame):
        stop_asked.append(signum)
        if child and child[0].poll() is None:
            child[0].send_signal(signal.SIGINT)

    # Installed before the child starts, so a stop that comes early is never lost.
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    # Line-buffered: what a run printed so far is on disk even if the run is killed.
    with open(out, "w", buffering=1) as dst, open(err or out.with_suffix(".err"), "w") as errf:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=errf, preexec_fn=_die_with_parent)
        child.append(proc)
        if stop_asked:
            proc.send_signal(signal.SIGINT)
        assert proc.stdout is not None
        stamp_lines(proc.stdout, dst, keep_all)
        return proc.wait()


USAGE = "usage: httperf_stamp.py --out FILE [--all] -- httperf ARGS..."


def main(argv: Sequence[str]) -> int:
    if "--" not in argv:
        print(USAGE, file=sys.stderr)
        return 2
    opts, cmd = list(argv[:argv.index("--")]), list(argv[argv.index("--") + 1:])
    if "--out" not in opts or opts.index("--out") + 1 >= len(opts) or not cmd:
        print(USAGE, file=sys.stderr)
        return 2
    rc = run_stamped(cmd, Path(opts[opts.index("--out") + 1]), keep_all="--all" in opts)
    # What the replay cost, for the load generator's CPU per user: this process, and
    # httperf (its only child, already waited for).
    me, child = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"exit": rc, "stamper_cpu_s": round(me.ru_utime + me.ru_stime, 4),
                      "httperf_cpu_s": round(child.ru_utime + child.ru_stime, 4)}), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
