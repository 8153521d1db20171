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
from typing import Any, Callable, Optional

from analysis.history import night_verdict, regressions_document, scenario_history
from analysis.history_page import write_index
from analysis.report import write_report
from machine.errors import HostUnfit, UserError
from results import nightly
from results.store import write_json
from scenarios.hostcheck import check_host
from scenarios.nightly_config import NightlyConfig, NightlyEntry
from scenarios.runner import run_campaign

log = logging.getLogger("startlab.nightly")

# Runs one scenario's campaign into tonight's directory: (campaign directory, run stats).
# The virtual clock's runs each campaign in a guest (cli/virtual.py).
CampaignRunner = Callable[[NightlyEntry, Path], tuple[Path, dict]]


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


def run_night(config: NightlyConfig, now: Optional[datetime] = None, delay_backend: str = "auto",
              runner: Optional[CampaignRunner] = None) -> NightOutcome:
    """Run the configured scenarios once; every scenario's night shares tonight's date.
    Without a `runner`, on this host's real clock, after the host check; a runner (the
    virtual clock's) needs no host check: its timers do not depend on the host."""
    now = now or datetime.now()
    root = config.root
    outcome = NightOutcome()
    if runner is None:
        try:
            runner = _real_clock_runner(config, delay_backend)
        except HostUnfit as exc:
            # A night on an unfit host would be failed runs or a false regression: record it
            # as what it is, and keep the history page current.
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
            campaign, stats = runner(entry, night)
            write_report(campaign)
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


def _real_clock_runner(config: NightlyConfig, delay_backend: str) -> CampaignRunner:
    """Each campaign on this host, once the host check found it fit for every profile of
    the night (HostUnfit otherwise)."""
    profiles = {p.name: p for entry in config.entries for p in entry.scenario.profiles}
    host_rec = check_host(list(profiles.values()), allow_unfit=False)

    def run(entry: NightlyEntry, night: Path) -> tuple[Path, dict]:
        campaign, stats = run_campaign(entry.scenario, night, delay_backend, host_rec=host_rec)
        return campaign.path, stats
    return run


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
