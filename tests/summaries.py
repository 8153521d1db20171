"""Reading a campaign's written summary in tests: the CSV tables, and figures.csv pivoted
back to one row per cell for tests that check a workload's own figures."""
from __future__ import annotations

import csv
from pathlib import Path


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def cell_figures(root: Path) -> list[dict[str, str]]:
    """figures.csv pivoted back to one row per cell (model and mode: all): a value figure
    under its name, a figure with statistics as `{figure}_{statistic}`."""
    cells: dict[tuple, dict[str, str]] = {}
    keys = ("profile", "size_bytes", "sweep_param", "sweep_value", "variant", "runs")
    for f in read_csv(root / "figures.csv")[1]:
        if f["model"]:
            continue
        row = cells.setdefault(tuple(f[k] for k in keys), {k: f[k] for k in keys})
        if f["value"] or not any(f[k] for k in ("mean", "median", "diff", "samples")):
            row[f["figure"]] = f["value"]
        else:
            row.update({f"{f['figure']}_{k}": f[k] for k in ("mean", "median", "ci_low", "ci_high", "diff",
                                                               "ratio", "significant")})
    return list(cells.values())
