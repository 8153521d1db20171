"""Loading, summary files, plots and reports on small synthetic campaigns written to tmp dirs.

The runs are built so that every figure can be worked out by hand: per repetition r the
baseline's FCT is base + r ms, "blitz" is 100 ms faster (significantly better, loses
more packets), "cautious" is 20 ms slower (significant but within one 50 ms RTT).
"""

import json
import math
from pathlib import Path

import pytest

from analysis import stats
from summaries import read_csv

from analysis.plots import cdf_figure, median_fct_run, variant_colours
from analysis.report import VERDICTS, format_table, verdict, write_report
from analysis.summary import columns_of, summary_rows, write_summary
from analysis.workloads.competing import ANALYSIS, FCT, LOSS
from config.sizes import size_label
from machine.errors import UserError
from results import schema
from results.campaign import RunRecord, load_campaign

BASE_FCT = {70_000: 0.2, 2_000_000: 1.5}
FCT_OFFSET = {"slowstart": 0.0, "blitz": -0.1, "cautious": 0.02}
REQUIRED = ["profile", "size_bytes", "variant", "runs", "fct_mean_s", "fct_median_s",
            "fct_ci_low_s", "fct_ci_high_s", "loss_mean_pkts", "retx_mean_pkts", "fairness_median"]
# The tidy summary's columns after the stable ones: the same for every workload.
FURTHER = ["sweep_param", "sweep_value", "model", "mode", "figure", "unit", "samples", "mean", "median",
           "ci_low", "ci_high", "sd", "diff", "diff_ci_low", "diff_ci_high", "ratio", "significant",
           "within_one_rtt", "anova_p", "rtt_s", "rate_bps", "emulator_flagged_runs", "flow_check_failed_runs"]
T975_DF3 = 3.182446305284263
T975_DF6 = 2.446911851144969


def lost(variant: str, rep: int) -> int:
    return 10 + rep if variant == "blitz" else 1 + rep % 2


def write_run(root: Path, run_id: str, meta: dict, metrics: dict | None) -> None:
    run = root / run_id
    run.mkdir()
    (run / "meta.json").write_text(json.dumps(meta))
    if metrics is not None:
        (run / "metrics.json").write_text(json.dumps(metrics))


def make_campaign(root: Path, variants=("slowstart", "blitz", "cautious"), sizes=(70_000, 2_000_000),
                  profiles=("dsl", "lte"), reps=4, long_flow=True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.json").write_text(json.dumps({
        "format": 1, "scenario": "competing", "baseline": "slowstart", "variants": list(variants),
        "profiles": list(profiles), "sizes": [size_label(s) for s in sizes], "reps": reps,
        "seed": 1, "started": "2024-05-01T10:00:00+00:00"}))
    for profile in profiles:
        for size in sizes:
            for variant in variants:
                for rep in range(reps):
                    run_id = f"{profile}-{size_label(size)}-{variant}-{rep}"
                    loss = lost(variant, rep)
                    meta = {"format": 1, "run_id": run_id, "scenario": "competing", "profile": profile,
                            "size_bytes": size, "variant": variant, "rep": rep, "status": "done",
                            "profile_params": {"rtt_ms": 50.0, "down_mbps": 25.0, "buffer_ms": 50},
                            "git_rev": "0123abc", "kernel": "6.18.0-test"}
                    metrics = {
                        "format": 1,
                        "short": {"fct_s": BASE_FCT[size] + FCT_OFFSET[variant] + rep * 0.001,
                                  "bytes": size + loss * 1448, "lost_pkts": loss, "retx_pkts": loss,
                                  "inflation": (size + loss * 1448) / size},
                        "long": {"bytes": 5_000_000, "retx_pkts": 2, "lost_pkts": 2,
                                 "dip": 0.4 + 0.01 * rep if variant == "blitz" else 0.2}
                        if long_flow else None,
                        "fairness_ratio": 0.5 + 0.1 * rep if long_flow else None,
                        "throughput": {"t": [0.0, 0.1, 0.2], "short_mbps": [0.0, 10.0, 12.0],
                                       "long_mbps": [25.0, 15.0, 13.0] if long_flow else [0.0, 0.0, 0.0],
                                       "window_s": 0.05,
                                       "long_start": {"t": [0.0, 0.5, 1.0], "mbps": [0.0, 20.0, 25.0]}
                                       if long_flow else None},
                    }
                    write_run(root, run_id, meta, metrics)
    return root


