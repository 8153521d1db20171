"""`run --reuse`: a campaign takes another campaign's finished runs only where their
declaration is the same (Scharf's Figs. 13 and 14 share two of Fig. 14's three variants)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from machine.errors import UserError
from results import schema
from results.campaign import Campaign
from results.store import write_json
from scenarios.reuse import LINK_FROM_BYTES, adopt
from scenarios.runner import open_campaign
from scenarios.spec import Scenario, load_scenario
from conftest import ROOT

USERS, SHARE = ROOT / "scenarios/quickstart-web-users.yaml", ROOT / "scenarios/quickstart-web-share.yaml"


def finished_campaign(sc: Scenario, path: Path, tweak=None) -> Campaign:
    """A campaign whose every run is finished: meta.json as the runner writes its declaration,
    a capture-sized file and a small one."""
    campaign = open_campaign(sc, path)
    for run in sc.runs():
        d = campaign.run_dir(run.run_id)
        d.mkdir()
        meta = {"format": schema.FORMAT, "status": schema.DONE, "run_id": run.run_id, "scenario": sc.name,
                "scenario_hash": sc.hash, **sc.declaration(run), "git_rev": "abc123"}
        if tweak:
            tweak(run, meta)
        write_json(d / schema.META_FILE, meta)
        (d / "cap-client.pcap").write_bytes(b"\0" * LINK_FROM_BYTES)
        (d / "lighttpd.log").write_text("small\n")
    return campaign


def test_fig14_takes_fig13s_slow_start_and_quickstart_runs_and_nothing_else(tmp_path):
    fig13, fig14 = load_scenario(USERS), load_scenario(SHARE)
    source = finished_campaign(fig13, tmp_path / "fig13")
    target = open_campaign(fig14, tmp_path / "fig14")
    found = adopt(fig14, target, fig14.runs(), [source.path])

    expected = {r.run_id for r in fig14.runs() if r.variant in ("reno-iw3", "qs-reno")}
    assert set(found.taken) == expected and len(expected) == 8
    assert not any(target.is_done(r.run_id) for r in fig14.runs() if r.variant == "qs-reno-share50")
    assert "reused 8 run(s)" in found.describe() and "abc123" in found.describe()
    for run_id in expected:
        meta = json.loads((target.run_dir(run_id) / schema.META_FILE).read_text())
        assert meta["scenario"] == fig14.name and meta["scenario_hash"] == fig14.hash
        assert meta["reused_from"] == {"campaign": str(source.path), "scenario": fig13.name,
                                       "scenario_hash": fig13.hash}
        src, dst = source.run_dir(run_id), target.run_dir(run_id)
        assert (dst / "cap-client.pcap").stat().st_ino == (src / "cap-client.pcap").stat().st_ino
        assert (dst / "lighttpd.log").stat().st_ino != (src / "lighttpd.log").stat().st_ino
        # the source is left as it was
        assert json.loads((src / schema.META_FILE).read_text())["scenario"] == fig13.name
    # Taking again finds nothing more to take.
    assert adopt(fig14, target, fig14.runs(), [source.path]).taken == {}


def test_a_run_with_another_declaration_is_not_taken_and_says_why(tmp_path):
    fig13, fig14 = load_scenario(USERS), load_scenario(SHARE)

    def longer(run, meta):
        if run.variant == "reno-iw3" and run.sweep[1] == 5:
            meta["workload_params"]["duration_s"] = 300
    source = finished_campaign(fig13, tmp_path / "fig13", longer)
    target = open_campaign(fig14, tmp_path / "fig14")
    found = adopt(fig14, target, fig14.runs(), [source.path])
    odd = "scharf-200ms_users-5_reno-iw3_r01"
    assert odd not in found.taken and found.differing == {odd: ["workload_params"]}
    assert len(found.taken) == 7 and not target.is_done(odd)
    assert f"1 run(s) there differ from this scenario's (e.g. {odd}: workload_params)" in found.describe()


def test_a_source_with_another_shaper_gives_nothing(tmp_path):
    fig13, fig14 = load_scenario(USERS), load_scenario(SHARE)
    source = finished_campaign(fig13, tmp_path / "fig13")
    record = json.loads((source.path / schema.CAMPAIGN_FILE).read_text())
    record["shaper"] = {"kind": "delayline"}
    write_json(source.path / schema.CAMPAIGN_FILE, record)
    target = open_campaign(fig14, tmp_path / "fig14")
    found = adopt(fig14, target, fig14.runs(), [source.path])
    assert found.taken == {} and all(f == ["shaper"] for f in found.differing.values())


def test_a_source_with_another_ecn_mode_gives_nothing_and_one_from_before_the_field_ran_with_accept(tmp_path):
    fig13, fig14 = load_scenario(USERS), load_scenario(SHARE)
    source = finished_campaign(fig13, tmp_path / "fig13")
    record = json.loads((source.path / schema.CAMPAIGN_FILE).read_text())
    record["ecn"] = "on"
    write_json(source.path / schema.CAMPAIGN_FILE, record)
    target = open_campaign(fig14, tmp_path / "fig14")
    found = adopt(fig14, target, fig14.runs(), [source.path])
    assert found.taken == {} and all(f == ["ecn"] for f in found.differing.values())
    del record["ecn"]                       # recorded before startlab set it: the namespace's accept
    write_json(source.path / schema.CAMPAIGN_FILE, record)
    assert adopt(fig14, target, fig14.runs(), [source.path]).taken


def test_reuse_refuses_its_own_campaign_and_a_directory_that_is_none(tmp_path):
    fig14 = load_scenario(SHARE)
    target = open_campaign(fig14, tmp_path / "fig14")
    with pytest.raises(UserError, match="the campaign being run"):
        adopt(fig14, target, fig14.runs(), [target.path])
    with pytest.raises(UserError, match="not a campaign directory"):
        adopt(fig14, target, fig14.runs(), [tmp_path])
