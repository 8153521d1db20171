"""Lanes and the shared allowed-congestion-control list: the pure logic (no root)."""
from __future__ import annotations

import pytest

from machine import cpuset, kernel_cc, registry
from machine.errors import UserError
from scenarios.lanes import choose_lanes, deal_runs
from scenarios.spec import Run


def runs(profile: str, n: int) -> list[Run]:
    return [Run(profile, 1000, f"v{i % 3}", i) for i in range(n)]


def test_each_lane_gets_a_share_of_every_profile_so_it_builds_each_network_once():
    todo = runs("a", 7) + runs("b", 4)
    shares = deal_runs(todo, 2)
    assert sorted(r.run_id for s in shares for r in s) == sorted(r.run_id for r in todo)
    for share in shares:
        profiles = [r.profile for r in share]
        assert profiles == sorted(profiles)            # grouped: one network per profile
        assert set(profiles) == {"a", "b"}
    assert sorted(len(s) for s in shares) == [5, 6]


def test_every_variant_is_spread_over_the_lanes_not_confined_to_one():
    todo = [Run("a", 1000, v, rep) for rep in (1, 2) for v in ("x", "y")]   # x1 y1 x2 y2
    todo = [todo[1], todo[3], todo[0], todo[2]]                             # seeded: y1 y2 x1 x2
    shares = deal_runs(todo, 2)
    for share in shares:
        assert sorted(r.variant for r in share) == ["x", "y"]
    assert [r.variant for r in shares[0]] == ["y", "x"]                     # the seeded order kept


def test_deal_keeps_the_seeded_order_within_a_lane():
    todo = runs("a", 6)
    for share in deal_runs(todo, 3):
        assert [r.rep for r in share] == sorted(r.rep for r in share)


def test_lanes_auto_is_one_per_two_cpus_and_more_needs_force():
    assert choose_lanes("auto", 2, False) == 1
    assert choose_lanes("auto", 9, False) == 4
    assert choose_lanes("2", 4, False) == 2
    with pytest.raises(UserError, match="--force"):
        choose_lanes("2", 2, False)
    assert choose_lanes("2", 2, True) == 2
    with pytest.raises(UserError, match="at least one of its own"):
        choose_lanes("3", 2, True)
    with pytest.raises(UserError, match="number or 'auto'"):
        choose_lanes("many", 2, False)
    with pytest.raises(UserError, match="at least 1"):
        choose_lanes("0", 2, False)


def test_cpu_lists_round_trip_and_split_disjointly():
    assert cpuset.parse_cpu_list("0-2,5\n") == [0, 1, 2, 5]
    assert cpuset.format_cpu_list([5, 0, 1]) == "0,1,5"
    assert cpuset.split_cpus([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert cpuset.split_cpus([0, 1], 2) == [[0], [1]]
    with pytest.raises(ValueError):
        cpuset.split_cpus([0, 1], 3)


@pytest.fixture
def fake_allowed(tmp_path, monkeypatch):
    """A private registry and allowed-list file, as two concurrent instances see them."""
    allowed = tmp_path / "allowed"
    allowed.write_text("reno cubic\n")
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    monkeypatch.setattr(registry, "ALLOWED_CC", allowed)
    monkeypatch.setattr(kernel_cc, "ALLOWED", allowed)
    return allowed


def test_overlapping_instances_remove_only_what_no_other_instance_still_needs(fake_allowed):
    a, b = registry.new_instance(), registry.new_instance()
    kernel_cc.allow_congestion_control("bbr", a)
    kernel_cc.allow_congestion_control("bbr", b)          # present because a added it: b needs it too
    kernel_cc.allow_congestion_control("stl_fs", b)
    kernel_cc.allow_congestion_control("cubic", b)        # the machine's own: never recorded
    assert fake_allowed.read_text().split() == ["reno", "cubic", "bbr", "stl_fs"]
    assert b.allowed_cc == ["bbr", "stl_fs"]
    a.remove_all()                                        # b still runs: bbr stays
    assert fake_allowed.read_text().split() == ["reno", "cubic", "bbr", "stl_fs"]
    b.remove_all()
    assert fake_allowed.read_text().split() == ["reno", "cubic"]


def test_instances_ending_in_the_order_they_started_leave_the_list_as_found(fake_allowed):
    a, b = registry.new_instance(), registry.new_instance()
    kernel_cc.allow_congestion_control("bbr", a)
    kernel_cc.allow_congestion_control("stl_fs", b)
    b.remove_all()
    assert fake_allowed.read_text().split() == ["reno", "cubic", "bbr"]
    a.remove_all()
    assert fake_allowed.read_text().split() == ["reno", "cubic"]


def test_a_lane_outside_a_cpuset_of_its_own_is_reported_not_confined():
    from machine.cpuset import confinement
    record = confinement(0, None)                   # this process: not in a lane's cpuset
    assert record["index"] == 0 and record["cpus"] == cpuset.own_cpus()
    assert any(o.get("why") == "the lane has no cpuset of its own" for o in record["outside"])


def test_run_lists_name_only_runs_of_the_scenario(tmp_path):
    from scenarios.lanes import read_run_list
    from scenarios.runner import select_runs
    from scenarios.spec import load_scenario
    sc = load_scenario("smoke")
    ids = [r.run_id for r in sc.runs()]
    listed = tmp_path / "runs"
    listed.write_text(f"{ids[2]}\n\n{ids[0]}\n")
    assert [r.run_id for r in select_runs(sc, read_run_list(listed))] == [ids[0], ids[2]]
    with pytest.raises(UserError, match="does not have: nope"):
        select_runs(sc, {"nope", ids[0]})
    with pytest.raises(UserError, match="--only"):
        read_run_list(tmp_path / "missing")


def test_lane_cpusets_are_removed_waiting_for_their_last_processes(monkeypatch, caplog):
    from types import SimpleNamespace

    from scenarios import lanes
    calls = []

    def remove(path, wait_s):
        calls.append((path, wait_s))
        if path == "busy":
            raise OSError(16, "Device or resource busy")
        return True
    monkeypatch.setattr(lanes.cpuset, "remove", remove)
    lanes._remove_cpusets([SimpleNamespace(path="busy"), SimpleNamespace(path="free")])
    assert calls == [("busy", lanes.CPUSET_REMOVE_S), ("free", lanes.CPUSET_REMOVE_S)]   # one busy does not stop the rest
    assert "cpuset busy not removed" in caplog.text
