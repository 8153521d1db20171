"""Nightly runs without emulation: night naming, the verdict against the previous night
(exactly compare's regressions), the history over the nights, the page, regressions.json,
the configuration and the command's exit status — on synthetic campaigns."""
import json
from datetime import datetime
from pathlib import Path

import pytest

from analysis.history import night_verdict, scenario_history
from analysis.runs import workload_analysis
from analysis.summary import write_summary
from cli.main import main
from machine.errors import HostUnfit, UserError
from results import nightly
from results.campaign import Campaign
from scenarios import nightly as nightly_run
from scenarios.nightly_config import load_nightly_config
from test_compare import shift_fct
from test_report import make_campaign

SMALL = {"variants": ("slowstart", "blitz"), "sizes": (70_000,), "profiles": ("dsl",), "reps": 4}


def make_night(scenario_dir: Path, name: str, slower: dict[str, float] | None = None, **kw) -> Path:
    """A finished night: a synthetic campaign with its summary; `slower` adds seconds to
    every run of a variant."""
    night = make_campaign(scenario_dir / name, **{**SMALL, **kw})
    for variant, seconds in (slower or {}).items():
        shift_fct(night, variant, seconds)
    campaign = Campaign.open(night)
    write_summary(night, campaign.record, campaign.records(), workload_analysis("competing"))
    return night


# ------------------------------------------------------------------ layout

def test_night_names_sort_in_time_and_never_collide(tmp_path):
    at = datetime(2025, 3, 1, 2, 30)
    first = nightly.new_night(tmp_path, at)
    assert first.name == "2025-03-01"
    first.mkdir()
    second = nightly.new_night(tmp_path, datetime(2025, 3, 1, 14, 5))
    assert second.name == "2025-03-01T1405"
    second.mkdir()
    assert nightly.new_night(tmp_path, datetime(2025, 3, 1, 14, 5)).name == "2025-03-01T1405-2"
    assert sorted(["2025-03-02", second.name, first.name]) == [first.name, second.name, "2025-03-02"]


def test_previous_night_skips_unfinished_ones(tmp_path):
    a = make_night(tmp_path, "2025-03-01")
    (tmp_path / "2025-03-02").mkdir()                       # died before its campaign.json
    b = make_campaign(tmp_path / "2025-03-03", **SMALL)     # died before its summary
    c = make_night(tmp_path, "2025-03-04")
    assert nightly.finished_nights(tmp_path) == [a, c]
    assert nightly.previous_night(tmp_path, c) == a
    assert nightly.previous_night(tmp_path, b) == a
    assert nightly.previous_night(tmp_path, a) is None


# ------------------------------------------------------------------ verdicts

def test_first_night_compares_nothing(tmp_path):
    night = make_night(tmp_path, "2025-03-01")
    verdict = night_verdict("smoke", None, night)
    assert verdict["regressions"] == [] and verdict["rows"] == [] and verdict["previous"] is None


def test_unchanged_night_has_no_regression(tmp_path):
    old = make_night(tmp_path, "2025-03-01")
    new = make_night(tmp_path, "2025-03-02")
    verdict = night_verdict("smoke", old, new)
    assert len(verdict["rows"]) == 2 and verdict["regressions"] == []


def test_a_slower_cell_is_a_regression_with_both_nights_figures(tmp_path):
    old = make_night(tmp_path, "2025-03-01")
    new = make_night(tmp_path, "2025-03-02", slower={"blitz": 0.5})
    verdict = night_verdict("smoke", old, new)
    [reg] = verdict["regressions"]
    assert (reg["scenario"], reg["profile"], reg["size_bytes"], reg["variant"], reg["metric"]) == \
        ("smoke", "dsl", 70_000, "blitz", "fct_s")
    assert reg["size"] == "70KB" and reg["sweep"] is None and reg["nights"] == ["2025-03-01", "2025-03-02"]
    prev, cur = reg["previous"], reg["current"]
    assert prev["night"] == "2025-03-01" and cur["night"] == "2025-03-02"
    assert prev["runs"] == cur["runs"] == 4
    assert abs(cur["mean"] - prev["mean"] - 0.5) < 1e-9 and abs(reg["diff"] - 0.5) < 1e-9
    for side in (prev, cur):
        assert side["ci_low"] < side["mean"] < side["ci_high"]
    # the same mean as the night's summary says
    summary = json.loads((new / "summary.json").read_text())
    [row] = [r for r in summary["rows"] if r["variant"] == "blitz"]
    assert abs(row["fct_mean_s"] - cur["mean"]) < 1e-12 and abs(row["fct_ci_low_s"] - cur["ci_low"]) < 1e-12


