"""Root integration: two nights of the smoke scenario through `run.py nightly --once`, the
second with the variant under test given an initial window of 1 instead of 10 (an inline
variant in the nightly configuration, same name, so the same cell gets slower by about
three round trips). The second night must name that cell as regressed and fail.

A night calibrates the host first and runs nothing on an unfit one (exit 4): then the
reason must be in regressions.json and on the history page, and the test ends there."""
import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from timing import campaign_flags, timing_check, union

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]
ENV = {**os.environ, "STARTLAB_NO_REEXEC": "1"}

CONFIG = """format: 1
scenarios:
  - scenario: smoke
    reps: 4
    variants:
      - name: under-test
        server: {{impl: linux-tcp, cc: cubic, iw: {iw}}}
"""


def nightly_once(config: Path, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "run.py"), "nightly", "--once", "--config", str(config),
                           "--root", str(root)], capture_output=True, text=True, env=ENV, timeout=900)


def host_unfit_night(res: subprocess.CompletedProcess, root: Path, which: str) -> bool:
    """A night the host check refused (exit 4): its reason is where the user reads it
    (stderr, regressions.json, index.html's "Nights the host was unfit"), nothing ran, and
    the case is counted. False for any other exit."""
    if res.returncode != 4:
        return False
    doc = json.loads((root / "regressions.json").read_text())
    reason = doc["host_unfit"]
    assert reason and "cannot emulate" in reason and reason in res.stderr, (doc, res.stderr[-3000:])
    assert doc["regressions"] == [] and doc["failures"] == [] and doc["nights"] == [], doc
    page = html.unescape((root / "index.html").read_text())
    assert "Nights the host was unfit" in page, page[-3000:]
    timing_check(f"the {which} night ran on a host fit for its profiles", [reason], True,
                 "exit 4, nothing ran", shown=[page.split("Nights the host was unfit", 1)[1]])
    return True


def test_second_night_with_a_smaller_initial_window_regresses(tmp_path):
    root = tmp_path / "nightly"
    config = tmp_path / "nightly.yaml"

    config.write_text(CONFIG.format(iw=10))
    first = nightly_once(config, root)
    if host_unfit_night(first, root, "first"):
        return
    assert first.returncode == 0, first.stderr[-3000:]
    first_doc = json.loads((root / "regressions.json").read_text())
    assert first_doc["regressions"] == [] and first_doc["nights"][0]["previous"] is None

    config.write_text(CONFIG.format(iw=1))
    second = nightly_once(config, root)
    if host_unfit_night(second, root, "second"):
        return
    assert second.returncode in (0, 1), second.stdout[-2000:] + second.stderr[-3000:]
    # Seeing the regression is the nights' FCTs being what the emulator should make them:
    # a host that was late during the runs (their flags) may hide three RTTs in its noise.
    nights = [n for n in (root / "smoke").iterdir() if (n / "campaign.json").is_file()]
    flags = union(run_flags for n in nights for run_flags in campaign_flags(n)[0].values())
    timing_check("the second night's IW1 named as an FCT regression", flags, second.returncode == 1,
                 second.stdout.strip().splitlines()[0] if second.stdout.strip() else "no output")
    if second.returncode == 0:
        return
    assert "regressed: smoke dsl-fast 200KB under-test: FCT" in second.stderr

    doc = json.loads((root / "regressions.json").read_text())
    [night] = doc["nights"]
    previous, current = first_doc["nights"][0]["night"], night["night"]
    assert night["previous"] == previous and doc["failures"] == []
    [fct] = [r for r in doc["regressions"] if r["metric"] == "fct_s"]
    assert (fct["scenario"], fct["profile"], fct["size_bytes"], fct["variant"]) == \
        ("smoke", "dsl-fast", 200_000, "under-test")
    assert fct["nights"] == [previous, current]
    assert fct["current"]["mean"] - fct["previous"]["mean"] > 0.05      # more than one RTT of 50 ms
    for side in ("previous", "current"):
        assert fct[side]["runs"] == 4 and fct[side]["ci_low"] <= fct[side]["mean"] <= fct[side]["ci_high"]

    page = (root / "index.html").read_text()
    regressed_table = page.split("regressed</span>", 1)[1].split("<img", 1)[0]
    assert "dsl-fast" in regressed_table and "200KB" in regressed_table and "under-test" in regressed_table
    assert f"night {current} against {previous}" in page and "data:image/png;base64," in page
    for name in (previous, current):
        assert (root / "smoke" / name / "report.html").is_file()
