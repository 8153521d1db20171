"""The papers' figures beside startlab's: the declarations, the reduction of a campaign's
cells to points, the paper pages that show them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_report import make_campaign

from analysis import paper_figures
from analysis.report import write_report
from analysis.transfer_model import relative_improvement
from results import schema
from results.campaign import load_campaign
from results.store import read_json
from scenarios.spec import list_scenarios, load_scenario

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "papers"

DECLARATION = """
title: "A test figure"
paper: papers/none.txt
source: "Table 9"
scenarios: [competing]
command: ./run.py run scenarios/none.yaml
figure: fct
statistic: {statistic}
y_label: "change (s)"
x:
  label: "a number per variant"
  variants: {{blitz: 1.0, cautious: 2.0}}
series:
  - label: dsl 2MB
    where: {{profile: dsl, size: 2MB}}
    paper_points: [[1.0, -0.2], [2.0, 0.05]]
  - label: lte 70KB
    where: {{profile: lte, size: 70KB}}
"""


def declare(directory: Path, statistic: str = "diff", text: str = DECLARATION) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "test-figure.yaml"
    path.write_text(text.format(statistic=statistic))
    return path


def test_every_declaration_loads_and_names_scenarios_and_variants_that_exist():
    scenarios = {s["name"]: s for s in list_scenarios()}
    decls = paper_figures.declarations()
    assert decls, "no paper figure declared"
    for decl in decls:
        for name in decl.scenarios:
            assert name in scenarios, f"{decl.path}: scenario {name} does not exist"
        loaded = [load_scenario(ROOT / scenarios[name]["path"]) for name in decl.scenarios]
        variants = {v for sc in loaded for v in sc.variants}
        profiles = {getattr(p, "name", p) for sc in loaded for p in sc.profiles}
        for variant in decl.x_variants:
            assert variant in variants, f"{decl.path}: x variant {variant} is in none of its scenarios"
        for series in decl.series:
            assert series.where.get("variant", next(iter(variants))) in variants, series
            assert series.where.get("profile", next(iter(profiles))) in profiles, series
            assert series.baseline is None or series.baseline in variants, series


def test_every_paper_page_shows_a_figure_beside_the_paper_and_every_figure_is_on_a_page():
    pages = {p: p.read_text(encoding="utf-8") for p in sorted(PAGES.glob("*.md"))}
    assert pages
    shown = {m for text in pages.values() for m in re.findall(r"\(figures/([^)]+\.png)\)", text)}
    for page, text in pages.items():
        assert re.search(r"\(figures/[^)]+\.png\)", text), f"{page.name} shows no figure beside its paper"
    for decl in paper_figures.declarations():
        png = f"{decl.name}.png"
        assert png in shown, f"{decl.path.name}: figures/{png} is on no paper page"
        assert (PAGES / "figures" / png).stat().st_size < 150_000, f"{png} is not small"
    for name in shown:
        assert (PAGES / "figures" / name).is_file(), f"figures/{name} is shown but missing"


@pytest.mark.parametrize("text, message", [
    ("statistic", "statistic: 'median' (choose from: mean, diff, speedup, reduction)"),
    ("where", "series[0]: where: colour: not a cell column"),
    ("x", "x: give either column or variants"),
    ("paper", "no paper_points, paper_range or paper_model"),
    ("title", "title: missing"),
])
def test_a_bad_declaration_is_one_line_naming_its_file_and_field(tmp_path, text, message):
    body = DECLARATION
    if text == "statistic":
        body = body.replace("{statistic}", "median")
    elif text == "where":
        body = body.replace("{{profile: dsl, size: 2MB}}", "{{colour: red}}")
    elif text == "x":
        body = body.replace("  variants: {{blitz: 1.0, cautious: 2.0}}", "")
    elif text == "paper":
        body = body.replace("    paper_points: [[1.0, -0.2], [2.0, 0.05]]\n", "")
    elif text == "title":
        body = body.replace('title: "A test figure"\n', "")
    path = declare(tmp_path, text=body)
    with pytest.raises(paper_figures.PaperFigureError) as err:
        paper_figures.load(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    assert "\n" not in str(err.value)


def cells(*rows: tuple[str, str, int, float]) -> list[dict]:
    return [{"profile": p, "size_bytes": s, "variant": v, "figure": "fct", "mean": m, "runs": 3,
             "sweep_value": "", "model": "", "mode": ""} for p, v, s, m in rows]


@pytest.mark.parametrize("statistic, expected", [
    ("mean", [(1.0, 1.5), (2.0, 3.0)]), ("diff", [(1.0, -0.5), (2.0, 1.0)]),
    ("speedup", [(1.0, 2 / 1.5), (2.0, 2 / 3.0)]), ("reduction", [(1.0, 0.25), (2.0, -0.5)]),
])
def test_a_cell_becomes_a_point_against_its_own_baseline(tmp_path, statistic, expected):
    decl = paper_figures.load(declare(tmp_path, statistic))
    figures = cells(("dsl", "slowstart", 2_000_000, 2.0), ("dsl", "blitz", 2_000_000, 1.5),
                    ("dsl", "cautious", 2_000_000, 3.0),
                    # another cell, and a cell without its baseline: neither is the series'
                    ("lte", "slowstart", 2_000_000, 9.0), ("lte", "blitz", 2_000_000, 1.0),
                    ("dsl", "blitz", 70_000, 0.1))
    points = paper_figures.measured(decl, decl.series[0], figures, "slowstart")
    assert [(x, pytest.approx(y)) for x, y, _ in points] == expected
    assert {n for _, _, n in points} == {3}


def test_the_papers_model_is_equation_2_as_the_declared_statistic():
    model = paper_figures.Model(qs_rate_bps=5_120_000, initial_window=3)
    improvement = model.improvement(300_000, 10e6, 0.1, 1500)
    window = 5_120_000 / 8 * 0.1 / (1448 + 52)   # RFC 4782 Equation 1: segments of MSS + H bytes
    assert improvement == pytest.approx(relative_improvement(300_000, 1448, 1500, 10e6, 0.1, window, 3))
    decl = paper_figures.PaperFigure(
        name="m", path=Path("m.yaml"), title="", paper="", source="", scenarios=("s",), command="",
        figure="fct", statistic="speedup", y_label="", x_label="", x_column="size_bytes", x_variants={},
        x_log=True, series=(paper_figures.Series("s", {}, None, model=model),))
    [(x, speedup)] = paper_figures.model_curve(decl, decl.series[0], (10e6, 0.1, 1500), [300_000])
    assert x == 300_000 and speedup == pytest.approx(1 / (1 - improvement)) and speedup > 1


def test_the_report_draws_the_figure_beside_the_paper_and_names_it(tmp_path):
    root = make_campaign(tmp_path / "campaign")
    write_report(root)
    values = tmp_path / "values"
    declare(values)
    record, records = load_campaign(root)
    tidy = read_json(root / schema.SUMMARY_JSON)
    stale = root / schema.PLOTS_DIR / "paper-gone.png"
    stale.write_bytes(b"old")
    [plot] = paper_figures.plots(root / schema.PLOTS_DIR, record, tidy["rows"], tidy["figures"], records, values)
    assert plot.path.name == "paper-test-figure.png" and plot.path.read_bytes()[:4] == b"\x89PNG"
    assert not stale.exists()
    assert "Table 9" in plot.caption and "mean − the baseline's mean" in plot.caption
    [points] = [paper_figures.measured(d, d.series[0], tidy["figures"], "slowstart")
                for d in paper_figures.declarations(values)]
    assert [(x, round(y, 6)) for x, y, _ in points] == [(1.0, -0.1), (2.0, 0.02)]
    other = dict(record, scenario="another")
    assert paper_figures.plots(root / schema.PLOTS_DIR, other, tidy["rows"], tidy["figures"], records, values) == []


def test_a_campaign_of_a_declared_scenario_has_the_figure_first_in_its_report(tmp_path):
    root = make_campaign(tmp_path / "campaign")
    record = json.loads((root / "campaign.json").read_text())
    (root / "campaign.json").write_text(json.dumps(dict(record, scenario="blitzstart-table1")))
    write_report(root)
    assert (root / schema.PLOTS_DIR / "paper-blitzstart-table1.png").is_file()
    md, page = (root / schema.REPORT_MD).read_text(), (root / schema.REPORT_HTML).read_text()
    assert "## Beside the paper" in md and "](plots/paper-blitzstart-table1.png)" in md
    assert md.index("## Beside the paper") < md.index("## Summary")
    assert "<h2>Beside the paper</h2>" in page and "Table 1, QUIC, 30 runs" in page
