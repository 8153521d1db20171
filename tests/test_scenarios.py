"""Scenario files: sizes, validation with file/line/field, overrides and run order."""
import re
from pathlib import Path

import pytest

from machine.errors import UserError
from config.sizes import parse_size, size_label as format_size
from scenarios.spec import apply_overrides, list_scenarios, load_scenario
from conftest import ROOT


@pytest.mark.parametrize("text,value", [("70KB", 70_000), ("2MB", 2_000_000), ("10MB", 10_000_000),
                                        ("1.5MiB", 1_572_864), ("4096", 4096), (4096, 4096), ("1 GB", 10 ** 9)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1KB", "0", "20GB", "3XB"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_size_round_trips_the_papers_sizes():
    for text in ("70KB", "2MB", "10MB", "100KB", "1MB"):
        assert format_size(parse_size(text)) == text


def test_shipped_scenarios_load():
    names = {s["name"]: s for s in list_scenarios()}
    assert "INVALID" not in " ".join(s["description"] for s in names.values())
    table1 = load_scenario("scenarios/blitzstart-table1.yaml")
    assert [p.name for p in table1.profiles] == ["dsl-slow", "dsl-fast", "3g", "lte"]
    assert table1.sizes == [70_000, 2_000_000, 10_000_000]
    assert table1.reps == 30 and table1.baseline == "cubic-iw32"
    assert len(table1.runs()) == 4 * 3 * len(table1.variants) * 30


def test_runs_are_seeded_random_and_grouped_by_profile():
    sc = load_scenario("scenarios/blitzstart-table1.yaml")
    a, b = sc.runs(), sc.runs()
    assert [r.run_id for r in a] == [r.run_id for r in b]
    profiles = [r.profile for r in a]
    assert profiles == sorted(profiles, key=["dsl-slow", "dsl-fast", "3g", "lte"].index)
    first_group = [r.run_id for r in a if r.profile == "dsl-slow"]
    assert first_group != sorted(first_group)          # shuffled within the group
    sc.seed += 1
    assert [r.run_id for r in sc.runs()] != [r.run_id for r in a]
    assert len({r.run_id for r in a}) == len(a)


def test_overrides_narrow_the_matrix_and_change_the_hash():
    sc = load_scenario("scenarios/blitzstart-table1.yaml")
    h = sc.hash
    apply_overrides(sc, "dsl-fast", "2MB", "cubic-iw10,reno-iw3", 5)
    assert [p.name for p in sc.profiles] == ["dsl-fast"] and sc.sizes == [2_000_000]
    assert list(sc.variants) == ["cubic-iw10", "reno-iw3"] and sc.reps == 5
    assert sc.baseline == "cubic-iw10"            # the scenario's baseline was not selected
    assert sc.hash != h and len(sc.runs()) == 10


@pytest.mark.parametrize("args,message", [
    (("dsl-fats", None, None, None), "--profiles: unknown profile 'dsl-fats' (choices: dsl-slow"),
    ((None, "2XB", None, None), "--sizes:"),
    ((None, None, "cubic-iw11", None), "--variants: unknown variant 'cubic-iw11' (choices:"),
    ((None, None, None, 0), "--reps: 0"),
])
def test_bad_overrides_say_what_is_valid(args, message):
    sc = load_scenario("scenarios/smoke.yaml")
    with pytest.raises(UserError) as exc:
        apply_overrides(sc, *args)
    assert message in str(exc.value)


GOOD = """format: 1
name: t
profiles: [dsl-fast]
sizes: [70KB]
workload:
  kind: competing
variants:
  - cubic-iw10
  - name: cubic-iw64
    server: {impl: linux-tcp, cc: cubic, iw: 64}
repetitions: 2
"""


def write(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_inline_variant_definition(tmp_path):
    sc = load_scenario(write(tmp_path, GOOD))
    assert list(sc.variants) == ["cubic-iw10", "cubic-iw64"]
    assert sc.variants["cubic-iw64"].describe()["roles"]["server"]["iw"] == 64
    assert sc.baseline == "cubic-iw10"


@pytest.mark.parametrize("old,new,where", [
    ("profiles: [dsl-fast]", "profiles: [dsl-fats]", "3: profiles: unknown profile 'dsl-fats'"),
    ("sizes: [70KB]", "sizes: [70XB]", "4: sizes: '70XB' is not a size"),
    ("  kind: competing", "  kind: racing", "6: workload.kind: 'racing' is not one of: arrivals, bulk, bursty, competing"),
    ("  - cubic-iw10", "  - cubic-iw11", "7: variants: unknown variant 'cubic-iw11'"),
    ("cc: cubic, iw: 64", "cc: cubik, iw: 64", "10: variants.cubic-iw64.server.cc: 'cubik' is not one of: cubic, reno, bbr"),
    ("cc: cubic, iw: 64", "cc: cubic, iw: 0", "10: variants.cubic-iw64.server.iw: 0 is below the minimum 1"),
    ("cc: cubic, iw: 64", "cc: cubic, iw: 64, hystart: true", "10: variants.cubic-iw64.server.hystart: unknown parameter"),
    ("impl: linux-tcp", "impl: picoquic", "10: variants.cubic-iw64.server.impl: 'picoquic' is not one of"),
    ("repetitions: 2", "repetitions: -2", "11: repetitions: -2 is below the minimum 1"),
    ("repetitions: 2", "repetitions: 2\nbaseline: bbr", "12: baseline: 'bbr' is not one of the scenario's variants"),
    ("repetitions: 2", "repetitons: 2", "11: repetitons: unknown field"),
    ("  kind: competing", "  kind: competing\n  rate_factor: 0.5",
     "7: workload.rate_factor: a change between two fetches needs a first fetch: prior_bytes > 0"),
    ("repetitions: 2", "repetitions: 2\necn: always", "12: ecn: 'always' is not one of: off, on, accept"),
])
def test_bad_scenario_names_file_line_field_and_expectation(tmp_path, old, new, where):
    assert_refused(tmp_path, GOOD, old, new, where)


def assert_refused(tmp_path, good: str, old: str, new: str, where: str) -> None:
    """`good` with `old` replaced by `new` is refused, naming the file and `where`
    (line: field: expectation)."""
    assert old in good
    path = write(tmp_path, good.replace(old, new))
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert f"{path}:{where}" in str(exc.value), str(exc.value)


def test_ecn_reads_yamls_bare_on_and_off_and_is_refused_where_the_workload_cannot_check_it(tmp_path):
    assert load_scenario(write(tmp_path, GOOD)).ecn == "accept"
    assert load_scenario(write(tmp_path, GOOD + "ecn: on\n")).ecn == "on"
    assert load_scenario(write(tmp_path, GOOD + "ecn: off\n")).ecn == "off"
    bulk = (ROOT / "scenarios" / "bulk.yaml").read_text() + "ecn: on\n"
    with pytest.raises(UserError, match="ecn: workload bulk does not read ECN from the wire yet"):
        load_scenario(write(tmp_path, bulk))


SHAPERS = """shapers:
  - {kind: tbf}
  - {kind: delayline, policy: codel, ecn: true}
"""


def test_shapers_put_each_profile_behind_each_queue_as_a_profile_of_its_own(tmp_path):
    text = GOOD.replace("profiles: [dsl-fast]", "profiles: [dsl-fast, lte]").replace(
        "sizes: [70KB]", "sizes: {dsl-fast: [70KB], lte: [2MB]}") + SHAPERS
    sc = load_scenario(write(tmp_path, text))
    names = ["dsl-fast+tbf", "dsl-fast+delayline-codel-ecn", "lte+tbf", "lte+delayline-codel-ecn"]
    assert [p.name for p in sc.profiles] == names
    # Each one the profile it came from, behind its own queue, with that profile's sizes.
    assert {p.rtt_ms for p in sc.profiles[:2]} == {50.0} and sc.profiles[2].down_mbps == 32.0
    assert sc.shaper_for(sc.profiles[1]).describe()["policy"] == "codel"
    assert sc.shaper_for(sc.profiles[2]).describe() == {"kind": "tbf"}
    assert sc.sizes_for("lte+tbf") == [2_000_000] and sc.sizes_for("dsl-fast+tbf") == [70_000]
    assert {r.profile for r in sc.runs()} == set(names) and len(sc.runs()) == 4 * 2 * 2
    assert set(sc.record()["shaper"]) == set(names)
    # campaign.json says which profile and queue each is, for the report's comparison.
    assert sc.record()["behind"]["lte+delayline-codel-ecn"] == {"profile": "lte", "queue": "delayline-codel-ecn"}
    # --profiles names the profiles the file would: each is put behind every queue again,
    # with the sizes the file gave it.
    sc = apply_overrides(sc, "dsl-slow,lte", None, None, None)
    assert [p.name for p in sc.profiles] == ["dsl-slow+tbf", "dsl-slow+delayline-codel-ecn", "lte+tbf",
                                             "lte+delayline-codel-ecn"]
    assert sc.shaper_for(sc.profiles[1]).describe()["ecn"] is True
    assert sc.sizes_for("lte+delayline-codel-ecn") == [2_000_000]
    assert set(sc.record()["behind"]) == {p.name for p in sc.profiles}


@pytest.mark.parametrize("extra,where", [
    (SHAPERS + "shaper: {kind: tbf}\n", "shapers: give either `shaper:` (one queue) or `shapers:` (a list), not both"),
    ("shapers:\n  - {kind: tbf}\n  - {kind: tbf}\n", "shapers: two entries are both tbf"),
    ("shapers:\n  - {kind: tbf}\n  - {kind: fifo}\n", "shapers[1].kind: 'fifo' is not one of"),
    ("shapers: []\n", "shapers: expected a non-empty list"),
])
def test_bad_shapers_name_the_entry(tmp_path, extra, where):
    with pytest.raises(UserError, match=re.escape(where)):
        load_scenario(write(tmp_path, GOOD + extra))


def test_missing_scenario_file_lists_shipped_ones(tmp_path):
    with pytest.raises(UserError) as exc:
        load_scenario(tmp_path / "nope.yaml")
    assert "smoke" in str(exc.value) and "blitzstart-table1" in str(exc.value)


PER_PROFILE = GOOD.replace("profiles: [dsl-fast]", "profiles: [dsl-fast, geo-sat]").replace(
    "sizes: [70KB]", "sizes:\n  dsl-fast: [10KB, 1MB]\n  geo-sat: [1MB]")


def test_sizes_per_profile_shape_the_run_matrix(tmp_path):
    sc = load_scenario(write(tmp_path, PER_PROFILE))
    assert sc.sizes == [10_000, 1_000_000] and sc.sizes_for("geo-sat") == [1_000_000]
    cells = {(r.profile, r.size_bytes) for r in sc.runs()}
    assert cells == {("dsl-fast", 10_000), ("dsl-fast", 1_000_000), ("geo-sat", 1_000_000)}
    assert len(sc.runs()) == 3 * 2 * 2                 # cells × variants × repetitions
    assert sc.record()["profile_sizes"] == {"dsl-fast": [10_000, 1_000_000], "geo-sat": [1_000_000]}
    narrowed = apply_overrides(load_scenario(write(tmp_path, PER_PROFILE)), "geo-sat", None, None, None)
    assert narrowed.record()["profile_sizes"] == {"geo-sat": [1_000_000]}
    every = apply_overrides(load_scenario(write(tmp_path, PER_PROFILE)), None, "70KB", None, None)
    assert {(r.profile, r.size_bytes) for r in every.runs()} == {("dsl-fast", 70_000), ("geo-sat", 70_000)}


@pytest.mark.parametrize("old,new,where", [
    ("  geo-sat: [1MB]", "  geo-sat: [1XB]", "6: sizes.geo-sat: '1XB' is not a size"),
    ("  geo-sat: [1MB]", "  lte: [1MB]", "6: sizes.lte: unknown field (known: dsl-fast, geo-sat)"),
    ("  geo-sat: [1MB]\n", "", "4: sizes: no sizes for profile(s) geo-sat"),
])
def test_bad_per_profile_sizes_name_the_profile(tmp_path, old, new, where):
    assert_refused(tmp_path, PER_PROFILE, old, new, where)


SWEPT = GOOD.replace("repetitions: 2", """repetitions: 2
sweep:
  param: long_load
  values: [0.2, 0.5, 0.9]""").replace("  kind: competing", "  kind: competing\n  long_streams: 4")


def test_sweep_is_a_dimension_of_the_run_matrix(tmp_path):
    sc = load_scenario(write(tmp_path, SWEPT))
    assert sc.sweep.param == "long_load" and sc.sweep.values == [0.2, 0.5, 0.9]
    runs = sc.runs()
    assert len(runs) == 3 * 2 * 2                      # sweep values × variants × repetitions
    assert len({r.run_id for r in runs}) == len(runs)
    run = next(r for r in runs if r.sweep == ("long_load", 0.5) and r.variant == "cubic-iw64" and r.rep == 2)
    assert run.run_id == "dsl-fast_70KB_long_load-0.5_cubic-iw64_r02"
    params = sc.params_for(run)
    assert params["long_load"] == 0.5 and params["long_streams"] == 4 and sc.workload_params["long_load"] == 0
    unswept = load_scenario(write(tmp_path, GOOD))
    assert unswept.sweep is None and all(r.sweep is None for r in unswept.runs())
    assert unswept.runs()[0].run_id.count("_") == 3   # run ids without a sweep are unchanged


@pytest.mark.parametrize("old,new,where", [
    ("param: long_load", "param: long_lode", "14: sweep.param: 'long_lode' is not one of: fill_fraction"),
    ("param: long_load", "param: long_flow", "14: sweep.param: 'long_flow' is not one of"),
    ("values: [0.2, 0.5, 0.9]", "values: [0.2, 1.5]", "15: sweep.values: 1.5 is outside long_load's range 0 … 1"),
    ("values: [0.2, 0.5, 0.9]", "values: [0.2, high]", "15: sweep.values: expected numbers, got 'high'"),
    ("values: [0.2, 0.5, 0.9]", "values: [0.2, 0.2]", "15: sweep.values: a value appears twice"),
    ("values: [0.2, 0.5, 0.9]", "values: []", "15: sweep.values: expected a non-empty list"),
    ("param: long_load\n  values: [0.2, 0.5, 0.9]", "param: long_streams\n  values: [2, 2.5]",
     "15: sweep.values: long_streams takes whole numbers, got 2.5"),
    ("  values: [0.2, 0.5, 0.9]", "  values: [0.2]\n  step: 1", "16: sweep.step: unknown field"),
    ("long_streams: 4", "long_streams: 0", "7: workload.long_streams: 0 is below the minimum 1"),
])
def test_bad_sweep_names_file_line_field_and_expectation(tmp_path, old, new, where):
    assert_refused(tmp_path, SWEPT, old, new, where)


def test_every_workload_has_its_analysis_and_every_analysis_its_workload():
    """The two registries are derived from the modules themselves: a workload module without
    its analysis module (or the reverse) is caught here, not by a campaign."""
    from analysis.workloads import registry as analyses
    from hosts.workloads import registry as workloads
    assert set(workloads()) == set(analyses()), (set(workloads()) ^ set(analyses()))
    assert {"competing", "bulk", "web", "bursty", "arrivals", "websessions"} <= set(workloads())
    for name, w in workloads().items():
        assert w.name == name and analyses()[name].name == name


def test_shapers_are_declared_by_their_own_classes(tmp_path):
    """A scenario's `shaper:` section and `fidelity --shaper` both read the shaper kinds'
    own declarations (links/shapers/, one module per kind): a bad policy names its choices."""
    from links import shapers
    assert shapers.cli_choices() == ["cake", "codel", "delayline", "delayline:droptail", "delayline:pushout",
                                     "delayline:red", "delayline:codel", "delayline:pie", "delayline:fq_codel", "fq_codel",
                                     "htb", "pie", "tbf"]
    assert shapers.from_cli("delayline:red").describe() == {"kind": "delayline", "policy": "red", "low_dscp": [14]}
    assert shapers.from_cli("tbf").describe() == {"kind": "tbf"}
    base = (Path(__file__).resolve().parent.parent / "scenarios" / "smoke.yaml").read_text()
    path = tmp_path / "s.yaml"
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: pushout\n  low_dscp: [12, 14]\n")
    assert load_scenario(path).shaper.describe() == {"kind": "delayline", "policy": "pushout", "low_dscp": [12, 14]}
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: fq\n")
    with pytest.raises(UserError, match="policy: 'fq' is not one of: droptail, pushout, red, codel, pie"):
        load_scenario(path)
    # CoDel in the delay line: RFC 8289's parameters unless given, and ECN marking on request.
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: codel\n  target_ms: 2\n  ecn: true\n")
    assert load_scenario(path).shaper.describe() == {"kind": "delayline", "policy": "codel", "low_dscp": [14],
                                                     "target_ms": 2.0, "interval_ms": 100.0, "ecn": True}
    assert shapers.from_cli("delayline:codel").describe()["interval_ms"] == 100.0
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: codel\n  target_ms: 200\n")
    with pytest.raises(UserError, match="interval_ms"):
        load_scenario(path)
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: red\n  ecn: true\n")
    with pytest.raises(UserError, match="ecn does not apply to policy red"):
        load_scenario(path)
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: pie\n  interval_ms: 50\n")
    with pytest.raises(UserError, match="interval_ms does not apply to policy pie"):
        load_scenario(path)
    # FQ-CoDel in the delay line: CoDel's times for every flow.
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: fq_codel\n  ecn: true\n")
    assert load_scenario(path).shaper.describe() == {"kind": "delayline", "policy": "fq_codel", "low_dscp": [14],
                                                     "target_ms": 5.0, "interval_ms": 100.0, "ecn": True}
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: fq_codel\n  tupdate_ms: 15\n")
    with pytest.raises(UserError, match="tupdate_ms does not apply to policy fq_codel"):
        load_scenario(path)
    path.write_text(base + "shaper:\n  kind: delayline\n  policy: pie\n  ecn: true\n")
    assert load_scenario(path).shaper.describe() == {"kind": "delayline", "policy": "pie", "low_dscp": [14],
                                                     "target_ms": 15.0, "tupdate_ms": 15.0, "ecn": True}
    path.write_text(base + "shaper:\n  kind: tbf\n  policy: red\n")
    with pytest.raises(UserError, match="policy"):
        load_scenario(path)


def test_a_trace_or_lossy_profile_gets_the_delay_lines_queue_and_tbf_is_refused(tmp_path):
    """tbf knows only a fixed rate: a trace link (or random loss) defaults to the delay line's
    queue, the scenario's other profiles keep tbf, and naming tbf is an error at the shaper's
    line."""
    from links import shapers
    from links.profiles import LinkProfile, get_profile
    base = (Path(__file__).resolve().parent.parent / "scenarios" / "smoke.yaml").read_text()
    path = tmp_path / "s.yaml"
    trace_profiles = base.replace(base[base.index("profiles:"):].splitlines()[0],
                                  "profiles: [pantheon-mexico-cellular, dsl-fast]")
    path.write_text(trace_profiles)
    sc = load_scenario(path)
    # Each profile its own default: the trace link the delay line's queue, dsl-fast the kernel's tbf.
    assert [sc.shaper_for(p).describe()["kind"] for p in sc.profiles] == ["delayline", "tbf"]
    assert sc.record()["shaper"] == {"pantheon-mexico-cellular": sc.shaper_for(sc.profiles[0]).describe(),
                                     "dsl-fast": {"kind": "tbf"}}
    path.write_text(base)                  # one shaper for all: one description, as before
    assert load_scenario(path).record()["shaper"] == {"kind": "tbf"}
    path.write_text(trace_profiles + "shaper:\n  kind: tbf\n")
    with pytest.raises(UserError, match=r"shaper.kind: profile pantheon-mexico-cellular is a trace link .* delayline"):
        load_scenario(path)
    assert shapers.default_for([get_profile("dsl-fast")]).describe() == {"kind": "tbf"}
    lossy = LinkProfile(name="lossy", down_mbps=10, up_mbps=10, rtt_ms=20, buffer_pkts=10, loss_down=0.01)
    assert "lossy is a lossy link" in shapers.refusal(shapers.from_cli("htb"), lossy)
    assert shapers.refusal(shapers.from_cli("delayline"), lossy) is None
