"""A campaign's host check: calibrate once before any network, judge every profile the
campaign uses, refuse an unfit host unless asked, and record what was measured.

The calibration (machine/host.py) is written to the campaign as `host.json`; lane workers
adopt it instead of measuring again, so every run of a campaign is tuned from the same
figures. Each run's own monitor figures and flags are in its meta.json (`host`).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from machine import host
from machine.errors import HostUnfit
from machine.host import HostTiming
from results.store import write_json
from links.hostfit import ProfileVerdict, verdict
from links.profiles import LinkProfile

HOST_FILE = "host.json"
ALLOW_FLAG = "--unfit-host"


# How long a cluster node's calibration serves the next tasks of the same job on it.
NODE_REUSE_S = 600.0


def check_host(profiles: list[LinkProfile], allow_unfit: bool) -> dict:
    """Calibrate this host and judge `profiles`; HostUnfit (one line, before any network is
    built) when one is unfit and `allow_unfit` is not set. Returns the record for host.json."""
    return _judge(profiles, host.calibrate(), allow_unfit, datetime.now(timezone.utc))


def _judge(profiles: list[LinkProfile], timing: HostTiming, allow_unfit: bool, when: datetime) -> dict:
    host.use(timing)
    verdicts = {p.name: verdict(p, timing) for p in profiles}
    unfit = [v for v in verdicts.values() if not v.ok]
    if unfit and not allow_unfit:
        raise HostUnfit(unfit_message(unfit, timing))
    return {"calibrated": when.isoformat(timespec="seconds"),
            "calibration": timing.as_record(), "verdicts": {k: v.as_record() for k, v in verdicts.items()},
            "unfit_profiles": [v.profile for v in unfit], "forced": bool(unfit) and allow_unfit,
            "allow_unfit": allow_unfit}


def check_node(profiles: list[LinkProfile], allow_unfit: bool, kept: Path) -> dict:
    """A cluster task's host check. The tasks of one job that follow each other on a node
    share its calibration while it is under NODE_REUSE_S old: the first measures it (6 s)
    and keeps it at `kept` (one file per job and node), the next ones judge their profiles
    on it again, and their runs say so (`adopted`). Later, or on another node, a task
    measures its own."""
    if kept.is_file():
        rec = json.loads(kept.read_text())
        when = datetime.fromisoformat(rec["calibrated"])
        if 0 <= (datetime.now(timezone.utc) - when).total_seconds() <= NODE_REUSE_S:
            adopted = _judge(profiles, HostTiming.from_record(rec["calibration"]), allow_unfit, when)
            return {**adopted, "adopted": kept.name}
    rec = check_host(profiles, allow_unfit)
    write_json(kept, rec)
    return rec


def unfit_message(unfit: list[ProfileVerdict], timing: HostTiming) -> str:
    names = ", ".join(v.profile for v in unfit)
    return (f"this host cannot emulate {names} within the fidelity tolerances now: {unfit[0].reason} "
            f"(measured: {timing.describe()}). Try again on a quieter host, or run anyway with "
            f"{ALLOW_FLAG} (every run is flagged)")


def record(campaign_path: Path, record: dict) -> None:
    write_json(Path(campaign_path) / HOST_FILE, record)


def adopt(campaign_path: Path) -> dict | None:
    """A lane worker's calibration: the campaign's, measured by the parent."""
    path = Path(campaign_path) / HOST_FILE
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    host.use(HostTiming.from_record(rec["calibration"]))
    return rec


def run_record(rec: dict | None, profile: str) -> dict:
    """What every run's meta.json keeps of the campaign's host check."""
    if rec is None:
        return {}
    return {"calibration": {k: v for k, v in rec["calibration"].items() if k != "histogram"},
            "verdict": rec["verdicts"].get(profile), "forced": rec.get("forced", False),
            **({"adopted": rec["adopted"]} if rec.get("adopted") else {})}
