"""The papers' own figures beside startlab's.

Each reproduced paper's headline figure or table is declared as data
(`analysis/paper_values/*.yaml`): the paper's values and where in the paper they are, the
scenarios whose campaigns reproduce it, one figure of the tidy summary and how a cell of it
becomes a point (a statistic against a baseline variant), the x axis, and the series. The
report of a campaign of such a scenario draws one picture per declaration: the paper's panel
on the left, startlab's on the right, on the same axes, so a reader sees at a glance whether
the shape holds. The paper's side is never measured here: it is either values the paper
states (a table's cells, a figure's points given in its text), a range it states, or its own
analytical model evaluated on the campaign's path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import yaml
from matplotlib.figure import Figure

from analysis.plots import save
from analysis.transfer_model import relative_improvement
from analysis.workloads.base import Plot
from config.sizes import parse_size
from results.campaign import RunRecord
from wire.quickstart import qs_window_segments
from wire.tcpip import TCPIP_HEADERS, tcp_mss

VALUES_DIR = Path(__file__).with_name("paper_values")

# How a cell's mean m becomes a point, against its baseline's mean b at the same cell.
STATISTICS: dict[str, tuple[str, Callable[[float, float], float]]] = {
    "mean": ("the cell's mean", lambda m, b: m),
    "diff": ("mean − the baseline's mean", lambda m, b: m - b),
    "speedup": ("the baseline's mean ÷ mean", lambda m, b: b / m),
    "reduction": ("1 − mean ÷ the baseline's mean", lambda m, b: 1 - m / b),
}
# The cell columns a series may select on (the tidy summary's keys of a cell).
CELL_COLUMNS = ("profile", "size_bytes", "variant", "sweep_value", "model", "mode")


class PaperFigureError(ValueError):
    """A declaration that cannot be read: the file and the field, in one line."""


@dataclass(frozen=True)
class Model:
    """The paper's analytical model for a series: Equation 2 of Allman/Floyd/Sarolahti
    (round trips from a Quick-Start window of `qs_rate_bps` × RTT against slow start from
    `initial_window` packets), on the campaign's path (its rate, RTT and MTU)."""
    qs_rate_bps: float
    initial_window: float

    def improvement(self, size_bytes: float, rate_bps: float, rtt_s: float, mtu: int) -> float:
        mss = tcp_mss(mtu)
        window = qs_window_segments(self.qs_rate_bps, rtt_s, mss, TCPIP_HEADERS)
        return relative_improvement(int(size_bytes), mss, mtu, rate_bps, rtt_s, window, self.initial_window)


@dataclass(frozen=True)
class Series:
    """One line of the figure: the cells it draws and the paper's values for it (none: a
    line of startlab's only, for a variant the paper shows without stating its values)."""
    label: str
    where: dict[str, Any]
    baseline: Optional[str]
    points: tuple[tuple[float, float], ...] = ()
    band: Optional[tuple[float, float, float, float]] = None   # x from, x to, y low, y high
    model: Optional[Model] = None


@dataclass(frozen=True)
class PaperFigure:
    """A paper's headline figure, declared; `path` is its declaration file."""
    name: str
    path: Path
    title: str
    paper: str
    source: str
    scenarios: tuple[str, ...]
    command: str
    figure: str
    statistic: str
    y_label: str
    x_label: str
    x_column: Optional[str]
    x_variants: dict[str, float]
    x_log: bool
    series: tuple[Series, ...]

    def file_stem(self, scenario: str) -> str:
        """The picture's name for a campaign of `scenario`: the declaration's own for its
        first scenario, with the scenario's after a dot for the others."""
        return self.name if scenario == self.scenarios[0] else f"{self.name}.{scenario}"

    def x_of(self, cell: dict[str, Any]) -> Optional[float]:
        """The x of a summary cell: its variant's declared number, or a column's value."""
        if self.x_variants:
            return self.x_variants.get(cell["variant"])
        value = cell.get(self.x_column or "")
        return None if value in (None, "") else float(value)


# ---------------------------------------------------------------- declarations

def _field(data: dict[str, Any], key: str, where: str, kind: type = str, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise PaperFigureError(f"{where}: {key}: missing")
        return default
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind):
        raise PaperFigureError(f"{where}: {key}: expected {kind.__name__}, got {value!r}")
    return value


