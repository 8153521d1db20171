"""The suite's timing tests on the virtual clock: every test module marked `virtual_clock`
runs in one guest under QEMU's instruction-counted time (cli/virtual.pytest_in_guest), where
a release time, a rate or a first flight has one outcome whatever this host does. The host
run of the suite deselects them (tests/conftest.py).

One boot for the whole group: a boot costs about half a minute of wall time, and the tests
share nothing but the guest. The guest runs Debian's 6.12 kernel: 6.1 caps a connection's
first receive window at 64 KB (lifted in 6.11), which stalls every first flight these tests
time (measured in a 6.1 guest: Jump Start's client advertised 65536 bytes where the test
needs the whole 150 KB object). Their JUnit XML comes back over the export port; a failure here
names each failed test with the guest's message, and a skip counts as a failure, because
every test of the group can run in the guest.
"""
from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import assert_nothing_left, vm_leftovers  # noqa: E402

KERNEL = "6.12"



def virtual_clock_modules() -> list[str]:
    """The test modules marked virtual_clock as a whole (their `pytestmark`)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "pytest.mark.virtual_clock" in p.read_text())


def guest_outcomes(modules: list[str], tmp_path: Path, kernel: str) -> tuple[dict[str, str], str, object]:
    """Each test's outcome in a guest of `kernel` ("passed", or what went wrong), the
    guest's pytest output and the boot."""
    from cli.virtual import pytest_in_guest
    assert_nothing_left()
    boot, out = pytest_in_guest(modules, tmp_path, kernel=kernel, progress=lambda m: sys.stderr.write(m + "\n"))
    output = (out / "output.txt").read_text(errors="replace") if (out / "output.txt").is_file() else ""
    sys.stderr.write(output[-4000:])
    assert (out / "junit.xml").is_file(), f"the guest's pytest wrote no JUnit XML (exit {boot.rc}): {output[-2000:]}"
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    outcome = {}
    for c in cases:
        bad = next((c.find(k) for k in ("failure", "error", "skipped") if c.find(k) is not None), None)
        outcome[f"{c.get('classname')}::{c.get('name')}"] = (
            "passed" if bad is None else f"{bad.tag}: {(bad.get('message') or '')[:400]}")
    assert outcome, f"the guest ran no test: {output[-2000:]}"
    wrong = {k: v for k, v in outcome.items() if v != "passed"}
    assert not wrong, f"on the virtual clock ({kernel}):\n" + "\n".join(f"{k}: {v}" for k, v in wrong.items())
    assert (out / "rc").read_text().strip() == "0", output[-2000:]
    return outcome, output, boot


def test_the_timing_tests_pass_on_the_virtual_clock(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    modules = virtual_clock_modules()
    assert modules, "no test module is marked virtual_clock"
    outcome, output, boot = guest_outcomes(modules, tmp_path, KERNEL)
    counted = re.search(r"timing assertions: (\d+) on the virtual clock", output)
    print(f"{len(outcome)} tests passed in the guest, {counted.group(1) if counted else 0} timing "
          f"assertions on the virtual clock; {boot.guest_s} guest s in {boot.wall_s:.0f} s wall")
    assert counted and int(counted.group(1)) > 0, "no timing assertion ran on the virtual clock"
    assert vm_leftovers() == []
    assert_nothing_left()


def test_fast_starts_recovery_from_multiple_losses_on_debian_12s_kernel(tmp_path: Path) -> None:
    """The kernel module of fs-gbn (hosts/kmod) is built for each kernel it runs on: its
    wire test runs on 6.1 as well (6.12 runs it with the group above)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    outcome, _, boot = guest_outcomes(["tests/test_faststart_gbn.py"], tmp_path, "6.1")
    assert len(outcome) == 2, outcome
    print(f"fs-gbn's wire tests on 6.1: {boot.guest_s} guest s in {boot.wall_s:.0f} s wall")
    assert vm_leftovers() == []
    assert_nothing_left()
