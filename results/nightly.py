"""The layout of a nightly results root: one directory per scenario, one campaign per night.

    <root>/index.html                     the history page (analysis/history_page.py)
    <root>/regressions.json               what regressed in the latest invocation
    <root>/<scenario>/<night>/            a campaign (results/campaign.py), named by its date:
                                          YYYY-MM-DD, or YYYY-MM-DDTHHMM when that day already
                                          has a night (a run by hand, a retry)
    <root>/<scenario>/<night>/nightly.json  that night's verdict against the previous night

Night names sort in time order as plain text ("2025-03-01" < "2025-03-01T1412" <
"2025-03-02"), so the previous night is the greatest finished name below the current one
and no clock or file time has to be trusted. This module is the one place that knows the
layout; the nightly command writes through it and the history page reads through it.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from results import schema
from results.store import read_json_or_none, write_json

INDEX_HTML = "index.html"
REGRESSIONS_JSON = "regressions.json"
VERDICT_FILE = "nightly.json"
UNFIT_FILE = "host-unfit.json"      # nights the host check refused, newest last
NIGHTLY_FORMAT = 1


def new_night(scenario_dir: Path, now: datetime) -> Path:
    """A directory name for tonight's campaign that no earlier night holds.

    The date alone when it is free, else the date with hour and minute, else that with a
    counter, so a second run on the same day never resumes (and so never mixes with) the
    first one's campaign.
    """
    day = now.strftime("%Y-%m-%d")
    candidates = [day, f"{day}T{now.strftime('%H%M')}"]
    candidates += [f"{candidates[1]}-{i}" for i in range(2, 1000)]
    for name in candidates:
        if not (scenario_dir / name).exists():
            return scenario_dir / name
    raise RuntimeError(f"{scenario_dir}: no free night name for {day}")


def finished_nights(scenario_dir: Path) -> list[Path]:
    """Campaigns of a scenario that got as far as their summary, oldest first.

    A night whose process died before it summarised is left out: it holds no figures to
    compare against, and treating it as "previous" would hide a regression.
    """
    if not scenario_dir.is_dir():
        return []
    return sorted((p for p in scenario_dir.iterdir()
                   if (p / schema.CAMPAIGN_FILE).is_file() and (p / schema.SUMMARY_JSON).is_file()),
                  key=lambda p: p.name)


def previous_night(scenario_dir: Path, night: Path) -> Optional[Path]:
    """The latest finished night before `night`, or None for a scenario's first night."""
    earlier = [p for p in finished_nights(scenario_dir) if p.name < night.name]
    return earlier[-1] if earlier else None


def scenario_dirs(root: Path) -> list[Path]:
    """The scenario directories under a nightly root that hold at least one finished night."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and finished_nights(p))


def write_verdict(night: Path, verdict: dict[str, Any]) -> None:
    """Keep a night's comparison with its predecessor beside its campaign, so the history
    page never has to re-read every run of every night to mark old regressions."""
    write_json(night / VERDICT_FILE, {"format": NIGHTLY_FORMAT, **verdict})


def read_verdict(night: Path) -> Optional[dict[str, Any]]:
    """A night's stored verdict, or None where it has none (a campaign run by hand)."""
    return read_json_or_none(night / VERDICT_FILE)


def record_unfit_night(root: Path, entry: dict[str, Any]) -> None:
    """Append a night the host was unfit for (date, reason, figures) to the root's log, so
    the history page shows it as such rather than as failed runs or a gap."""
    nights = unfit_nights(root)
    nights.append(entry)
    write_json(root / UNFIT_FILE, {"format": NIGHTLY_FORMAT, "nights": nights})


def unfit_nights(root: Path) -> list[dict[str, Any]]:
    return list((read_json_or_none(root / UNFIT_FILE) or {}).get("nights") or [])
