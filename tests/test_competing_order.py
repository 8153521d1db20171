"""Root integration: the competing experiment's ordering as measured with a CUBIC long flow.

With the long flow running CUBIC (declared and read back from the kernel), a 2 MB
transfer on dsl-fast measured: CUBIC IW32 1.35 s, Reno IW3 1.55 s, CUBIC IW10 1.70 s (sd
≤ 18 ms over 6–8 repetitions). IW32 beats IW10 by its larger first flight. Reno IW3
beating CUBIC IW10 is what was measured (the traces showed both losing early into the
full queue and CUBIC's TCP-friendly growth afterwards being the slower). The gaps
(150–350 ms) are ten times the spread, so one repetition each decides the order.
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
def test_iw32_and_reno_iw3_beat_cubic_iw10_against_a_cubic_long_flow(tmp_path):
    out = tmp_path / "campaign"
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", str(ROOT / "scenarios" / "blitzstart-table1.yaml"),
                          "--profiles", "dsl-fast", "--sizes", "2MB", "--variants", "cubic-iw32,cubic-iw10,reno-iw3",
                          "--reps", "1", "--out", str(out), "--json"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    fct = {r["variant"]: float(r["fct_mean_s"]) for r in csv.DictReader(open(out / "summary.csv"))}
    print(fct)
    assert fct["cubic-iw32"] < fct["cubic-iw10"] and fct["reno-iw3"] < fct["cubic-iw10"], fct
