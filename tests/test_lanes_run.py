"""Root integration: `run --lanes 2 --force` runs two confined testbeds into one campaign."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from machine import cpuset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]
ENV = {**os.environ, "STARTLAB_NO_REEXEC": "1"}


def sample_lanes(samples: list[dict], stop: threading.Event) -> None:
    """What the cgroups say while the lanes run: each lane cpuset's CPUs and its processes' CPUs."""
    while not stop.is_set():
        where = cpuset.hierarchy()
        snapshot = {}
        for path in cpuset.lane_cpusets():
            group = cpuset.Cpuset(path, [], where.version)
            try:
                members = group.members()
                snapshot[path.name] = {"cpus": group.effective_cpus(),
                                       "members": {pid: cpuset.allowed_cpus(pid) for pid in members}}
            except OSError:
                continue
        if snapshot:
            samples.append(snapshot)
        stop.wait(0.5)


def test_two_lanes_share_one_campaign_and_never_share_a_cpu(tmp_path):
    if len(cpuset.own_cpus()) < 2:
        pytest.skip("two lanes need two CPUs")
    out = tmp_path / "campaign"
    samples: list[dict] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_lanes, args=(samples, stop))
    sampler.start()
    try:
        # --unfit-host: confinement is checked, not timing; on an unfit host the runs are flagged.
        res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", "scenarios/smoke.yaml", "--lanes", "2",
                              "--force", "--out", str(out), "--json", "--unfit-host"], capture_output=True, text=True,
                             env=ENV, timeout=900, cwd=ROOT)
    finally:
        stop.set()
        sampler.join()
    assert res.returncode == 0, res.stderr[-3000:]
    host = json.loads((out / "host.json").read_text())
    print(f"host calibration: {'unfit, run flagged (--unfit-host)' if host['forced'] else 'fit'}")
    figures = json.loads(res.stdout)
    lanes = figures["run_stats"]["lanes"]
    assert [lane["lane"] for lane in lanes] == [0, 1] and all(lane["exit"] == 0 for lane in lanes)
    assert not set(lanes[0]["cpus"]) & set(lanes[1]["cpus"])

    # every run of the scenario, exactly once, in one campaign, from both lanes
    metas = [json.loads((p / "meta.json").read_text()) for p in out.iterdir() if (p / "meta.json").exists()]
    assert sorted(m["run_id"] for m in metas) == sorted(
        f"dsl-fast_200KB_{v}_r{r:02d}" for v in ("cubic-iw10", "reno-iw3") for r in (1, 2))
    assert all(m["status"] == "done" for m in metas)
    by_lane: dict[int, list[dict]] = {}
    for m in metas:
        by_lane.setdefault(m["lane"]["index"], []).append(m["lane"])
    assert sorted(by_lane) == [0, 1]
    for k, records in by_lane.items():
        for rec in records:       # read back by the run itself: its processes, its cgroup, its CPUs
            assert rec["outside"] == [] and rec["processes"] >= 8, rec
            assert cpuset.LANE_PREFIX in rec["cpuset"] and rec["cpus"] == lanes[k]["cpus"], rec
    assert len({rec["cpuset"] for recs in by_lane.values() for rec in recs}) == 2
    assert not list(out.glob("*.partial")) and not list(out.glob("*.failed"))

    # and as sampled from outside while they ran: two cpusets, disjoint CPUs, every member
    # process confined to its own lane's CPUs
    both = [s for s in samples if len(s) == 2]
    assert both, f"never saw both lanes running ({len(samples)} samples)"
    for snapshot in both:
        (a, ga), (b, gb) = snapshot.items()
        assert ga["cpus"] and gb["cpus"] and not set(ga["cpus"]) & set(gb["cpus"]), snapshot
        for group in (ga, gb):
            for pid, allowed in group["members"].items():
                assert not allowed or set(allowed) <= set(group["cpus"]), (pid, allowed, group["cpus"])
    assert max(len(g["members"]) for s in both for g in s.values()) >= 8
