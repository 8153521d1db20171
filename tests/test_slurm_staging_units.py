"""Units of `run --slurm --node-dir`: the job script that carries its own scenario and batches,
and the merge of staged runs (complete ones only, never twice). The staging through a real
cluster's srun is in test_slurm_run.py."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import ROOT  # noqa: E402
from results import schema
from results.campaign import Campaign
from scenarios import slurm, staging
from scenarios.lanes import deal_runs
from scenarios.runner import open_campaign
from scenarios.spec import load_scenario

SMOKE = ROOT / "scenarios" / "smoke.yaml"
# Stands in for run.py in the script: prints what the task would run with, as JSON.
RECORDER = """import json, sys
args = sys.argv[1:]
only = args[args.index("--only") + 1]
scenario = args[1]
print(json.dumps({"argv": args, "only": open(only).read().split(), "scenario": open(scenario).read()}))
"""


def campaign_of(tmp_path: Path) -> Campaign:
    return open_campaign(load_scenario(str(SMOKE)), tmp_path / "campaign")


def write_run(parent: Path, run_id: str, marker: str) -> Path:
    d = parent / run_id
    d.mkdir(parents=True)
    (d / schema.META_FILE).write_text(json.dumps({"status": schema.DONE, "marker": marker}))
    return d


def test_a_node_dir_script_carries_the_scenario_and_its_batch_and_needs_no_shared_campaign(tmp_path, monkeypatch):
    campaign = campaign_of(tmp_path)
    (campaign.path / slurm.SLURM_DIR).mkdir()
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    monkeypatch.setattr(slurm, "RUN_PY", recorder)
    sc = load_scenario(str(SMOKE))
    shares = deal_runs(sc.runs(), 2)
    node_dir = tmp_path / "node"
    sub = slurm.Submission(clock="virtual", scenario=SMOKE, worker_args=["--reps=2"], node_dir=str(node_dir))
    script = slurm._script(campaign, sub, shares)
    text = script.read_text()
    assert str(campaign.path) not in text, "the task must not need the campaign directory"
    # The script runs anywhere: copied away from the campaign, as sbatch ships it to a node.
    shipped = tmp_path / "elsewhere.sh"
    shipped.write_text(text)
    done = subprocess.run(["sh", str(shipped)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    root = Path(staging.node_root(str(node_dir), campaign))
    log = root / slurm.SLURM_DIR / "task-1.log"
    got = json.loads(log.read_text())                  # the task's output goes to its log on the node
    assert got["only"] == [r.run_id for r in shares[1]]
    assert got["scenario"] == SMOKE.read_text()
    argv = got["argv"]
    assert argv[argv.index("--out") + 1] == str(root / staging.CAMPAIGN)
    assert argv[argv.index("--task") + 1] == "1" and argv[argv.index("--clock") + 1] == "virtual"
    assert "--reps=2" in argv
    bad = subprocess.run(["sh", str(shipped)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "7"},
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "no batch 7" in (root / slurm.SLURM_DIR / "task-7.log").read_text()


def test_a_shared_campaign_script_reads_its_batch_beside_the_campaign(tmp_path):
    campaign = campaign_of(tmp_path)
    (campaign.path / slurm.SLURM_DIR).mkdir()
    sub = slurm.Submission(clock="real", scenario=SMOKE, worker_args=[])
    text = slurm._script(campaign, sub, [[r] for r in load_scenario(str(SMOKE)).runs()]).read_text()
    assert f"{campaign.path / slurm.SLURM_DIR}/task-\"$SLURM_ARRAY_TASK_ID\".runs" in text
    assert f"--out {campaign.path}" in text and "cat >" not in text


def test_staged_runs_merge_once_complete_ones_only(tmp_path):
    campaign = campaign_of(tmp_path)
    write_run(campaign.path, "held", "campaign")
    staged = tmp_path / "staged"
    node = staged / staging.CAMPAIGN
    write_run(node, "new", "node")
    write_run(node, "held", "node")
    (node / "failed-one.failed").mkdir()
    (node / "failed-one.failed" / "error.txt").write_text("boom")
    (node / "held.failed").mkdir()              # an older failure of a run the campaign holds
    (node / slurm.SLURM_DIR).mkdir()
    (node / slurm.SLURM_DIR / "task-0.stats.json").write_text("{}")
    (node / schema.NETWORKS_DIR / "dsl-fast-task0").mkdir(parents=True)
    (node / schema.CAMPAIGN_FILE).write_text("{}")  # the node's own record: not the campaign's
    (staged / slurm.SLURM_DIR).mkdir()
    (staged / slurm.SLURM_DIR / "task-0.log").write_text("log")
    merged, held = staging.merge(campaign, staged, slurm.SLURM_DIR)
    assert (merged, held) == (1, 1)
    assert json.loads((campaign.path / "new" / schema.META_FILE).read_text())["marker"] == "node"
    assert json.loads((campaign.path / "held" / schema.META_FILE).read_text())["marker"] == "campaign"
    assert (campaign.path / "failed-one.failed" / "error.txt").is_file()
    assert not (campaign.path / "held.failed").exists()
    assert (campaign.path / slurm.SLURM_DIR / "task-0.stats.json").is_file()
    assert (campaign.path / slurm.SLURM_DIR / "task-0.log").read_text() == "log"
    assert (campaign.path / schema.NETWORKS_DIR / "dsl-fast-task0").is_dir()
    assert json.loads((campaign.path / schema.CAMPAIGN_FILE).read_text())["scenario"] == "smoke"


def test_the_nodes_to_stage_from_are_kept_in_the_campaign_until_staged(tmp_path):
    campaign = campaign_of(tmp_path)
    (campaign.path / slurm.SLURM_DIR).mkdir()
    assert staging.pending(campaign, slurm.SLURM_DIR) == {}
    staging.remember(campaign, slurm.SLURM_DIR, {"n1": "/scratch/a"})
    staging.remember(campaign, slurm.SLURM_DIR, {"n2": "/scratch/a"})
    again = Campaign.open(campaign.path)              # a later command reads what this one wrote
    assert staging.pending(again, slurm.SLURM_DIR) == {"n1": "/scratch/a", "n2": "/scratch/a"}
    staging._forget(again, slurm.SLURM_DIR, "n1")
    assert staging.pending(campaign, slurm.SLURM_DIR) == {"n2": "/scratch/a"}


def test_a_node_root_is_one_per_campaign_and_the_same_every_command(tmp_path):
    a = campaign_of(tmp_path)
    assert staging.node_root("/scratch/", a) == staging.node_root("/scratch", Campaign.open(a.path))
    b = open_campaign(load_scenario(str(SMOKE)), tmp_path / "other" / "campaign")
    assert staging.node_root("/scratch", a) != staging.node_root("/scratch", b)
