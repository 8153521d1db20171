"""The bulk workload: Jain's index by hand, and a real run through run.py (root)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from analysis.workloads.bulk import jain
from conftest import ROOT
from summaries import cell_figures
from timing import campaign_flags, report_flagged, timing_check, union


def test_jain_index():
    assert jain([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([10.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)          # one flow has everything: 1/n
    assert jain([3.0, 1.0]) == pytest.approx(16 / 20)
    assert jain([0.0, 0.0]) is None


SCENARIO = """
name: bulk-test
profiles: [dsl-fast]
workload: {kind: bulk, flows: 3, pairs: 2, duration_s: 5, omit_s: 1.5}
variants: [cubic-iw10]
repetitions: 1
"""


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_bulk_run_end_to_end(tmp_path):
    path = tmp_path / "bulk.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(path), "--out", str(out), "--json",
                          "--unfit-host"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    [row] = list(csv.DictReader(open(out / "summary.csv")))
    assert row["size_bytes"] == "" and row["fct_mean_s"] == "" and row["figure"] == "jain"
    [row] = cell_figures(out)                           # the workload's own figures
    assert row["flows"] == "3"
    # The three flows fill the link together: tbf's rate, which a late host does not keep.
    per_run, _ = campaign_flags(out)
    share = float(row["link_share_mean"])
    timing_check("the three flows fill the link together (link share 0.9-1.01)", union(per_run.values()),
                 0.9 <= share <= 1.01, f"link share {share}", shown=report_flagged(out))
    assert 1 / 3 < float(row["jain_mean"]) <= 1.0
    [run] = [p for p in out.iterdir() if (p / "metrics.json").exists()]
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(metrics["flows"]) == 3 and all(c["cc_ok"] and c["iw_ok"] for c in metrics["flow_checks"])
    assert sum(f["goodput_mbps"] for f in metrics["flows"].values()) == pytest.approx(metrics["goodput_total_mbps"])
    assert "Jain" in (out / "report.html").read_text()
