"""Root integration: the competing experiment's ordering as measured with a CUBIC long flow.

With the long flow running CUBIC (declared and read back from the kernel), a 2 MB transfer
on dsl-fast through the campaign pipeline (lighttpd, curl), 5 repetitions each
(`run blitzstart-table1.yaml --profiles dsl-fast --sizes 2MB --variants
cubic-iw32,cubic-iw10,reno-iw3 --reps 5`): CUBIC IW32 1.40 s (95 % CI 1.40–1.40), CUBIC
IW10 1.75 s (1.74–1.76), Reno IW3 1.72 s (1.71–1.74). IW32 beats IW10 by 350 ms. But a
single IW32 run can land in a slow mode: one of 17 single runs took 1.71 s, so the test
compares medians of 5 repetitions (the slow mode would have to hit 3 of 5). Reno IW3 and
CUBIC IW10 end within 30 ms of each other (Reno slightly ahead; a raw-socket setup had
measured 1.55 vs 1.70 s): the test holds their medians within 150 ms.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_iw32_beats_iw10_and_reno_iw3_ends_with_cubic_iw10_against_a_cubic_long_flow(tmp_path):
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(ROOT / "scenarios" / "blitzstart-table1.yaml"),
                          "--profiles", "dsl-fast", "--sizes", "2MB", "--variants", "cubic-iw32,cubic-iw10,reno-iw3",
                          "--reps", "5", "--out", str(out), "--json"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    fct = {r["variant"]: float(r["fct_median_s"]) for r in csv.DictReader(open(out / "summary.csv"))}
    print(fct)
    assert fct["cubic-iw32"] < fct["cubic-iw10"] - 0.2, fct
    assert abs(fct["reno-iw3"] - fct["cubic-iw10"]) < 0.15, fct
