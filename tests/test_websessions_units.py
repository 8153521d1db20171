"""The web sessions model (hosts/workloads/ns2web.py) and plan: deterministic per seed,
the paper's distributions (ParetoII sizes with the configured scale and tail, exponential
gaps, objects per page), per-pair RTTs from the access delays, and the scenario checks."""
from __future__ import annotations

import numpy as np
import pytest

from hosts.arrivals_client import read_schedule
from hosts.workloads import ns2web, websessions
from hosts.workloads.base import WorkloadError
from hosts.workloads.websessions import WORKLOAD, pair_rtts, plan
from machine.errors import UserError
from scenarios.spec import load_scenario

MODEL = ns2web.WebModel()


def params(**over) -> dict:
    p = {k: v.default for k, v in WORKLOAD.params.items()}
    p.update(over)
    return p


def test_sessions_are_deterministic_per_seed():
    a = ns2web.sessions(MODEL, 5, 100.0, 3)
    assert a == ns2web.sessions(MODEL, 5, 100.0, 3) and a != ns2web.sessions(MODEL, 5, 100.0, 4)
    assert [f.t for f in a] == sorted(f.t for f in a)


def test_object_sizes_follow_the_pareto_ii_model():
    rng = np.random.default_rng(1)
    model = ns2web.WebModel(max_object_pkts=10 ** 6)
    x = ns2web.object_sizes(model, rng, 200_000)
    assert x.min() >= 1 and x.max() <= 10 ** 6
    # Median of ceil(Lomax(scale 0.8, shape 1.002)): the continuous median is 0.8 (2^(1/α) − 1) ≈ 0.8 → 1 packet.
    assert np.median(x) == 1
    # The tail index of the sizes above 100 packets is the shape (Hill estimate, ± 5 %).
    assert abs(ns2web.lomax_tail_index(x, 100.0) - 1.002) < 0.05
    # The capped mean the model reports is what sampling gives (to sampling error).
    capped = ns2web.WebModel(max_object_pkts=200)
    y = ns2web.object_sizes(capped, rng, 200_000)
    assert abs(y.mean() - capped.capped_mean_pkts()) < 0.03 * capped.capped_mean_pkts()


def test_pages_objects_and_gaps_have_the_configured_means():
    model = ns2web.WebModel(pages=400)
    fs = ns2web.sessions(model, 3, 0.0, 5)
    pages = {(f.session, f.page) for f in fs}
    assert len(pages) == 1200
    assert abs(len(fs) / len(pages) - 10.0) < 0.3                   # objects per page, mean 10
    first = {}
    for f in fs:
        first.setdefault((f.session, f.page), f.t)
    gaps = [first[(s, p + 1)] - first[(s, p)] for s in range(3) for p in range(399)]
    assert abs(np.mean(gaps) - 0.8) < 0.8 * 0.1                      # exponential inter-page, mean 0.8 s
    assert all(f.obj == 0 or f.t >= first[(f.session, f.page)] for f in fs)


def test_sessions_arrive_within_the_span():
    fs = ns2web.sessions(ns2web.WebModel(pages=1), 200, 50.0, 9)
    starts = sorted({f.t for f in fs if f.obj == 0})
    assert 0 <= starts[0] and starts[-1] < 50.0
    assert abs(np.mean(starts) - 25.0) < 3.0


def test_access_delays_and_pair_rtts():
    d = ns2web.access_delays_ms(4000, 12.0, 110.0, 2)
    assert max(d) <= 110.0 and abs(np.mean(d) - 12.0) < 0.8
    p = params(hosts=4, reverse_hosts=2, core_rtt_ms=80.0, access_mean_ms=12.0, access_max_ms=110.0, rtt_seed=7)
    rtts = pair_rtts(p)
    assert sorted(rtts) == [(i, i) for i in range(1, 7)]
    assert all(rtt >= 80.0 for rtt in rtts.values()) and len(set(rtts.values())) == 6
    assert rtts == pair_rtts(p)
    assert WORKLOAD.hosts(p).pairs == 6 and WORKLOAD.hosts(p).rtts_ms == rtts


def test_uniform_access_delays_give_a_narrow_range_of_rtts():
    d = ns2web.access_delays_ms(4000, 0.0, 10.0, 2, "uniform")
    assert 0.0 <= min(d) < 0.1 and 9.9 < max(d) <= 10.0 and abs(np.mean(d) - 5.0) < 0.3
    p = params(hosts=6, reverse_hosts=3, core_rtt_ms=80.0, access_dist="uniform", access_max_ms=10.0, rtt_seed=3)
    assert WORKLOAD.check(p) is None
    rtts = pair_rtts(p).values()
    assert all(80.0 <= r <= 120.0 for r in rtts) and max(rtts) - min(rtts) > 10.0
    with pytest.raises(ValueError, match="choose from exponential, uniform"):
        ns2web.access_delays_ms(3, 1.0, 10.0, 1, "pareto")


