"""The two honest outcomes of a timing assertion.

A timing figure (a rate, an RTT, a release time) is the emulator's to meet only while the
host runs it punctually. The host monitor (machine/host.py), running during the test's own
network, says whether it did (topologies/hostfit.run_flags):
  - qualified (no flags): the emulator must meet its tolerance: assert it;
  - unfit (flags): the run must carry the flag where its user sees it (a run's meta.json and
    report, a fidelity result's explanation): assert that instead.
Either way something is asserted; the outcome is printed and counted, and the session's
summary line says how many ran in each case.
"""
from __future__ import annotations

from typing import Callable, Iterable

COUNTS = {"qualified": 0, "flagged": 0}


def timing_check(what: str, flags: list[str], within_tolerance: bool, detail: str = "",
                 shown: Iterable[str] | Callable[[], Iterable[str]] | None = None) -> str:
    """Assert `within_tolerance` on a qualified host; on an unfit one, assert that every flag
    is a reason (text) and, where the run has a record a user reads (`shown`, for example
    analysis.fidelity.emulator_flags(meta) or a fidelity result's explanation), that it is
    there. Returns the case that applied."""
    if not flags:
        COUNTS["qualified"] += 1
        print(f"[timing] {what}: host qualified during the test; tolerance asserted ({detail})")
        assert within_tolerance, f"{what}: out of tolerance on a host the monitor qualified: {detail}"
        return "qualified"
    COUNTS["flagged"] += 1
    print(f"[timing] {what}: host unfit during the test ({'; '.join(flags)}); flag asserted ({detail})")
    assert all(isinstance(f, str) and len(f) > 10 for f in flags), flags
    if shown is None:
        return "flagged"
    visible = list(shown() if callable(shown) else shown)
    missing = [f for f in flags if not any(f in v or v in f for v in visible)]
    assert not missing, f"{what}: the host flags {missing} do not reach what the user sees: {visible}"
    return "flagged"
