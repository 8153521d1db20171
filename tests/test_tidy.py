"""The tidy summary tables (analysis.tidy): the same columns for every workload, one row per
cell and model × mode, every figure once in figures.csv, and old summaries upgraded."""
from __future__ import annotations

import pytest

from analysis.summary import columns_of
from analysis.tidy import FIGURE_COLUMNS, SUMMARY_COLUMNS, STABLE_COLUMNS, tidy_rows, upgrade
from analysis.workloads import registry
from analysis.workloads.web import ANALYSIS as WEB, PER_COMBO, column_prefix

CELL = {"profile": "dsl", "size_bytes": None, "variant": "qs-reno", "runs": 3, "sweep_param": None,
        "sweep_value": None, "rtt_s": 0.05, "rate_bps": 5e6, "emulator_flagged_runs": 0,
        "flow_check_failed_runs": 0}


def web_row() -> dict:
    """A web cell whose pages ran in two of the six models × modes; http11 is a prefix of
    http11-pipelined, whose figures must not be taken for http11's."""
    row = {c: None for c in columns_of(WEB)}
    row.update(CELL, users=20, kind="QS", cc="reno", pages=30, dl_mean_s=1.5, dl_median_s=1.2,
               qs_approval_ratio=0.5)
    for mode, pages, mean, approval in (("http11", 10, 1.0, 0.25), ("http11-pipelined", 20, 1.75, 0.75)):
        p = column_prefix("surge-default", mode)
        row.update({f"{p}_pages": pages, f"{p}_mean_s": mean, f"{p}_sd_s": 0.1, f"{p}_qs_approval": approval})
    return row


def test_every_workload_writes_the_same_columns():
    for name, analysis in registry().items():
        summary, figures = tidy_rows(analysis, [{**{c: None for c in columns_of(analysis)}, **CELL}])
        assert all(list(r) == SUMMARY_COLUMNS for r in summary), name
        assert all(list(r) == FIGURE_COLUMNS for r in figures), name
        assert SUMMARY_COLUMNS[:len(STABLE_COLUMNS)] == STABLE_COLUMNS
        names = [(f["figure"], f["model"], f["mode"]) for f in figures]
        assert len(names) == len(set(names)), name               # every figure once per cell


def test_a_web_cell_is_one_row_and_one_per_model_and_mode_that_ran():
    summary, figures = tidy_rows(WEB, [web_row()])
    assert [(r["model"], r["mode"], r["samples"], r["mean"]) for r in summary] == [
        (None, None, 30, 1.5), ("surge-default", "http11", 10, 1.0), ("surge-default", "http11-pipelined", 20, 1.75)]
    assert all(r["figure"] == "download" and r["unit"] == "s" and r["runs"] == 3 for r in summary)
    assert summary[1]["sd"] == 0.1 and summary[0]["fct_mean_s"] is None
    approvals = {f["mode"]: f["value"] for f in figures if f["figure"] == "qs_approval"}
    assert approvals == {"http11": 0.25, "http11-pipelined": 0.75}
    assert {f["figure"]: f["value"] for f in figures if f["model"] is None and f["value"] is not None} == {
        "users": 20, "kind": "QS", "cc": "reno", "qs_approval_ratio": 0.5}
    assert len(PER_COMBO) == 6 and not any(f["mode"] == "http10" for f in figures)


def test_a_summary_of_format_3_is_upgraded_and_a_new_one_left_alone():
    old = {"format": 3, "campaign": {"workload": "web"}, "columns": columns_of(WEB), "rows": [web_row()]}
    up = upgrade(old, WEB)
    assert up["format"] == 4 and up["upgraded_from"] == 3 and up["columns"] == SUMMARY_COLUMNS
    assert (up["rows"], up["figures"]) == tidy_rows(WEB, [web_row()])
    assert upgrade(up, WEB) is up


@pytest.mark.parametrize("name", sorted(registry()))
def test_the_primary_figure_heads_each_cells_row(name):
    analysis = registry()[name]
    primary = analysis.compared[0]
    row = {**{c: None for c in columns_of(analysis)}, **CELL, primary.col("mean"): 7.0, primary.col("diff"): -1.0}
    [head, *_] = tidy_rows(analysis, [row])[0]
    assert (head["figure"], head["mean"], head["diff"]) == (primary.figure, 7.0, -1.0)