def test_plan_is_paired_across_variants_and_new_per_repetition():
    p = params(sessions=4, duration_s=40.0)
    a = plan(p, 1)
    assert a == plan(p, 1) and a["down"] != plan(p, 2)["down"]
    assert set(a) == {"down", "up"} and all(f.t < 40.0 for fs in a.values() for f in fs)
    assert set(plan(params(sessions=4, reverse_fraction=0.0), 1)) == {"down"}


def test_schedule_entries_may_name_their_object():
    assert read_schedule([0.5, [1.0, "/b"]], "/a") == ([0.5, 1.0], ["/a", "/b"])
    with pytest.raises(ValueError):
        read_schedule([0.5], "")


def test_bad_access_delays_are_refused_with_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nprofiles: [qs-10m]\nworkload:\n  kind: websessions\n  access_mean_ms: 50\n"
                    "  access_max_ms: 20\nvariants: [reno-iw3]\n")
    with pytest.raises(UserError) as e:
        load_scenario(path)
    assert "bad.yaml" in str(e.value) and "access_mean_ms" in str(e.value)


MIX = """name: mix
profiles: [qs-10m]
workload:
  kind: {kind}
variants:
  - reno-iw3
  - name: half
    server: {{impl: quickstart, base_cc: reno, iw: 3, request: link}}
    client: {{impl: quickstart}}
    mix: {{fraction: 0.5, other: {other}}}
"""


def test_a_mix_variant_is_parsed_and_checked(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text(MIX.format(kind="websessions", other="reno-iw3"))
    sc = load_scenario(path)
    assert sc.variants["half"].mix.fraction == 0.5 and sc.variants["half"].mix.other == "reno-iw3"
    assert sc.variants["half"].describe()["mix"] == {"fraction": 0.5, "other": "reno-iw3"}
    path.write_text(MIX.format(kind="websessions", other="nosuch"))
    with pytest.raises(UserError, match="mix.other 'nosuch'"):
        load_scenario(path)
    path.write_text(MIX.format(kind="bulk", other="reno-iw3"))
    with pytest.raises(UserError, match="cannot split"):
        load_scenario(path)


def test_the_quickstart_load_scenarios_load():
    for name in ("quickstart-load", "quickstart-mix", "quickstart-perconn", "quickstart-target"):
        sc = load_scenario(f"scenarios/{name}.yaml")
        assert sc.workload.name == "websessions"
        needs = sc.host_needs()
        assert needs.rtts_ms and len(needs.rtts_ms) == needs.pairs


def test_ping_figures_take_the_exact_summary_over_rounded_samples():
    from hosts import ping
    out = ("64 bytes from 10.0.0.2: icmp_seq=1 ttl=62 time=135 ms\n"
           "64 bytes from 10.0.0.2: icmp_seq=2 ttl=62 time=135 ms\n\n"
           "rtt min/avg/max/mdev = 135.104/135.203/135.302/0.099 ms\n")
    fig = ping.rtt_figures(ping.samples(out), 135.2, ping.summary(out))
    assert ping.samples(out) == [135.0, 135.0]           # ping prints whole ms from 100 ms on
    assert fig["rtt_mean_ms"] == 135.203 and fig["rtt_min_ms"] == 135.104 and fig["rtt_samples"] == 2
    assert ping.rtt_matches(135.203, 135.2) and not ping.rtt_matches(136.6, 135.2)


class _Host:
    """A stand-in host whose `ss` lists a TIME-WAIT socket for its first `busy` polls."""
    def __init__(self, name: str, busy: int):
        self.name, self.busy, self.asked = name, busy, []

    def cmd(self, command: str) -> str:
        self.asked.append(command)
        self.busy -= 1
        return "TIME-WAIT 0 0 10.1.0.1:20093 10.2.0.1:21\n" if self.busy >= 0 else "\n"


def test_a_run_waits_for_the_previous_runs_ftp_ports(monkeypatch):
    monkeypatch.setattr(websessions.time, "sleep", lambda s: None)
    hosts = [_Host("stl01cl1", 2), _Host("stl01cl2", 0)]
    websessions.wait_ports_free(hosts, timeout_s=60)
    assert len(hosts[0].asked) == 3 and "sport >= :20000 and sport <= :32767" in hosts[0].asked[0]
    with pytest.raises(WorkloadError, match=r"stl01cl1: TIME-WAIT .*10.1.0.1:20093"):
        websessions.wait_ports_free([_Host("stl01cl1", 10 ** 6)], timeout_s=0)
