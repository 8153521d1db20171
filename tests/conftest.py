"""Shared test fixtures. Root integration tests check that they leave nothing behind."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from machine import registry  # noqa: E402
from machine.cleanup import OUR_NAME, our_shells, root_links  # noqa: E402

OUR_PROGRAMS = ("iperf3", "lighttpd", "tcpdump", "curl", "startlab-delayline")


def our_processes() -> list[str]:
    """Programs of the workloads still running with a startlab node's name space."""
    found = [f"shell {name} ({pid})" for pid, name in our_shells()]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm in OUR_PROGRAMS and ("10.1.0." in argv or "10.2.0." in argv or "stl" in argv):
            found.append(f"{comm} ({entry.name}): {argv[:80]}")
    return found


def leftovers() -> dict[str, list[str]]:
    """Everything of startlab's still on the machine (empty lists when clean)."""
    return {
        "links": [n for n in root_links() if OUR_NAME.match(n) or n.startswith(registry.PREFIX)],
        "netns": [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
                  .stdout.split() if n.startswith(registry.PREFIX)],
        "processes": our_processes(),
        "registry": [p.name for p in registry.REGISTRY_DIR.glob(f"{registry.PREFIX}*.json")]
        if registry.REGISTRY_DIR.is_dir() else [],
    }


def assert_nothing_left() -> None:
    left = {k: v for k, v in leftovers().items() if v}
    assert not left, f"startlab left state behind: {left}"


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
