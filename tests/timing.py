"""The two honest outcomes of a timing assertion.

A timing figure (a rate, an RTT, a release time) is the emulator's to meet only while the
host runs it punctually. The host monitor (machine/host.py), running during the test's own
network, says whether it did (links/hostfit.run_flags):
  - qualified (no flags): the emulator must meet its tolerance: assert it;
  - unfit (flags): the run must carry the flag where its user sees it (a run's meta.json and
    report, a fidelity result's explanation): assert that instead.
Either way something is asserted; the outcome is printed and counted, and the session's
summary line says how many ran in each case.

On the virtual clock (a guest under QEMU's instruction-counted time, machine/clock.py) the
host cannot be late: there is one outcome, the tolerance asserted, and any flag (the guest's
CPU saturated, say) fails the check, because there it is the same on every host.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Callable, Iterable

from links.hostfit import LINE_ITSELF_LATE
from machine import clock

COUNTS = {"qualified": 0, "flagged": 0, "virtual": 0}


def timing_check(what: str, flags: list[str], within_tolerance: bool, detail: str = "",
                 shown: Iterable[str] | Callable[[], Iterable[str]] | None = None) -> str:
    """Assert `within_tolerance` on a qualified host; on an unfit one, assert that every flag
    is a reason (text) that puts the lateness on the host (a delay line late while the host
    and the line's own wake-ups were punctual is the emulator's fault: it fails), and, where the run has a record a user reads (`shown`, for example
    analysis.flow_checks.emulator_flags(meta) or a fidelity result's explanation), that it is
    there. Returns the case that applied."""
    if clock.is_virtual():
        COUNTS["virtual"] += 1
        print(f"[timing] {what}: virtual clock; tolerance asserted ({detail})")
        assert not flags, f"{what}: flagged on the virtual clock, where no host can be late: {flags}"
        assert within_tolerance, f"{what}: out of tolerance on the virtual clock: {detail}"
        return "virtual"
    if not flags:
        COUNTS["qualified"] += 1
        print(f"[timing] {what}: host qualified during the test; tolerance asserted ({detail})")
        assert within_tolerance, f"{what}: out of tolerance on a host the monitor qualified: {detail}"
        return "qualified"
    own = [f for f in flags if LINE_ITSELF_LATE in f]
    assert not own, f"{what}: the emulator was late on a punctual host (not an unfit host): {own}"
    COUNTS["flagged"] += 1
    print(f"[timing] {what}: host unfit during the test ({'; '.join(flags)}); flag asserted ({detail})")
    assert all(isinstance(f, str) and len(f) > 10 for f in flags), flags
    if shown is None:
        return "flagged"
    visible = list(shown() if callable(shown) else shown)
    missing = [f for f in flags if not any(f in v or v in f for v in visible)]
    assert not missing, f"{what}: the host flags {missing} do not reach what the user sees: {visible}"
    return "flagged"


def campaign_flags(out: Path) -> tuple[dict[str, list[str]], list[str]]:
    """A campaign's timing flags as its records hold them: per run directory (finished
    `<run>/` and failed `<run>.failed/` alike, by directory name) what
    analysis.flow_checks.emulator_flags shows for the run; and, of every network it built
    (networks/*/network.json), its path check's: the host's flags over exactly the base RTT
    pings before the runs (`path.host_flags`) and the reason the runs went ahead anyway
    (`path.flags`, per-pair RTTs off on a forced unfit host). The network's whole-life
    `host_flags` are left out: its build and its runs are not the pings' window."""
    from analysis.flow_checks import emulator_flags
    from results import schema
    out = Path(out)
    runs = {m.parent.name: emulator_flags(json.loads(m.read_text())) for m in sorted(out.glob(f"*/{schema.META_FILE}"))
            if not m.parent.name.endswith(schema.PARTIAL_SUFFIX)}
    network: list[str] = []
    for path in sorted(out.glob(f"{schema.NETWORKS_DIR}/*/network.json")):
        rec = json.loads(path.read_text())
        path_check = rec.get("path") or {}
        network += [f for f in (path_check.get("host_flags") or []) + (path_check.get("flags") or [])
                    if f not in network]
    return runs, network


def union(flag_lists: Iterable[list[str]]) -> list[str]:
    """Every flag of several runs once, in order."""
    return list(dict.fromkeys(f for flags in flag_lists for f in flags))


def report_flagged(out: Path) -> list[str]:
    """What a campaign's report.html shows under "Runs the emulator flagged" (as text, not
    HTML; [] when it has no such section)."""
    page, title = (Path(out) / "report.html").read_text(), "<h2>Runs the emulator flagged</h2>"
    if title not in page:
        return []
    return [html.unescape(page.split(title, 1)[1].split("<h2>", 1)[0])]


class Deferred:
    """Timing claims made while a network is up, settled once it is down and its host
    flags are final (the monitor stops with the network): `add` during the test, `settle`
    after the teardown (a fixture's, typically)."""

    def __init__(self) -> None:
        self.claims: list[tuple[str, bool, str]] = []

    def add(self, what: str, within_tolerance: bool, detail: str = "") -> None:
        self.claims.append((what, bool(within_tolerance), detail))

    def settle(self, flags: list[str]) -> None:
        for what, ok, detail in self.claims:
            timing_check(what, flags, ok, detail)


def finished_runs(out: Path, res) -> tuple[dict[str, list[str]], list[tuple[Path, dict, dict]]]:
    """A campaign's runs after `run.py run` (`res`: its completed process): the timing flags
    per run (campaign_flags) and (directory, meta, metrics) of every finished run. A run that
    failed must be one the monitor flagged (a disturbed host may fail a first-flight check;
    a punctual one never): anything else fails the caller, with the runs' errors."""
    from results.schema import ERROR_FILE, FAILED_SUFFIX
    per_run, _ = campaign_flags(out)
    failed = {d.name: (d / ERROR_FILE).read_text() if (d / ERROR_FILE).exists() else "no error.txt"
              for d in Path(out).glob(f"*{FAILED_SUFFIX}")}
    unflagged = {n: e for n, e in failed.items() if not per_run.get(n)}
    assert not unflagged, (unflagged, res.stdout[-2000:], res.stderr[-3000:])
    runs = [(p.parent, json.loads(p.read_text()), json.loads((p.parent / "metrics.json").read_text()))
            for p in Path(out).glob("*/meta.json") if not p.parent.name.endswith(FAILED_SUFFIX)]
    return per_run, runs
