"""The suite's timing tests on the virtual clock: every test module marked `virtual_clock`
runs in a guest under QEMU's instruction-counted time (cli/virtual.pytest_in_guest), where
a release time, a rate or a first flight has one outcome whatever this host does. The host
run of the suite deselects them (tests/conftest.py).

The group is dealt into SHARES guests (tests/vm/conftest.py runs the step's guests side by
side, one per core). Whole modules are dealt, by their number of tests (largest first, each
to the lightest guest), so a module's fixtures are set up once; the dealing depends on the
checkout alone, so a failure is reproduced by running the same guest's modules again. A
boot costs about half a minute of wall time, so the group is not split further. The guests
run Debian's 6.12 kernel: 6.1 caps a connection's first receive window at 64 KB (lifted in
6.11), which stalls every first flight these tests time (measured in a 6.1 guest: Jump
Start's client advertised 65536 bytes where the test needs the whole 150 KB object). Their
JUnit XML comes back over the export port; a failure here names each failed test with the
guest's message, and a skip counts as a failure, because every test of the group can run in
the guest.
"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "vm"))

from jobs import SUMMARY, Job  # noqa: E402

KERNEL = "6.12"
# Two shares, one per core of a 2-core machine: the group is about 330 guest seconds, and a
# third boot would cost more than a third share saves. The count is fixed, not the host's,
# so that every host deals the same modules together.
SHARES = 2
GBN_MODULE = "tests/test_faststart_gbn.py"
# Measured on an idle 2-core machine here: about 25 s of wall time per test function of a
# share (two shares of 57 tests in all: 714 s and 601 s, the step's guest timeline). It only
# orders the step's jobs.
WALL_S_PER_TEST = 25
BUSIEST = 20          # tests listed by guest CPU: the candidates for a smaller path


def virtual_clock_modules() -> list[str]:
    """The test modules marked virtual_clock as a whole (their `pytestmark`)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "pytest.mark.virtual_clock" in p.read_text())


def count_tests(module: str) -> int:
    """The module's tests that run in the guest: all of them when the module is marked,
    else those marked one by one (test_delay.py: 3 of its 13)."""
    text = (ROOT / module).read_text()
    if re.search(r"^pytestmark\s*=[^\n]*virtual_clock", text, re.M):
        return len(re.findall(r"^def test_", text, re.M))
    return len(re.findall(r"@pytest\.mark\.virtual_clock\s*\n(?:[ \t]*@[^\n]*\n)*def test_", text))


def deal(modules: list[str], guests: int) -> list[list[str]]:
    """`modules` dealt over `guests`, largest first (by number of tests), each to the guest
    with the fewest tests so far: the checkout alone decides who runs what."""
    hands: list[list[str]] = [[] for _ in range(guests)]
    load = [0] * guests
    for m in sorted(modules, key=lambda m: (-count_tests(m), m)):
        i = load.index(min(load))
        hands[i].append(m)
        load[i] += count_tests(m)
    return [sorted(h) for h in hands if h]


