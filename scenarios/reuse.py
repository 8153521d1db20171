"""Runs a campaign takes from another campaign instead of emulating them again.

Two scenarios often share runs: Scharf's Figs. 13 and 14 both replay the same Web users
with slow start and with Quick-Start at qs_thresh 0.9, and only Fig. 14's third variant is
new. A run is taken (`run --reuse DIR`) only when everything that decides its traffic is
the same: profile, object size, variant and its definition, workload and its parameters
for that run (seed and sweep value included), repetition, the bottleneck's shaper, the end
hosts' ECN mode and any variant the workload names. Which scenario file asked for it is not part of that.

A taken run is a copy (captures hard-linked, being large and never rewritten) whose
meta.json names this campaign's scenario and keeps where it came from in `reused_from`;
its provenance (startlab revision, kernel, host) stays the one it ran with.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine.errors import UserError
from results import schema
from results.campaign import Campaign
from results.store import read_json_or_none, write_json
from scenarios.spec import Run, Scenario

# Files at least this large are hard-linked (captures); smaller ones are copied, so that
# rewriting one in either campaign can never change the other's.
LINK_FROM_BYTES = 1 << 20

# Besides each run's declaration (Scenario.declaration), what decides what a campaign's runs
# emulated.
CAMPAIGN_FIELDS = ("shaper", "workload_variants", "ecn")
# What a campaign recorded before a field existed ran with: a new namespace's own ECN mode
# (net.ipv4.tcp_ecn 2, accept), which the network now sets explicitly.
RECORDED_BEFORE = {"ecn": "accept"}


def _plain(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=str))


def differences(declared: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The fields where a finished run's meta.json differs from a declaration."""
    return [k for k in declared if _plain(meta.get(k)) != declared[k]]


@dataclass
class Reused:
    """What --reuse found: the runs taken, the runs a source had with another declaration,
    and the startlab revisions the taken runs ran with."""
    taken: dict[str, str] = field(default_factory=dict)            # run id -> source campaign
    differing: dict[str, list[str]] = field(default_factory=dict)  # run id -> fields that differ
    revisions: set[str] = field(default_factory=set)

    def describe(self) -> str:
        text = f"reused {len(self.taken)} run(s)"
        if self.taken:
            text += f" from {', '.join(sorted(set(self.taken.values())))}"
            text += f" (run with startlab {', '.join(sorted(self.revisions))})"
        if self.differing:
            first, fields = next(iter(self.differing.items()))
            text += (f"; {len(self.differing)} run(s) there differ from this scenario's "
                     f"(e.g. {first}: {', '.join(fields)}) and run here")
        return text


def _copy_run(src: Path, dst: Path) -> None:
    """`src` into `dst`: large files linked when the file system allows, the rest copied."""
    def place(a: str, b: str) -> None:
        if os.path.getsize(a) >= LINK_FROM_BYTES:
            try:
                os.link(a, b)
                return
            except OSError:
                pass
        shutil.copy2(a, b)
    shutil.copytree(src, dst, copy_function=place)


def adopt(sc: Scenario, campaign: Campaign, runs: list[Run], sources: list[Path]) -> Reused:
    """Take into `campaign` every run of `runs` it lacks that a source campaign finished with
    the same declaration. A source of another shaper or workload variants gives nothing."""
    found = Reused()
    want = {r.run_id: r for r in runs if not campaign.is_done(r.run_id)}
    record = _plain(sc.record())
    for path in sources:
        source = Campaign.open(path)
        if source.path == campaign.path:
            raise UserError(f"--reuse {path}: that is the campaign being run")
        fields = [k for k in CAMPAIGN_FIELDS if _plain(source.record.get(k, RECORDED_BEFORE.get(k))) != record.get(k)]
        for run_id, run in list(want.items()):
            if not source.is_done(run_id):
                continue
            meta = read_json_or_none(source.run_dir(run_id) / schema.META_FILE) or {}
            differ = fields + differences(_plain(sc.declaration(run)), meta)
            if differ:
                found.differing[run_id] = differ
                continue
            partial = campaign.path / f"{run_id}{schema.PARTIAL_SUFFIX}"
            failed = campaign.path / f"{run_id}{schema.FAILED_SUFFIX}"
            for stale in (partial, campaign.run_dir(run_id), failed):    # earlier attempts here
                shutil.rmtree(stale, ignore_errors=True)
            _copy_run(source.run_dir(run_id), partial)
            meta["reused_from"] = {"campaign": str(source.path), "scenario": meta.get("scenario"),
                                   "scenario_hash": meta.get("scenario_hash")}
            meta.update(scenario=sc.name, scenario_hash=sc.hash)
            write_json(partial / schema.META_FILE, meta)
            campaign.finish_run(run_id)
            found.taken[run_id] = str(source.path)
            found.differing.pop(run_id, None)
            found.revisions.add(str(meta.get("git_rev")))
            del want[run_id]
    return found
