"""Shared test fixtures. Root integration tests check that they leave nothing behind."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from leftovers import assert_nothing_left  # noqa: E402


@pytest.fixture
def clean_machine():
    """For root tests: the machine must hold nothing of ours before and after the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    assert_nothing_left()
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text()
    yield
    assert_nothing_left()
    assert Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text() == allowed, \
        "the root namespace's allowed congestion controls were not restored"


def pytest_collection_modifyitems(config, items):
    """Tests marked virtual_clock run in a guest on the virtual clock, where their timing
    checks have one outcome (tests/vm/test_timing_on_virtual_clock.py): on the host they are
    deselected, unless STARTLAB_REAL_CLOCK_TESTS=1 asks for them on the real clock."""
    from machine import clock
    if clock.is_virtual() or os.environ.get("STARTLAB_REAL_CLOCK_TESTS") == "1":
        return
    moved = [i for i in items if i.get_closest_marker("virtual_clock")]
    if moved:
        config.hook.pytest_deselected(items=moved)
        items[:] = [i for i in items if not i.get_closest_marker("virtual_clock")]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    from machine import clock
    if clock.is_virtual():
        item.guest_cpu_before = clock.cpu_times()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """On the virtual clock, each test's guest CPU (busy seconds and guest seconds, its
    fixtures' setup and teardown included) goes into its JUnit properties: a guest second
    costs wall time in proportion to the instructions in it, so the busiest tests are the
    ones to give a smaller path (tests/vm/test_timing_on_virtual_clock.py lists them)."""
    yield
    from machine import clock
    if hasattr(item, "guest_cpu_before"):
        cpu = clock.guest_cpu(item.guest_cpu_before, clock.cpu_times())
        item.user_properties += [("guest_busy_s", cpu["busy_s"]), ("guest_s", cpu["seconds"])]


def pytest_terminal_summary(terminalreporter):
    """How many timing assertions ran in each of their outcomes (tests/timing.py)."""
    from timing import COUNTS
    if COUNTS["virtual"]:
        terminalreporter.write_line(f"timing assertions: {COUNTS['virtual']} on the virtual clock (tolerance asserted)")
    if COUNTS["qualified"] or COUNTS["flagged"]:
        terminalreporter.write_line(f"timing assertions: {COUNTS['qualified']} on a qualified host (tolerance "
                                    f"asserted), {COUNTS['flagged']} on an unfit host (flag asserted)")


class HostWatch:
    """The host monitor over one test, for networks built without topologies.network (the
    delay line's own test path): `flags(...)` stops it and gives hostfit.run_flags."""

    def __init__(self, workdir: Path):
        from machine.host import HostMonitor
        self.monitor = HostMonitor(workdir).start()
        self.timing = None

    def stop(self):
        if self.monitor is not None:
            self.timing = self.monitor.stop()
            self.monitor = None
        return self.timing

    def flags(self, delay_stats: list | None = None, tail: bool = False) -> list[str]:
        """The delay flags (timer wake-ups, the delay element's lateness) of the test; `tail`
        for figures of a few frames' tail (hostfit.delay_flags)."""
        from links.hostfit import delay_flags
        return delay_flags(self.stop(), delay_stats, tail)


@pytest.fixture
def host_watch(tmp_path):
    watch = HostWatch(tmp_path / "host-monitor")
    yield watch
    watch.stop()
