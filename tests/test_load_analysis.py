"""The arrivals and web sessions analyses from their per-run metrics onwards (pure logic):
summary rows with the baseline comparison at each sweep point, the display, and the
figures against the swept load (written, non-empty)."""
from __future__ import annotations

import pytest

from analysis import flows, plots, summary
from analysis.workloads import arrivals, websessions
from results.campaign import RunRecord

CAMPAIGN = {"profiles": ["p"], "variants": ["ss", "js"], "baseline": "ss"}


def _rec(variant: str, rep: int, point: float, metrics: dict, param: str) -> RunRecord:
    return RunRecord(run_id=f"{variant}_{point}_r{rep}", profile="p", size_bytes=None, variant=variant, rep=rep,
                     sweep={param: point}, rtt_s=0.064, rate_bps=5e6, mtu=1500, meta={}, metrics=metrics)


def _arrivals_metrics(duration: float, drops: float) -> dict:
    d = {"duration_mean_s": duration, "drop_rate": drops, "utilisation": 0.5,
         "lateness_syn_ms": {"p50": 0.1, "p99": 0.4, "max": 0.9}}
    return {"duration_mean_s": duration, "drop_rate": drops, "directions": {"down": d, "up": d}}


def test_arrivals_summary_compares_at_each_interval_and_plots(tmp_path):
    recs = [_rec(v, rep, ia, _arrivals_metrics(base * (1 + 0.01 * rep), drops), "interarrival_s")
            for ia in (0.5, 2.0) for rep in (1, 2, 3)
            for v, base, drops in (("ss", 1.0 + ia, 0.01), ("js", 0.8 + ia, 0.05))]
    rows = summary.summary_rows(CAMPAIGN, recs, arrivals.ANALYSIS)
    assert [(r["sweep_value"], r["variant"]) for r in rows] == [(0.5, "ss"), (0.5, "js"), (2.0, "ss"), (2.0, "js")]
    js = rows[1]
    assert js["duration_diff_s"] == pytest.approx(-0.2 * 1.02) and js["drop_rate_mean"] == pytest.approx(0.05)
    assert js["duration_down_mean_s"] == pytest.approx(js["duration_mean_s"])
    assert len(arrivals.ANALYSIS.display({**js, "profile": "p"})) == len(arrivals.ANALYSIS.display_headers)
    assert all(r["rate_bps"] == 5e6 and r["rtt_s"] == 0.064 for r in rows)      # the report's path label
    out = arrivals.ANALYSIS.plots(tmp_path, CAMPAIGN, recs, rows, plots.variant_colours(["ss", "js"]))
    assert len(out) == 1 and out[0].path.stat().st_size > 10_000


def _ws_metrics(util: float, drops: float, approved, groups: dict) -> dict:
    fwd = {"count": 100, "cut": 0, "duration_mean_s": 0.5, "utilisation": util, "drop_rate": drops,
           "qs_approved_fraction": approved, "qs_failure_fraction": 0.0 if approved is not None else None,
           "qs_bandwidth_bps": 1e5 if approved else 0.0, "qs_requested": 100 if approved is not None else 0,
           "groups": groups,
           "connections": [{"size_bytes": 1448 * k, "duration_s": 0.1 * k} for k in (1, 5, 20)]}
    return {"utilisation": util, "drop_rate": drops, "duration_mean_s": 0.5, "qs_approved_fraction": approved,
            "qs_failure_fraction": fwd["qs_failure_fraction"], "qs_bandwidth_bps": fwd["qs_bandwidth_bps"],
            "directions": {"down": fwd}}


