"""The VM step's guests, shared by its modules: every job of the selected modules starts at
once and runs GUESTS at a time, the longest first, and each test asserts on what its job
returned.

A guest is one QEMU thread, so one guest leaves every other core idle, and on the virtual
clock a guest's figures do not depend on what runs beside it (only its wall time does). Run
one module after another, the step left a core idle most of its time; dealt over the cores
it takes the longest share's time plus what is left over the others.

A module declares its guest work in `JOBS` (name -> tests/vm/jobs.Job). Its tests take the `guests`
fixture and wait on `guests[name].result()`. The machine must hold nothing of ours before the
first job and after the last, checked here, since each job's guest runs beside another's.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "vm"))

from jobs import SUMMARY, Job  # noqa: E402
from leftovers import assert_nothing_left, vm_leftovers  # noqa: E402

# One guest per core, at most two (this machine's count; more guests than cores only share
# the cores).
GUESTS = max(1, min(2, os.cpu_count() or 1))

# When each job started and ended (seconds since the first started), for the step's summary:
# what the step's time went to, and which job was its longest path.
TIMELINE: dict[str, tuple[float, float | None]] = {}


def timed(name: str, job: Job, dest: Path, stop: threading.Event, t0: float):
    """`job.run(dest, stop)`, its start and end kept in TIMELINE."""
    TIMELINE[name] = (time.monotonic() - t0, None)
    try:
        return job.run(dest, stop)
    finally:
        TIMELINE[name] = (TIMELINE[name][0], time.monotonic() - t0)


def pytest_terminal_summary(terminalreporter) -> None:
    if not TIMELINE:
        return
    terminalreporter.section("guests (wall seconds from the step's first boot)")
    for name, (start, end) in sorted(TIMELINE.items(), key=lambda kv: kv[1][0]):
        span = "unfinished" if end is None else f"to {end:4.0f} s ({end - start:4.0f} s)"
        terminalreporter.write_line(f"from {start:4.0f} s {span}  {name}")
    for title, lines in SUMMARY.items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def guests(request, tmp_path_factory) -> dict[str, Future]:
    """Every job of the modules selected in this session, as futures of their results."""
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    from cli.virtual import prepare
    jobs: dict[str, Job] = {}
    for module in {item.module for item in request.session.items}:
        for name, job in getattr(module, "JOBS", {}).items():
            assert name not in jobs, f"two modules declare the guest job {name!r}"
            jobs[name] = job
    assert jobs, "no module of this step declares a guest job"
    assert_nothing_left()
    for kernel in sorted({k for job in jobs.values() for k in job.kernels}):
        prepare(kernel, lambda m: sys.stderr.write(m + "\n"))
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=GUESTS)
    t0 = time.monotonic()
    futures = {name: pool.submit(timed, name, job, tmp_path_factory.mktemp(re.sub(r"\W+", "-", name)), stop, t0)
               for name, job in sorted(jobs.items(), key=lambda kv: (-kv[1].wall_s, kv[0]))}
    try:
        yield futures
    finally:
        stop.set()                          # a guest still running is stopped where it can be
        pool.shutdown(wait=True, cancel_futures=True)
    assert vm_leftovers() == []
    assert_nothing_left()