def row_of(rows: list[dict[str, str]], profile: str, size: int, variant: str, figure: str | None = None
           ) -> dict[str, str]:
    """The row of a cell (of one of its figures, in figures.csv)."""
    [row] = [r for r in rows if (r["profile"], r["size_bytes"], r["variant"]) == (profile, str(size), variant)
             and (figure is None or r["figure"] == figure)]
    return row


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """A campaign with three variants, analysed once (drawing figures is the slow part)."""
    root = make_campaign(tmp_path_factory.mktemp("full") / "campaign")
    write_report(root)
    return root


# ------------------------------------------------------------------ loading

def test_load_skips_interrupted_runs_and_other_directories(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart",), sizes=(70_000,), profiles=("dsl",), reps=2)
    meta = json.loads((root / "dsl-70KB-slowstart-0" / "meta.json").read_text())
    write_run(root, "running", {**meta, "run_id": "running", "status": "running"},
              json.loads((root / "dsl-70KB-slowstart-0" / "metrics.json").read_text()))
    write_run(root, "no-metrics", {**meta, "run_id": "no-metrics"}, None)
    (root / "plots").mkdir()
    campaign, records = load_campaign(root)
    assert campaign["baseline"] == "slowstart"
    assert sorted(r.run_id for r in records) == ["dsl-70KB-slowstart-0", "dsl-70KB-slowstart-1"]
    rec = records[0]
    assert rec.rtt_s == 0.05 and rec.rate_bps == 25e6
    assert rec.meta["git_rev"] == "0123abc"
    # written in format 1, read as today's format
    assert campaign["format"] == schema.FORMAT == 3 and campaign["workload"] == "competing" and campaign["sizes"] == [70_000]
    assert rec.meta["format"] == 3 and rec.meta["flows"] == [] and rec.meta["host_check"] == {}


def test_load_rejects_a_directory_that_is_not_a_campaign(tmp_path):
    with pytest.raises(UserError, match="not a campaign"):
        load_campaign(tmp_path)


def test_load_rejects_an_unknown_format(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart",), sizes=(70_000,), profiles=("dsl",), reps=1)
    (root / "campaign.json").write_text(json.dumps({"format": 99, "baseline": "slowstart"}))
    with pytest.raises(UserError, match="format"):
        load_campaign(root)


def test_load_reports_an_incomplete_run(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart",), sizes=(70_000,), profiles=("dsl",), reps=1)
    write_run(root, "broken", {"format": 1, "status": "done", "run_id": "broken"}, {"format": 1})
    with pytest.raises(UserError, match="broken"):
        load_campaign(root)


# ------------------------------------------------------------------ summary.csv / summary.json

def test_csv_columns_and_rows(full):
    columns, rows = read_csv(full / "summary.csv")
    assert columns == REQUIRED + FURTHER
    assert len(rows) == 2 * 2 * 3
    assert [r["variant"] for r in rows[:3]] == ["slowstart", "blitz", "cautious"]
    assert [(r["profile"], r["size_bytes"]) for r in rows[::3]] == [
        ("dsl", "70000"), ("dsl", "2000000"), ("lte", "70000"), ("lte", "2000000")]
    assert {(r["figure"], r["unit"], r["model"], r["mode"]) for r in rows} == {("fct", "s", "", "")}


def test_csv_baseline_figures_by_hand(full):
    _, rows = read_csv(full / "summary.csv")
    base = row_of(rows, "dsl", 70_000, "slowstart")
    assert base["runs"] == "4" and base["samples"] == "4"
    assert float(base["fct_mean_s"]) == pytest.approx(0.2015) == float(base["mean"])
    assert float(base["fct_median_s"]) == pytest.approx(0.2015)
    # FCTs 0.200 … 0.203 s: the bootstrap interval of the mean lies inside them, around 0.2015
    # (analysis.stats.CI_METHOD), and is what mean_ci gives for those four values.
    low, high = float(base["fct_ci_low_s"]), float(base["fct_ci_high_s"])
    assert 0.200 <= low < 0.2015 < high <= 0.203
    assert (low, high) == pytest.approx(stats.mean_ci([0.200, 0.201, 0.202, 0.203]), abs=1e-12)
    assert (base["ci_low"], base["ci_high"]) == (base["fct_ci_low_s"], base["fct_ci_high_s"])
    assert float(base["loss_mean_pkts"]) == 1.5 and float(base["retx_mean_pkts"]) == 1.5
    assert float(base["fairness_median"]) == pytest.approx(0.65)
    for column in ("diff", "diff_ci_low", "diff_ci_high", "ratio", "significant", "within_one_rtt"):
        assert base[column] == "", column


def test_csv_comparison_by_hand(full):
    _, rows = read_csv(full / "summary.csv")
    _, figures = read_csv(full / "figures.csv")
    blitz = row_of(rows, "dsl", 70_000, "blitz")
    half = T975_DF6 * math.sqrt(2 * 1.6666666e-6 / 4)  # equal variances and n: Welch df = 6
    assert float(blitz["diff"]) == pytest.approx(-0.1)
    assert float(blitz["diff_ci_low"]) == pytest.approx(-0.1 - half, abs=1e-8)
    assert float(blitz["diff_ci_high"]) == pytest.approx(-0.1 + half, abs=1e-8)
    assert float(blitz["ratio"]) == pytest.approx(0.1015 / 0.2015)
    assert blitz["significant"] == "true" and blitz["within_one_rtt"] == "false"
    assert float(blitz["anova_p"]) < 1e-6
    loss = row_of(figures, "dsl", 70_000, "blitz", "loss")
    assert loss["unit"] == "pkts" and float(loss["diff"]) == 10.0
    assert float(loss["ratio"]) == pytest.approx(11.5 / 1.5) and loss["significant"] == "true"
    assert row_of(figures, "dsl", 70_000, "blitz", "fct") == {**blitz_figure(blitz), "value": ""}

    # the long flow's dip: blitz 0.40 … 0.43 against the baseline's 0.2 in every run
    dips = {f["figure"]: f["value"] for f in figures
            if (f["profile"], f["size_bytes"], f["variant"]) == ("dsl", "70000", "blitz")}
    assert float(dips["long_dip_mean"]) == pytest.approx(0.415)
    assert float(dips["long_dip_diff"]) == pytest.approx(0.215) and dips["long_dip_significant"] == "true"
    assert "42% (+22 pts*)" in (full / "report.md").read_text()

    cautious = row_of(rows, "dsl", 70_000, "cautious")
    assert cautious["significant"] == "true" and cautious["within_one_rtt"] == "true"
    loss = row_of(figures, "dsl", 70_000, "cautious", "loss")
    assert float(loss["diff"]) == 0.0 and loss["significant"] == "false"


def blitz_figure(row: dict[str, str]) -> dict[str, str]:
    """A summary row's primary figure as figures.csv spells it."""
    from analysis.tidy import FIGURE_COLUMNS
    return {c: row[c] for c in FIGURE_COLUMNS if c != "value"}


def test_every_figure_of_a_cell_is_one_row_of_figures_csv(full):
    columns, figures = read_csv(full / "figures.csv")
    from analysis.tidy import FIGURE_COLUMNS
    assert columns == FIGURE_COLUMNS
    cell = [f for f in figures if (f["profile"], f["size_bytes"], f["variant"]) == ("dsl", "70000", "blitz")]
    names = [f["figure"] for f in cell]
    assert len(names) == len(set(names))
    assert {"fct", "loss", "retx_mean_pkts", "fairness_median", "inflation_mean"} <= set(names)
    assert float(next(f for f in cell if f["figure"] == "retx_mean_pkts")["value"]) == 11.5
    assert len(figures) == 12 * len(names)


def test_summary_json(full):
    from analysis.tidy import FIGURE_COLUMNS, SUMMARY_COLUMNS
    document = json.loads((full / "summary.json").read_text())
    assert document["format"] == 4
    assert document["campaign"]["scenario"] == "competing"
    assert document["columns"] == SUMMARY_COLUMNS and document["figure_columns"] == FIGURE_COLUMNS
    assert len(document["rows"]) == 12
    assert document["rows"][0]["diff"] is None and document["rows"][1]["significant"] is True
    assert len(document["figures"]) == len(read_csv(full / "figures.csv")[1])


def test_an_old_summary_is_upgraded_to_the_same_tables(full):
    from analysis.tidy import upgrade
    campaign, records = load_campaign(full)
    wide = summary_rows(campaign, records, ANALYSIS)
    old = {"format": 3, "campaign": campaign, "columns": columns_of(ANALYSIS), "rows": wide}
    new = json.loads((full / "summary.json").read_text())
    up = upgrade(json.loads(json.dumps(old)), ANALYSIS)
    assert up["format"] == 4 and up["upgraded_from"] == 3
    assert up["rows"] == new["rows"] and up["figures"] == new["figures"]


def test_no_competing_flow_leaves_fairness_empty(tmp_path):
    root = make_campaign(tmp_path / "c", sizes=(70_000,), profiles=("dsl",), reps=3, long_flow=False)
    write_report(root)
    _, rows = read_csv(root / "summary.csv")
    assert [r["fairness_median"] for r in rows] == ["", "", ""]
    _, figures = read_csv(root / "figures.csv")
    assert {f["value"] for f in figures if f["figure"].startswith("long_dip")} <= {""}
    assert "slowstart" in (root / "report.html").read_text()


def test_single_repetition_has_no_intervals(tmp_path):
    root = make_campaign(tmp_path / "c", sizes=(70_000,), profiles=("dsl",), reps=1)
    campaign, records = load_campaign(root)
    write_summary(root, campaign, records, ANALYSIS)
    _, rows = read_csv(root / "summary.csv")
    for row in rows:
        assert row["fct_ci_low_s"] == row["fct_ci_high_s"] == "" and row["anova_p"] == ""
    blitz = row_of(rows, "dsl", 70_000, "blitz")
    assert float(blitz["diff"]) == pytest.approx(-0.1)
    assert blitz["diff_ci_low"] == "" and blitz["significant"] == "false"
    write_report(root)  # and the report copes too
    assert "not significant" in (root / "report.md").read_text()


# ------------------------------------------------------------------ reports and figures

def test_report_files_exist_and_embed_the_figures(full):
    pngs = sorted((full / "plots").glob("*.png"))
    # per profile one CDF, one box and one startup figure (the paper's Fig. 1), per (profile,
    # size) one throughput figure
    assert len(pngs) == 2 * 3 + 2 * 2
    assert sorted(p.name for p in pngs if p.name.startswith("startup_")) == ["startup_dsl_2MB.png",
                                                                             "startup_lte_2MB.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    page = (full / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(pngs)
    assert "src='plots/" not in page and "http" not in page  # self-contained
    assert not list(full.glob(".*.tmp"))  # atomic writes left nothing behind


def test_report_html_has_the_comparison_table_and_metadata(full):
    page = (full / "report.html").read_text()
    for text in ("slowstart", "blitz", "cautious", "dsl", "lte", "70KB", "2MB",
                 "0123abc", "6.18.0-test", "2024-05-01T10:00:00+00:00", "48 of 48"):
        assert text in page, text
    assert f"background:{VERDICTS['better'].colour}" in page  # blitz FCT
    assert f"background:{VERDICTS['worse'].colour}" in page  # blitz loss
    assert f"background:{VERDICTS['same_rtt'].colour}" in page  # cautious FCT
    assert f"background:{VERDICTS['not_significant'].colour}" in page  # cautious loss
    assert "-100 ms" in page and "×2.0" in page  # 0.1015 s vs 0.2015 s
    for v in VERDICTS.values():
        assert v.meaning in page  # the legend


def test_report_markdown(full):
    text = (full / "report.md").read_text()
    assert "| profile | size | variant | FCT change | loss change |" in text
    assert "| dsl | 70KB | blitz | ▼ -100 ms (×2.0) better | ▲ +10 (×7.7) worse |" in text
    assert "| dsl | 70KB | cautious | ◆ +20 ms (×1.1) within 1 RTT |" in text


def test_only_the_baseline(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart",), sizes=(70_000,), profiles=("dsl",), reps=3)
    write_report(root)
    assert "Only the baseline variant ran" in (root / "report.html").read_text()
    assert "Only the baseline variant ran" in (root / "report.md").read_text()
    _, rows = read_csv(root / "summary.csv")
    assert len(rows) == 1 and rows[0]["anova_p"] == ""


def test_format_table(full):
    campaign, records = load_campaign(full)
    rows = summary_rows(campaign, records, ANALYSIS)
    lines = format_table(rows, ANALYSIS).splitlines()
    assert lines[0].split()[:3] == ["profile", "size", "variant"]
    body = [line for line in lines[2:] if line.startswith(("dsl", "lte"))]
    assert len(body) == 12
    assert body[1].split()[:4] == ["dsl", "70KB", "blitz", "4"]
    assert "-100 ms (×2.0) ▼" in body[1]


def test_verdicts():
    row = {"fct_diff_s": -0.3, "fct_significant": True, "fct_within_one_rtt": False,
           "loss_diff_pkts": 2.0, "loss_significant": False}
    assert verdict(row, FCT) == "better" and verdict(row, LOSS) == "not_significant"
    assert verdict({**row, "fct_within_one_rtt": True}, FCT) == "same_rtt"
    assert verdict({**row, "fct_diff_s": 0.3}, FCT) == "worse"
    assert verdict({**row, "fct_diff_s": None}, FCT) is None


def test_median_fct_run_takes_the_lower_middle():
    runs = [RunRecord(run_id=str(i), profile="p", size_bytes=1, variant="v", rep=i, sweep={}, rtt_s=0.05,
                      rate_bps=1e6, mtu=1500, meta={}, metrics={"short": {"fct_s": fct}})
            for i, fct in enumerate([3.0, 1.0, 4.0, 2.0])]
    assert median_fct_run(runs).run_id == "3"  # FCT 2.0 of 1, 2, 3, 4


def test_cdf_figure_labels_every_panel(full):
    _, records = load_campaign(full)
    rows = [(s, [r for r in records if r.profile == "dsl" and r.size_bytes == s]) for s in (70_000, 2_000_000)]
    variants = ["slowstart", "blitz", "cautious"]
    fig = cdf_figure("dsl", rows, variants, variant_colours(variants), "slowstart")
    axes = fig.get_axes()
    assert [ax.get_xlabel() for ax in axes[:3]] == [
        "flow completion time (s)", "fairness ratio (short ÷ long bytes)", "lost packets of the short flow"]
    assert axes[0].get_title() == "dsl, 70KB: flow completion time"
    assert axes[3].get_title() == "dsl, 2MB: flow completion time"
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["slowstart (baseline)", "blitz", "cautious"]
    colours = [line.get_color() for line in axes[0].get_lines()[:3]]
    assert colours == [variant_colours(variants)[v] for v in variants]


def test_missing_inflation_is_left_out_of_the_mean(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart",), sizes=(70_000,), profiles=("dsl",), reps=2)
    metrics_file = root / "dsl-70KB-slowstart-0" / "metrics.json"
    metrics = json.loads(metrics_file.read_text())
    metrics["short"]["inflation"] = None
    metrics_file.write_text(json.dumps(metrics))
    campaign, records = load_campaign(root)
    [row] = write_summary(root, campaign, records, ANALYSIS)
    assert row["inflation_mean"] == pytest.approx((70_000 + 2 * 1448) / 70_000)  # rep 1 lost 2 packets


def test_verdict_of_a_figure_where_higher_is_better():
    from analysis.workloads.base import Compared
    share = Compared(column="share", name="share", label="share", unit="", get=lambda r: 0.0,
                     higher_is_better=True)
    assert share.col("mean") == "share_mean" and share.col("diff") == "share_diff"
    row = {"share_diff": 0.2, "share_significant": True}
    assert verdict(row, share) == "better"
    assert verdict({**row, "share_diff": -0.2}, share) == "worse"
    assert verdict({**row, "share_significant": False}, share) == "not_significant"


def test_a_campaign_from_several_hosts_is_also_summarised_per_host(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart", "blitz"), sizes=(70_000,), profiles=("dsl",), reps=4)
    for meta_file in root.glob("*/meta.json"):           # reps 0, 1 on host a; 2, 3 on host b, 50 ms slower
        meta = json.loads(meta_file.read_text())
        meta["host"] = "a" if meta["rep"] < 2 else "b"
        meta_file.write_text(json.dumps(meta))
        if meta["host"] == "b":
            metrics_file = meta_file.with_name("metrics.json")
            metrics = json.loads(metrics_file.read_text())
            metrics["short"]["fct_s"] += 0.05
            metrics_file.write_text(json.dumps(metrics))
    write_report(root)
    _, rows = read_csv(root / "summary-by-host.csv")          # figures.csv's rows per host
    by = {(r["host"], r["variant"]): r for r in rows if r["figure"] == "fct"}
    assert sorted(by) == [("a", "blitz"), ("a", "slowstart"), ("b", "blitz"), ("b", "slowstart")]
    assert all(r["runs"] == "2" for r in rows)
    # slowstart at 70 KB: 0.2 s + rep ms; host b adds 50 ms
    assert float(by[("a", "slowstart")]["mean"]) == pytest.approx(0.2005)
    assert float(by[("b", "slowstart")]["mean"]) == pytest.approx(0.2525)
    assert "Per host" in (root / "report.html").read_text()


def test_a_campaign_from_one_host_has_no_per_host_split(full):
    assert not (full / "summary-by-host.csv").exists()


def test_runs_with_sender_traces_get_a_cwnd_figure(tmp_path):
    """Where runs recorded the QUIC senders' qlogs (metrics flows.<flow>.sender), the report
    draws their windows per cell; without them, no such figure."""
    root = make_campaign(tmp_path / "c", sizes=(2_000_000,), profiles=("dsl",), reps=2)
    for metrics_file in root.glob("*/metrics.json"):
        m = json.loads(metrics_file.read_text())
        trace = {"exit": {"t_s": 0.3, "cwnd_bytes": 100 * 1472, "by": "loss", "latest_rtt_ms": 90.0,
                          "min_rtt_ms": 50.0, "lost_before": 7},
                 "lost_packets": 9, "cwnd": {"t": [0.0, 0.1, 0.3, 0.5], "bytes": [47104, 94208, 147200, 125120],
                                             "stride": 1}}
        m["flows"] = {"short": {"sender": trace}, "long": {"sender": {**trace, "exit": None}}}
        metrics_file.write_text(json.dumps(m))
    write_report(root)
    assert (root / "plots" / "cwnd_dsl_2MB.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "congestion windows from their qlogs" in (root / "report.html").read_text()
    plain = make_campaign(tmp_path / "p", sizes=(2_000_000,), profiles=("dsl",), reps=2)
    write_report(plain)
    assert not list((plain / "plots").glob("cwnd_*"))


def test_a_campaign_behind_several_queues_compares_each_variant_across_the_queues(tmp_path, full):
    """`shapers:` puts each profile behind each queue: the report compares each variant
    behind each queue with the same variant behind the first, by the summary's own test.
    Behind CoDel (made up here) blitz is 30 ms slower, slowstart the same."""
    from analysis import queues
    root = make_campaign(tmp_path / "c", variants=("slowstart", "blitz"), sizes=(70_000,),
                         profiles=("dsl+tbf", "dsl+codel"), reps=4)
    doc = json.loads((root / "campaign.json").read_text())
    doc["behind"] = {"dsl+tbf": {"profile": "dsl", "queue": "tbf"}, "dsl+codel": {"profile": "dsl", "queue": "codel"}}
    (root / "campaign.json").write_text(json.dumps(doc))
    for path in root.glob("dsl+codel-*-blitz-*/metrics.json"):
        metrics = json.loads(path.read_text())
        metrics["short"]["fct_s"] += 0.03
        path.write_text(json.dumps(metrics))
    write_report(root)
    campaign, records = load_campaign(root)
    rows = {(r["profile"], r["variant"]): r for r in queues.queue_rows(campaign, records, ANALYSIS)}
    assert list(rows) == [("dsl, slowstart", "tbf"), ("dsl, slowstart", "codel"), ("dsl, blitz", "tbf"),
                          ("dsl, blitz", "codel")]
    slower = rows[("dsl, blitz", "codel")]
    assert slower["fct_diff_s"] == pytest.approx(0.03) and slower["fct_significant"]
    assert slower["fct_diff_ci_low_s"] < 0.03 < slower["fct_diff_ci_high_s"]
    same = rows[("dsl, slowstart", "codel")]
    assert same["fct_diff_s"] == pytest.approx(0.0, abs=1e-12) and not same["fct_significant"]
    assert rows[("dsl, blitz", "tbf")]["fct_diff_s"] is None
    report = (root / "report.md").read_text()
    assert "## Behind each queue" in report and "ΔFCT vs tbf" in report and "ΔFCT 95% CI" in report
    # A campaign behind one queue has no such table.
    assert queues.queue_rows(*load_campaign(full), ANALYSIS) == []
    assert "Behind each queue" not in (full / "report.md").read_text()


def test_ce_marks_and_the_ecn_handshake_get_their_own_section(tmp_path):
    """A cell whose runs set up ECN and saw CE marks (metrics as the analysis writes them
    from the wire: tests/test_metrics.py, tests/test_ecn_run.py) gets the ECN figures in the
    summary and the report's ECN section; a cell without any has neither."""
    root = make_campaign(tmp_path / "c", variants=("slowstart", "blitz"), sizes=(70_000,), profiles=("dsl",), reps=4)
    marks = {0: 3, 1: 5, 2: 4, 3: 8}
    for path in root.glob("dsl-*-blitz-*/metrics.json"):
        rep = int(path.parent.name.rsplit("-", 1)[1])
        metrics = json.loads(path.read_text())
        metrics["short"]["ce_pkts"] = marks[rep]
        metrics["flows"] = {"short": {"ecn": rep != 3}, "long": {"ecn": True}}
        path.write_text(json.dumps(metrics))
    write_report(root)
    figures = {(f["variant"], f["figure"]): f["value"]
               for f in json.loads((root / schema.SUMMARY_JSON).read_text())["figures"]}
    assert figures[("blitz", "ecn_ratio")] == 0.75
    assert figures[("blitz", "marks_mean_pkts")] == 5.0
    assert figures.get(("slowstart", "ecn_ratio")) is None and figures.get(("slowstart", "marks_mean_pkts")) is None
    report = (root / schema.REPORT_MD).read_text()
    ecn = report[report.index("CE marks mean"):]
    assert "| dsl | 70KB | blitz | 4 | 75% |" in ecn and "slowstart" not in ecn.split("\n\n")[0]
