"""Merging a host's fetched shard into the fleet's campaign (pure file logic, no Ansible)."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from machine.errors import UserError
from results import schema
from results.campaign import Campaign
from scenarios.fleet import merge_pack


def shard_pack(tmp: Path, name: str, runs: dict[str, str], scenario_hash: str = "h1", status=None) -> Path:
    """A pack as playbooks/fleet.yml makes it: the outcome file and the shard's campaign."""
    root = tmp / f"{name}-content"
    camp = root / "campaign"
    camp.mkdir(parents=True)
    (camp / schema.CAMPAIGN_FILE).write_text(json.dumps({"scenario_hash": scenario_hash}))
    for run_id, state in runs.items():
        d = camp / (run_id + {"done": "", "failed": schema.FAILED_SUFFIX, "captured": ""}[state])
        d.mkdir()
        if state == "failed":
            (d / schema.ERROR_FILE).write_text("boom\n")
            continue
        (d / schema.META_FILE).write_text(json.dumps({"status": "done" if state == "done" else "captured",
                                                       "run_id": run_id, "host": name}))
        if state == "done":
            (d / schema.METRICS_FILE).write_text("{}")
    (camp / schema.NETWORKS_DIR / "dsl-1").mkdir(parents=True)
    (root / "round-1.status.json").write_text(json.dumps(status or {"rc": 0, "failed": False}))
    pack = tmp / f"{name}.tar.gz"
    with tarfile.open(pack, "w:gz") as tar:
        for item in root.iterdir():
            tar.add(item, arcname=item.name)
    return pack


@pytest.fixture
def campaign(tmp_path) -> Campaign:
    return Campaign.create_or_resume(tmp_path / "merged", {"scenario_hash": "h1"})


def test_complete_runs_are_merged_once_and_unfinished_ones_are_not(tmp_path, campaign):
    expected = {"r1", "r2", "r3", "r4"}
    pack_a = shard_pack(tmp_path, "a", {"r1": "done", "r2": "captured", "r3": "failed", "zz": "done"})
    merged, outcome = merge_pack(campaign, pack_a, expected)
    assert merged == 1 and outcome == {"rc": 0, "failed": False}
    assert campaign.is_done("r1") and not campaign.is_done("r2")
    assert not (campaign.path / "zz").exists()              # not this host's run: never merged
    assert campaign.failed_runs() == [("r3", "boom")]
    assert (campaign.path / schema.NETWORKS_DIR / "dsl-1").is_dir()

    # a second host that ran r1 again (reassigned after a failure) and finished r3 this time
    pack_b = shard_pack(tmp_path, "b", {"r1": "done", "r3": "done"})
    merged, _ = merge_pack(campaign, pack_b, expected)
    assert merged == 1                                       # r3 only: r1 already counts
    assert json.loads((campaign.path / "r1" / schema.META_FILE).read_text())["host"] == "a"
    assert campaign.is_done("r3") and campaign.failed_runs() == []
    assert not list(campaign.path.glob(".merging-*"))


def test_a_shard_of_another_scenario_or_code_is_refused(tmp_path, campaign):
    with pytest.raises(UserError, match="another scenario"):
        merge_pack(campaign, shard_pack(tmp_path, "a", {"r1": "done"}, scenario_hash="h2"), {"r1"})
    assert not campaign.is_done("r1")


def test_a_failed_shard_hands_back_its_outcome_and_what_finished(tmp_path, campaign):
    pack = shard_pack(tmp_path, "a", {"r1": "done"}, status={"rc": -9, "failed": True, "msg": "killed"})
    merged, outcome = merge_pack(campaign, pack, {"r1", "r2"})
    assert merged == 1 and outcome["failed"] and outcome["rc"] == -9
