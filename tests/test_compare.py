"""Nightly comparison of two campaigns: a regression is a significant rise beyond one RTT."""
import json

import pytest

from analysis.compare import compare, compare_campaigns
from machine.errors import UserError
from test_report import make_campaign


def shift_fct(root, variant: str, seconds: float) -> None:
    for metrics_path in root.glob(f"*-{variant}-*/metrics.json"):
        data = json.loads(metrics_path.read_text())
        data["short"]["fct_s"] += seconds
        metrics_path.write_text(json.dumps(data))


def test_identical_campaigns_do_not_regress(tmp_path):
    old = make_campaign(tmp_path / "old")
    new = make_campaign(tmp_path / "new")
    rows = compare(old, new)
    assert len(rows) == 2 * 2 * 3
    assert not any(r["regressed"] or r["fct_s_significant"] for r in rows)
    assert compare_campaigns(old, new, as_json=True) == 0


def test_a_slower_variant_is_flagged(tmp_path, capsys):
    old = make_campaign(tmp_path / "old")
    new = make_campaign(tmp_path / "new")
    shift_fct(new, "blitz", 0.5)                 # ten RTTs slower in every cell of blitz
    rows = compare(old, new)
    flagged = {(r["profile"], r["size_bytes"], r["variant"]) for r in rows if r["regressed"]}
    assert flagged == {(p, s, "blitz") for p in ("dsl", "lte") for s in (70_000, 2_000_000)}
    for r in rows:
        if r["variant"] == "blitz":
            assert abs(r["fct_s_diff"] - 0.5) < 1e-9
    assert compare_campaigns(old, new, as_json=False) == 1
    assert "REGRESSED" in capsys.readouterr().out


def test_a_change_within_one_rtt_is_not_a_regression(tmp_path):
    old = make_campaign(tmp_path / "old")
    new = make_campaign(tmp_path / "new")
    shift_fct(new, "blitz", 0.02)                # significant (zero-noise shift) but < RTT of 50 ms
    rows = [r for r in compare(old, new) if r["variant"] == "blitz"]
    assert all(r["fct_s_significant"] and not r["regressed"] for r in rows)


def test_faster_is_not_a_regression(tmp_path):
    old = make_campaign(tmp_path / "old")
    new = make_campaign(tmp_path / "new")
    shift_fct(new, "cautious", -0.5)
    assert not any(r["regressed"] for r in compare(old, new))


def test_campaigns_on_different_clocks_are_not_compared(tmp_path):
    """A night on the virtual clock against one on the real clock would be the clocks'
    difference taken for a regression."""
    old = make_campaign(tmp_path / "old")
    new = make_campaign(tmp_path / "new")
    for meta_path in new.glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        meta["run_clock"] = {"clock": "virtual", "shift": 0, "seed": 1}
        meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"different clocks \(real, virtual\)"):
        compare(old, new)