def test_regressions_are_compares_not_a_threshold_of_our_own(tmp_path):
    """Significant but within one RTT (50 ms): compare says no regression, so neither do we;
    faster is never one."""
    old = make_night(tmp_path, "2025-03-01")
    within = make_night(tmp_path, "2025-03-02", slower={"blitz": 0.02})
    faster = make_night(tmp_path, "2025-03-03", slower={"blitz": -0.5})
    assert night_verdict("s", old, within)["regressions"] == []
    assert night_verdict("s", old, faster)["regressions"] == []


def test_more_losses_regress_the_loss_figure(tmp_path):
    old = make_night(tmp_path, "2025-03-01")
    new = make_campaign(tmp_path / "2025-03-02", **SMALL)
    for path in new.glob("*-slowstart-*/metrics.json"):
        data = json.loads(path.read_text())
        data["short"]["lost_pkts"] += 30
        path.write_text(json.dumps(data))
    verdict = night_verdict("s", old, new)
    assert [(r["variant"], r["metric"], r["label"]) for r in verdict["regressions"]] == \
        [("slowstart", "lost_pkts", "loss")]


# ------------------------------------------------------------------ history, page, regressions.json

def test_history_marks_only_the_regressed_night(tmp_path):
    root = tmp_path / "root"
    nights = [make_night(root / "smoke", "2025-03-01"), make_night(root / "smoke", "2025-03-02"),
              make_night(root / "smoke", "2025-03-03", slower={"blitz": 0.5})]
    for previous, night in zip([None, *nights], nights):
        nightly.write_verdict(night, night_verdict("smoke", previous, night))
    history = scenario_history(root / "smoke")
    assert history.nights == ["2025-03-01", "2025-03-02", "2025-03-03"]
    assert history.metric_label == "FCT" and history.metric_unit == "s"
    by_variant = {s.variant: s for s in history.series}
    assert set(by_variant) == {"slowstart", "blitz"}
    assert [p.regressed for p in by_variant["blitz"].points] == [False, False, True]
    assert not any(p.regressed for p in by_variant["slowstart"].points)
    blitz = by_variant["blitz"].points
    assert abs(blitz[2].mean - blitz[1].mean - 0.5) < 1e-9 and blitz[0].ci_low < blitz[0].mean


def test_a_history_over_nights_before_and_after_the_tidy_summary_is_one_history(tmp_path):
    """The first night's summary.json as format 3 wrote it (one wide row per cell): read
    through the upgrade, its points join the format-4 nights' alike."""
    from analysis.summary import columns_of, summary_rows
    root = tmp_path / "root"
    nights = [make_night(root / "smoke", "2025-03-01"), make_night(root / "smoke", "2025-03-02")]
    analysis = workload_analysis("competing")
    campaign = Campaign.open(nights[0])
    old = {"format": 3, "campaign": campaign.record, "columns": columns_of(analysis),
           "rows": summary_rows(campaign.record, campaign.records(), analysis)}
    (nights[0] / "summary.json").write_text(json.dumps(old))
    for previous, night in zip([None, *nights], nights):
        nightly.write_verdict(night, night_verdict("smoke", previous, night))
    history = scenario_history(root / "smoke")
    blitz = {s.variant: s for s in history.series}["blitz"].points
    assert [p.night for p in blitz] == ["2025-03-01", "2025-03-02"]
    assert blitz[0].mean == blitz[1].mean == old["rows"][1]["fct_mean_s"]
    assert blitz[0].ci_low == blitz[1].ci_low is not None


def test_publish_writes_the_page_and_regressions_json(tmp_path):
    root = tmp_path / "root"
    old = make_night(root / "smoke", "2025-03-01")
    new = make_night(root / "smoke", "2025-03-02", slower={"blitz": 0.5})
    quiet = make_night(root / "other", "2025-03-02")
    verdicts = [night_verdict("smoke", old, new), night_verdict("other", None, quiet)]
    for v in verdicts:
        nightly.write_verdict(Path(v["campaign"]), v)
    failure = {"scenario": "third", "night": "2025-03-02", "run": None, "error": "not root"}
    reg_file, index = nightly_run.publish(root, verdicts, [failure])
    doc = json.loads(reg_file.read_text())
    assert [(r["scenario"], r["variant"], r["metric"]) for r in doc["regressions"]] == [("smoke", "blitz", "fct_s")]
    assert [n["scenario"] for n in doc["nights"]] == ["smoke", "other"] and doc["failures"] == [failure]
    page = index.read_text()
    assert page.count("data:image/png;base64,") == 2          # one figure per scenario, embedded
    assert "1 regressed" in page and "blitz" in page and "first night" in page
    assert (root / "smoke" / "history.png").stat().st_size > 0


