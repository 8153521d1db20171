"""A guest job of the VM step (tests/vm/conftest.py runs them side by side)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Lines a test adds to the step's closing summary, by section title (tests/vm/conftest.py
# prints them after the guests' timeline): pytest keeps a passing test's own output.
SUMMARY: dict[str, list[str]] = {}


@dataclass(frozen=True)
class Job:
    """One guest's work: a boot, or a command that boots one. `run(dest, stop)` works in the
    fresh directory `dest` and returns what the tests assert on; it ends early when `stop` is
    set, where it can. `kernels` are prepared before any job starts, since the guests share
    the image and its builds. `wall_s`, about how long it takes alone on an idle machine,
    only orders the jobs (longest first)."""
    run: Callable[[Path, threading.Event], object]
    kernels: tuple[str, ...]
    wall_s: float
