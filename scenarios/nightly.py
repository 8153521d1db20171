"""One night: run every configured scenario into a dated campaign, compare each with its
previous night, and rewrite the history page and regressions.json.

A scheduler (the systemd timer or cron entry of playbooks/nightly.yml) calls this once a
night through `run.py nightly --once`. A scenario that cannot run does not stop the others:
it is listed under "failures" in regressions.json, so a night with nothing compared is
never taken for a clean one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from analysis.history import night_verdict, regressions_document, scenario_history
from analysis.history_page import write_index
from analysis.report import write_report
from machine.errors import HostUnfit, UserError
from results import nightly
from results.store import write_json
from scenarios.hostcheck import check_host
from scenarios.nightly_config import NightlyConfig
from scenarios.runner import run_campaign

log = logging.getLogger("startlab.nightly")


@dataclass
class NightOutcome:
    """What one invocation did: tonight's verdicts, what failed, and where it wrote."""
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    index: Optional[Path] = None
    regressions_file: Optional[Path] = None
    host_unfit: Optional[str] = None       # the host check's reason: nothing ran tonight

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return [r for v in self.verdicts for r in v["regressions"]]


def run_night(config: NightlyConfig, now: Optional[datetime] = None, delay_backend: str = "auto") -> NightOutcome:
    """Run the configured scenarios once; every scenario's night shares tonight's date."""
    now = now or datetime.now()
    root = config.root
    outcome = NightOutcome()
    profiles = {p.name: p for entry in config.entries for p in entry.scenario.profiles}
    try:
        host_rec = check_host(list(profiles.values()), allow_unfit=False)
    except HostUnfit as exc:
        # A night on an unfit host would be failed runs or a false regression: record it as
        # what it is, and keep the history page current.
        outcome.host_unfit = str(exc)
        root.mkdir(parents=True, exist_ok=True)
        nightly.record_unfit_night(root, {"night": now.strftime("%Y-%m-%d %H:%M"), "reason": str(exc),
                                          "scenarios": [e.name for e in config.entries]})
        outcome.regressions_file, outcome.index = publish(root, [], [], outcome.host_unfit)
        return outcome
    for entry in config.entries:
        scenario_dir = root / entry.name
        night = nightly.new_night(scenario_dir, now)
        log.info("nightly: %s into %s", entry.name, night)
        try:
            campaign, stats = run_campaign(entry.scenario, night, delay_backend, host_rec=host_rec)
            write_report(campaign.path)
        except UserError as exc:
            outcome.failures.append({"scenario": entry.name, "night": night.name, "run": None, "error": str(exc)})
            log.warning("nightly: %s did not run: %s", entry.name, exc)
            continue
        except Exception as exc:          # one broken scenario must not cost the others their night
            log.exception("nightly: %s failed", entry.name)
            outcome.failures.append({"scenario": entry.name, "night": night.name, "run": None,
                                     "error": f"{type(exc).__name__}: {exc}"})
            continue
        outcome.failures += [{"scenario": entry.name, "night": night.name, **f} for f in stats["failed"]]
        verdict = night_verdict(entry.name, nightly.previous_night(scenario_dir, night), night)
        nightly.write_verdict(night, verdict)
        outcome.verdicts.append(verdict)
    outcome.regressions_file, outcome.index = publish(root, outcome.verdicts, outcome.failures)
    return outcome


def publish(root: Path, verdicts: list[dict[str, Any]], failures: list[dict[str, Any]],
            host_unfit: Optional[str] = None) -> tuple[Path, Path]:
    """Write regressions.json (this invocation's nights) and index.html (every scenario
    with finished nights under root, so history survives a change of the configuration,
    and the nights the host was unfit)."""
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    regressions_file = root / nightly.REGRESSIONS_JSON
    write_json(regressions_file, {**regressions_document(verdicts, failures, generated), "host_unfit": host_unfit})
    histories = [scenario_history(d) for d in nightly.scenario_dirs(root)]
    return regressions_file, write_index(root, histories, generated, nightly.unfit_nights(root))