def test_page_of_an_empty_root(tmp_path):
    _, index = nightly_run.publish(tmp_path, [], [])
    assert "No finished nights yet" in index.read_text()


# ------------------------------------------------------------------ configuration

def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_default_configuration_loads():
    config = load_nightly_config()
    assert config.entries and config.root.name == "nightly"


def test_configuration_overrides_and_inline_variants(tmp_path):
    cfg = write_config(tmp_path / "n.yaml", """
format: 1
root: /somewhere/nightly
scenarios:
  - scenario: smoke
    profiles: [dsl-fast]
    sizes: [70KB, 200KB]
    reps: 3
    variants:
      - cubic-iw10
      - name: reno-iw3
        server: {impl: linux-tcp, cc: reno, iw: 1}
  - scenario: scenarios/smoke.yaml
    name: smoke-again
""")
    config = load_nightly_config(cfg)
    assert config.root == Path("/somewhere/nightly")
    first, second = config.entries
    sc = first.scenario
    assert first.name == "smoke" and sc.sizes == [70_000, 200_000] and sc.reps == 3
    assert sc.variants["reno-iw3"].parts["server"].params["iw"] == 1
    assert sc.baseline == "cubic-iw10"
    assert second.name == "smoke-again" and second.scenario.variants["reno-iw3"].parts["server"].params["iw"] == 3
    assert first.scenario.hash != second.scenario.hash      # a changed variant is another campaign
    assert load_nightly_config(cfg, root=tmp_path / "r").root == (tmp_path / "r").resolve()


@pytest.mark.parametrize("entry,message", [
    ("  - scenario: smoke\n    rep: 3\n", ":5: scenarios[0].rep: unknown field"),
    ("  - scenario: smoke\n    profiles: [nowhere]\n", ":5: scenarios[0].profiles: unknown profile 'nowhere'"),
    ("  - scenario: smoke\n    variants: [cubic-iw99]\n", "scenarios[0].variants: unknown variant 'cubic-iw99'"),
    ("  - scenario: smoke\n    variants: [{name: x, server: {impl: linux-tcp, cc: cubik}}]\n", "cc: 'cubik'"),
    ("  - scenario: smoke\n  - scenario: smoke\n", "'smoke' runs twice"),
    ("  - scenario: no-such-scenario\n", "no such scenario file"),
])
def test_configuration_errors_name_file_line_and_field(tmp_path, entry, message):
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nroot: r\nscenarios:\n" + entry)
    with pytest.raises(UserError) as err:
        load_nightly_config(cfg)
    assert message in str(err.value), str(err.value)


# ------------------------------------------------------------------ the command

@pytest.fixture
def fake_campaigns(monkeypatch):
    """run_campaign replaced by synthetic campaigns: `slower` says what tonight's runs add."""
    slower: dict[str, float] = {}

    def fake_run_campaign(sc, out, delay_backend="auto", host_rec=None):
        night = make_campaign(Path(out), **SMALL)
        for variant, seconds in slower.items():
            shift_fct(night, variant, seconds)
        return Campaign.open(night), {"failed": []}

    monkeypatch.setattr(nightly_run, "run_campaign", fake_run_campaign)
    monkeypatch.setattr(nightly_run, "check_host", lambda profiles, allow_unfit: {"forced": False})
    return slower


def test_a_night_on_an_unfit_host_is_recorded_as_such(tmp_path, monkeypatch, capsys):
    """The host check refuses: nothing runs, the night is 'host unfit' on the history page
    and in regressions.json, and the command has its own exit code (4), not 1 or 3."""
    def unfit(profiles, allow_unfit):
        raise HostUnfit("this host cannot emulate dsl-fast within the fidelity tolerances now: timer wake-ups "
                        "p99 3357 µs")
    ran = []
    monkeypatch.setattr(nightly_run, "check_host", unfit)
    monkeypatch.setattr(nightly_run, "run_campaign", lambda *a, **k: ran.append(a))
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    root = tmp_path / "r"
    assert main(["nightly", "--once", "--config", str(cfg), "--root", str(root)]) == 4
    assert ran == []
    err = capsys.readouterr().err
    assert "host unfit tonight" in err and "3357" in err
    assert "3357" in json.loads((root / "regressions.json").read_text())["host_unfit"]
    page = (root / "index.html").read_text()
    assert "Nights the host was unfit" in page and "3357" in page
    assert len(json.loads((root / "host-unfit.json").read_text())["nights"]) == 1