def guest_outcomes(modules: list[str], kernel: str, name: str, tmp_path: Path,
                   stop=None) -> tuple[dict[str, str], str, object, dict[str, tuple[float, float]]]:
    """Each test's outcome in a guest of `kernel` ("passed", or what went wrong), the
    guest's pytest output, the boot, and each test's (guest busy s, guest s) from its JUnit
    properties (tests/conftest.py). Its progress lines start with `name`."""
    from cli.virtual import pytest_in_guest

    def progress(message: str) -> None:
        sys.stderr.write(f"[{name}] {message}\n")
    boot, out = pytest_in_guest(modules, tmp_path, kernel=kernel, progress=progress, stop=stop)
    output = (out / "output.txt").read_text(errors="replace") if (out / "output.txt").is_file() else ""
    sys.stderr.write(f"[{name}] " + output[-4000:])
    assert (out / "junit.xml").is_file(), f"the guest's pytest wrote no JUnit XML (exit {boot.rc}): {output[-2000:]}"
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    outcome, cost = {}, {}
    for c in cases:
        props = {p.get("name"): float(p.get("value")) for p in c.iter("property")}
        if "guest_s" in props:
            cost[f"{c.get('classname')}::{c.get('name')}"] = (props["guest_busy_s"], props["guest_s"])
        bad = next((c.find(k) for k in ("failure", "error", "skipped") if c.find(k) is not None), None)
        outcome[f"{c.get('classname')}::{c.get('name')}"] = (
            "passed" if bad is None else f"{bad.tag}: {(bad.get('message') or '')[:400]}")
    assert outcome, f"the guest ran no test: {output[-2000:]}"
    wrong = {k: v for k, v in outcome.items() if v != "passed"}
    assert not wrong, (f"on the virtual clock ({kernel}, {name}: {' '.join(modules)}):\n"
                       + "\n".join(f"{k}: {v}" for k, v in wrong.items()))
    assert (out / "rc").read_text().strip() == "0", output[-2000:]
    return outcome, output, boot, cost


HANDS = deal(virtual_clock_modules(), SHARES)
SHARE_JOBS = [f"{KERNEL} share {i + 1} of {len(HANDS)}" for i in range(len(HANDS))]
JOBS = {name: Job(partial(guest_outcomes, hand, KERNEL, name), (KERNEL,),
                  WALL_S_PER_TEST * sum(count_tests(m) for m in hand))
        for name, hand in zip(SHARE_JOBS, HANDS)}
JOBS["6.1 fs-gbn"] = Job(partial(guest_outcomes, [GBN_MODULE], "6.1", "6.1 fs-gbn"), ("6.1",), 122)


def test_the_timing_tests_pass_on_the_virtual_clock(guests: dict) -> None:
    results = {name: guests[name].result() for name in SHARE_JOBS}
    outcome = {k: v for o, _, _, _ in results.values() for k, v in o.items()}
    counted = sum(int(m.group(1)) for _, out, _, _ in results.values()
                  for m in [re.search(r"timing assertions: (\d+) on the virtual clock", out)] if m)
    for name, (o, _, boot, _) in results.items():
        print(f"{name}: {len(o)} tests passed, {boot.guest_s} guest s in {boot.wall_s:.0f} s wall")
    cost = {k: v for _, _, _, c in results.values() for k, v in c.items()}
    SUMMARY[f"the busiest {min(BUSIEST, len(cost))} of the {len(cost)} tests on the virtual clock "
            f"({sum(b for b, _ in cost.values()):.0f} busy of {sum(s for _, s in cost.values()):.0f} guest s)"] = [
        f"{busy:6.1f} busy of {seconds:6.1f} guest s  {test}"
        for test, (busy, seconds) in sorted(cost.items(), key=lambda kv: -kv[1][0])[:BUSIEST]]
    print(f"{len(outcome)} tests passed in {len(results)} guests, {counted} timing assertions on the "
          "virtual clock")
    assert len(outcome) == sum(len(o) for o, _, _, _ in results.values()), "a test ran in two guests"
    assert set(cost) == set(outcome), f"no guest CPU recorded for {sorted(set(outcome) - set(cost))}"
    assert counted > 0, "no timing assertion ran on the virtual clock"


def test_fast_starts_recovery_from_multiple_losses_on_debian_12s_kernel(guests: dict) -> None:
    """The kernel module of fs-gbn (hosts/kmod) is built for each kernel it runs on: its
    wire test runs on 6.1 as well (6.12 runs it with the group above)."""
    outcome, _, boot, _ = guests["6.1 fs-gbn"].result()
    assert len(outcome) == 2, outcome
    print(f"fs-gbn's wire tests on 6.1: {boot.guest_s} guest s in {boot.wall_s:.0f} s wall")