def _cell_filter(raw: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "size":
            out["size_bytes"] = parse_size(value)
        elif key in CELL_COLUMNS:
            out[key] = value
        else:
            raise PaperFigureError(f"{where}: where: {key}: not a cell column "
                                   f"(choose from: size, {', '.join(CELL_COLUMNS)})")
    return out


def _series(raw: Any, where: str) -> Series:
    if not isinstance(raw, dict):
        raise PaperFigureError(f"{where}: expected a mapping")
    points = tuple((float(x), float(y)) for x, y in _field(raw, "paper_points", where, list, []))
    band = _field(raw, "paper_range", where, dict, None)
    model = _field(raw, "paper_model", where, dict, None)
    if band is not None:
        band = (float(band["x"][0]), float(band["x"][1]), float(band["y"][0]), float(band["y"][1]))
    if model is not None:
        if model.get("name") != "equation2":
            raise PaperFigureError(f"{where}: paper_model: name: {model.get('name')!r} (choose from: equation2)")
        model = Model(float(model["qs_rate_bps"]), float(model["initial_window"]))
    return Series(label=_field(raw, "label", where), where=_cell_filter(_field(raw, "where", where, dict), where),
                  baseline=_field(raw, "baseline", where, str, None), points=points, band=band, model=model)


def load(path: Path) -> PaperFigure:
    """Read one declaration; every error names the file and the field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise PaperFigureError(f"{path}: {str(err).splitlines()[0]}") from err
    if not isinstance(data, dict):
        raise PaperFigureError(f"{path}: expected a mapping")
    where = str(path)
    statistic = _field(data, "statistic", where)
    if statistic not in STATISTICS:
        raise PaperFigureError(f"{where}: statistic: {statistic!r} (choose from: {', '.join(STATISTICS)})")
    x = _field(data, "x", where, dict)
    x_variants = {str(k): float(v) for k, v in (x.get("variants") or {}).items()}
    x_column = x.get("column")
    if bool(x_variants) == bool(x_column):
        raise PaperFigureError(f"{where}: x: give either column or variants")
    series = _field(data, "series", where, list)
    decl = PaperFigure(
        name=path.stem, path=path, title=_field(data, "title", where), paper=_field(data, "paper", where),
        source=_field(data, "source", where), scenarios=tuple(str(s) for s in _field(data, "scenarios", where, list)),
        command=_field(data, "command", where), figure=_field(data, "figure", where), statistic=statistic,
        y_label=_field(data, "y_label", where), x_label=_field(x, "label", f"{where}: x"), x_column=x_column,
        x_variants=x_variants, x_log=bool(x.get("log", False)),
        series=tuple(_series(s, f"{where}: series[{i}]") for i, s in enumerate(series)))
    if not any(s.points or s.band or s.model for s in decl.series):
        raise PaperFigureError(f"{where}: series: no paper_points, paper_range or paper_model: nothing of the paper's")
    return decl


def declarations(directory: Path = VALUES_DIR) -> list[PaperFigure]:
    """Every declared paper figure, by name."""
    return [load(p) for p in sorted(directory.glob("*.yaml"))]


# ---------------------------------------------------------------- startlab's side

def _cell_key(cell: dict[str, Any]) -> tuple:
    return tuple(cell.get(c) for c in ("profile", "size_bytes", "sweep_value", "model", "mode"))


def _matches(cell: dict[str, Any], where: dict[str, Any]) -> bool:
    for key, value in where.items():
        have = cell.get(key)
        if key in ("size_bytes", "sweep_value"):
            if have in (None, "") or float(have) != float(value):
                return False
        elif str(have) != str(value):
            return False
    return True


def measured(decl: PaperFigure, series: Series, figures: list[dict[str, Any]],
             baseline: str) -> list[tuple[float, float, int]]:
    """(x, y, runs) of startlab's cells for one series, sorted by x: each cell's mean of the
    declared figure reduced by the statistic against its baseline's mean at the same cell."""
    rows = [f for f in figures if f.get("figure") == decl.figure and f.get("mean") not in (None, "")]
    base_variant = series.baseline or baseline
    base = {_cell_key(f): float(f["mean"]) for f in rows if f["variant"] == base_variant}
    reduce = STATISTICS[decl.statistic][1]
    out = []
    for cell in rows:
        x = decl.x_of(cell)
        if x is None or cell["variant"] == base_variant or not _matches(cell, series.where):
            continue
        b = base.get(_cell_key(cell))
        if b is None:
            continue
        out.append((x, reduce(float(cell["mean"]), b), int(cell.get("runs") or 0)))
    return sorted(out)


def _path(rows: list[dict[str, Any]], records: list[RunRecord], profile: str) -> Optional[tuple[float, float, int]]:
    """The campaign's path for `profile`: bottleneck rate, base RTT and MTU."""
    row = next((r for r in rows if r.get("profile") == profile and r.get("rtt_s") and r.get("rate_bps")), None)
    rec = next((r for r in records if r.profile == profile), None)
    if row is None or rec is None:
        return None
    return float(row["rate_bps"]), float(row["rtt_s"]), rec.mtu


def model_curve(decl: PaperFigure, series: Series, path: tuple[float, float, int],
                xs: np.ndarray) -> list[tuple[float, float]]:
    """The paper's model of a series over sizes xs, as the declared statistic."""
    assert series.model is not None
    rate, rtt, mtu = path
    out = []
    for x in xs:
        improvement = series.model.improvement(x, rate, rtt, mtu)
        y = improvement if decl.statistic == "reduction" else 1 / (1 - improvement)
        out.append((float(x), y))
    return out


# ---------------------------------------------------------------- the picture

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def figure(decl: PaperFigure, campaign: dict[str, Any], rows: list[dict[str, Any]],
           figures: list[dict[str, Any]], records: list[RunRecord]) -> Figure:
    """The paper's panel (left) and startlab's (right), same axes, one colour per series."""
    fig = Figure(figsize=(10, 4.2), layout="constrained", dpi=80)
    paper_ax, ours_ax = fig.subplots(1, 2, sharex=True, sharey=True)
    runs_per_cell: set[int] = set()
    for i, series in enumerate(decl.series):
        colour = COLOURS[i % len(COLOURS)]
        ours = measured(decl, series, figures, str(campaign.get("baseline")))
        runs_per_cell |= {n for _, _, n in ours}
        if ours:
            ours_ax.plot([p[0] for p in ours], [p[1] for p in ours], marker="o", color=colour, label=series.label)
        if series.points:
            paper_ax.plot([p[0] for p in series.points], [p[1] for p in series.points], marker="s",
                          color=colour, label=series.label)
        if series.band:
            x0, x1, y0, y1 = series.band
            paper_ax.fill_between([x0, x1], [y0, y0], [y1, y1], color=colour, alpha=0.25,
                                  label=f"{series.label} (stated range)")
        if series.model:
            profile = series.where.get("profile")
            path = _path(rows, records, str(profile)) if profile else None
            xs = [p[0] for p in ours] or [1e4, 1e7]
            if path:
                grid = np.geomspace(min(xs), max(xs), 50)
                curve = model_curve(decl, series, path, grid)
                paper_ax.plot([p[0] for p in curve], [p[1] for p in curve], ls="--", color=colour,
                              label=series.label)
    runs = ", ".join(str(n) for n in sorted(runs_per_cell)) or "no"
    paper_ax.set_title(f"paper: {decl.source}", fontsize=9)
    ours_ax.set_title(f"startlab: {campaign.get('scenario')}, {runs} runs per cell", fontsize=9)
    for ax in (paper_ax, ours_ax):
        ax.set_xlabel(decl.x_label)
        ax.grid(alpha=0.3, which="both")
        if decl.x_log:
            ax.set_xscale("log")
        if decl.statistic in ("diff", "reduction"):
            ax.axhline(0.0, color="#999999", lw=0.8)
        elif decl.statistic == "speedup":
            ax.axhline(1.0, color="#999999", lw=0.8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    paper_ax.set_ylabel(decl.y_label)
    fig.suptitle(decl.title, fontsize=10)
    return fig


def plots(out_dir: Path, campaign: dict[str, Any], rows: list[dict[str, Any]], figures: list[dict[str, Any]],
          records: list[RunRecord], directory: Path = VALUES_DIR) -> list[Plot]:
    """Draw every declaration that names this campaign's scenario into out_dir/paper-<stem>.png."""
    for stale in out_dir.glob("paper-*.png"):      # a renamed or removed declaration's
        stale.unlink()
    out = []
    for decl in declarations(directory):
        if campaign.get("scenario") not in decl.scenarios:
            continue
        path = out_dir / f"paper-{decl.file_stem(str(campaign['scenario']))}.png"
        save(figure(decl, campaign, rows, figures, records), path)
        caption = (f"{decl.title}. Left: the paper ({decl.paper}, {decl.source}); right: this campaign, "
                   f"y = {STATISTICS[decl.statistic][0]} of {decl.figure}.")
        out.append(Plot(kind="paper", profile="", size_bytes=None, path=path, caption=caption))
    return out