def test_nightly_command_exit_status_follows_regressions(tmp_path, fake_campaigns, capsys, monkeypatch):
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    root = tmp_path / "root"
    assert main(["nightly", "--once", "--config", str(cfg), "--root", str(root)]) == 0
    assert "first night" in capsys.readouterr().out
    fake_campaigns["blitz"] = 0.5
    assert main(["nightly", "--once", "--config", str(cfg), "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "regressed: smoke dsl 70KB blitz: FCT" in err
    nights = nightly.finished_nights(root / "smoke")
    assert len(nights) == 2 and nights[1].name.startswith(nights[0].name + "T")
    doc = json.loads((root / "regressions.json").read_text())
    assert [(r["variant"], r["nights"]) for r in doc["regressions"]] == [("blitz", [n.name for n in nights])]
    assert "blitz" in (root / "index.html").read_text()


def test_nightly_command_reports_a_scenario_that_could_not_run(tmp_path, monkeypatch, capsys):
    def refuse(sc, out, delay_backend="auto", host_rec=None):
        raise UserError("needs root")
    monkeypatch.setattr(nightly_run, "run_campaign", refuse)
    monkeypatch.setattr(nightly_run, "check_host", lambda profiles, allow_unfit: {"forced": False})
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    assert main(["nightly", "--once", "--config", str(cfg), "--root", str(tmp_path / "root")]) == 3
    assert "failed: smoke" in capsys.readouterr().err
    doc = json.loads((tmp_path / "root" / "regressions.json").read_text())
    assert doc["regressions"] == [] and doc["failures"][0]["error"] == "needs root"


def test_nightly_needs_once(capsys):
    assert main(["nightly"]) == 2
    assert "--once" in capsys.readouterr().err


def test_the_old_default_nightly_root_is_refused_with_the_move_to_make(tmp_path, monkeypatch):
    """Before format 3 the default history lived in results/nightly (results/ is a code
    package): with only the old one there, loading says where it moved and how."""
    import scenarios.nightly_config as nc
    monkeypatch.setattr(nc, "_from_repo", lambda p: tmp_path / p)
    (tmp_path / "results" / "nightly" / "smoke").mkdir(parents=True)
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    with pytest.raises(UserError, match="moved from results/nightly to campaigns/nightly: mv .* \\(or pass --root"):
        load_nightly_config(cfg)
    assert load_nightly_config(cfg, tmp_path / "results" / "nightly").root == tmp_path / "results" / "nightly"
    (tmp_path / "campaigns" / "nightly").mkdir(parents=True)
    assert load_nightly_config(cfg).root == tmp_path / "campaigns" / "nightly"


def test_a_night_with_a_runner_skips_the_host_check_and_compares_its_campaigns(tmp_path, monkeypatch):
    """The virtual clock's runner (a guest per scenario) needs no host check: the night runs
    on a host the check would refuse, and its campaigns are compared as any night's."""
    def unfit(profiles, allow_unfit):
        raise HostUnfit("timer wake-ups p99 3357 µs")
    monkeypatch.setattr(nightly_run, "check_host", unfit)
    calls = []

    def runner(entry, night):
        calls.append((entry.name, night))
        make_campaign(night, **SMALL)
        if len(calls) == 2:
            shift_fct(night, "blitz", 0.5)
        return night, {"failed": []}
    cfg = load_nightly_config(write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n"),
                              tmp_path / "root")
    first = nightly_run.run_night(cfg, now=datetime(2026, 1, 1, 3), runner=runner)
    second = nightly_run.run_night(cfg, now=datetime(2026, 1, 2, 3), runner=runner)
    assert first.host_unfit is None and [n.parent.name for _, n in calls] == ["smoke", "smoke"]
    assert first.verdicts[0]["note"] == "first night: nothing to compare with"
    assert [r["variant"] for r in second.regressions] == ["blitz"]


def test_the_guest_part_of_a_virtual_night_is_refused_on_the_host(tmp_path, capsys):
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    assert main(["nightly", "--once", "--config", str(cfg), "--entry", "smoke", "--out", str(tmp_path / "c")]) == 2
    assert "the virtual clock's guest's part" in capsys.readouterr().err


def test_a_virtual_night_needs_its_configuration_where_the_guest_sees_it(tmp_path, capsys):
    cfg = write_config(tmp_path / "n.yaml", "format: 1\nscenarios:\n  - scenario: smoke\n")
    assert main(["nightly", "--once", "--config", str(cfg), "--root", str(tmp_path / "r"), "--clock", "virtual"]) == 2
    assert "the nightly configuration must be inside the checkout" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