def test_websessions_summary_keeps_the_mixed_halves_apart_and_plots(tmp_path):
    campaign = {"profiles": ["p"], "variants": ["ss", "qs", "half"], "baseline": "ss"}
    recs = []
    for n in (50, 100):
        for rep in (1, 2):
            recs.append(_rec("ss", rep, n, _ws_metrics(0.3 * n / 50, 0.01 * rep, None, {"under": {"drop_rate": 0.01}}),
                             "sessions"))
            recs.append(_rec("qs", rep, n, _ws_metrics(0.31 * n / 50, 0.012 * rep, 0.5, {"under": {"drop_rate": 0.012}}),
                             "sessions"))
            recs.append(_rec("half", rep, n, _ws_metrics(0.3 * n / 50, 0.011 * rep, 0.6,
                                                         {"under": {"drop_rate": 0.02}, "other": {"drop_rate": 0.004}}),
                             "sessions"))
    rows = summary.summary_rows(campaign, recs, websessions.ANALYSIS)
    half = [r for r in rows if r["variant"] == "half" and r["sweep_value"] == 50][0]
    assert half["drop_rate_under_mean"] == pytest.approx(0.02) and half["drop_rate_other_mean"] == pytest.approx(0.004)
    assert half["utilisation_diff"] == pytest.approx(0.0) and half["qs_approved_fraction_mean"] == pytest.approx(0.6)
    assert all(r["rate_bps"] == 5e6 for r in rows)
    ss = [r for r in rows if r["variant"] == "ss"][0]
    assert ss["qs_approved_fraction_mean"] is None
    # Paired by repetition: qs's utilisation is 0.01 above ss's in both pairs (an exact
    # interval), its drop rate 0.002 and 0.004 above (t with 1 degree of freedom).
    qs = [r for r in rows if r["variant"] == "qs" and r["sweep_value"] == 50][0]
    assert qs["utilisation_paired_diff"] == pytest.approx(0.01)
    assert (qs["utilisation_paired_ci_low"], qs["utilisation_paired_ci_high"]) == pytest.approx((0.01, 0.01))
    assert qs["drop_rate_paired_diff"] == pytest.approx(0.003)
    # sd of (0.002, 0.004) is 0.002/√2, over √2 pairs: 0.001; t(0.975, 1) = 12.706
    assert qs["drop_rate_paired_ci_high"] - 0.003 == pytest.approx(12.706 * 0.001, rel=1e-3)
    assert websessions.ANALYSIS.display({**qs, "profile": "p"})[-1].startswith("+1.00 [+1.00, +1.00] pt, +0.30 [")
    assert len(websessions.ANALYSIS.display({**half, "profile": "p"})) == len(websessions.ANALYSIS.display_headers)
    out = websessions.ANALYSIS.plots(tmp_path, campaign, recs, rows, plots.variant_colours(["ss", "qs", "half"]))
    assert {p.kind for p in out} == {"websessions_load", "websessions_perconn"}
    assert all(p.path.stat().st_size > 10_000 for p in out)


def test_quick_start_bandwidth_is_a_share_of_the_link_only_where_requested():
    qs = _rec("qs", 1, 50, _ws_metrics(0.3, 0.01, 0.5, {}), "sessions")
    ss = _rec("ss", 1, 50, _ws_metrics(0.3, 0.01, None, {}), "sessions")
    assert websessions._qs_share(qs) == pytest.approx(1e5 / 5e6)
    assert websessions._qs_share(ss) is None


def test_first_ack_and_last_byte_per_connection():
    import numpy as np
    # conn 0: data at 1.0 (seq 100, 1000 B) and 1.1, an ACK of the SYN only (ack 100) at 1.05, the data's ACK at
    # 1.2; conn 1: data, never acknowledged.
    pk = {"conn": np.array([0, 0, 0, 0, 1]), "dir": np.array([1, 0, 1, 0, 1]),
          "payload": np.array([1000, 0, 1000, 0, 500]), "seq": np.array([100, 7, 1100, 7, 50]),
          "ack": np.array([0, 100, 0, 1100, 0]), "flags": np.array([0x10, 0x10, 0x10, 0x10, 0x10]),
          "ts": np.array([1.0, 1.05, 1.1, 1.2, 2.0]), "newbytes": np.array([1000, 0, 1000, 0, 500])}
    t_ack = flows.first_ack_times(pk, 3)
    assert t_ack[0] == 1.2 and np.isinf(t_ack[1]) and np.isinf(t_ack[2])
    last = websessions.last_new_byte_times(pk, 3)
    assert last[0] == 1.1 and last[1] == 2.0 and np.isnan(last[2])
