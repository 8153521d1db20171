"""Campaigns written by older startlab formats are upgraded on load and re-analysed to the
same figures; analysis and reports need neither root nor Mininet."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CAMPAIGNS = ["campaign-v1", "campaign-v1-sweep"]


def unpack(name: str, into: Path) -> Path:
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(into)              # our own fixture: trusted content
    return into / name


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", CAMPAIGNS)
def test_reanalysis_of_a_format1_campaign_gives_the_same_summary(tmp_path, name):
    root = unpack(name, tmp_path)
    before = read_csv(root / "summary.csv")           # as the format-1 revision computed it
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "analyze", str(root), "--json"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    after = read_csv(root / "summary.csv")
    assert len(after) == len(before) > 0
    # Every column of the old summary, value for value, except the levels' intervals, whose
    # method changed on purpose in summary format 3 (a bootstrap, none below 3 runs:
    # analysis.stats.CI_METHOD); the differences' intervals are still Welch's and compared.
    for old, new in zip(before, after):
        kept = [k for k in old if not (("_ci_low" in k or "_ci_high" in k) and "_diff_" not in k)]
        assert {k: new[k] for k in kept} == {k: old[k] for k in kept}
        assert len(kept) < len(old)
    meta = (root / next(p.name for p in root.iterdir() if (p / "metrics.json").exists()) / "meta.json").read_text()
    assert '"format": 3' in meta                       # upgraded and written back in today's format
    assert (root / "report.html").stat().st_size > 0


def test_analyze_and_report_run_unprivileged_without_mininet():
    """As user nobody, with a Python where `import mininet` fails, through run.py as a user
    types it (run.py picks the project's venv itself, without provisioning)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user")
    work = Path(tempfile.mkdtemp(prefix="startlab-unprivileged-"))
    try:
        root = unpack(CAMPAIGNS[0], work)
        blocker = work / "no-mininet" / "mininet"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('mininet is not available here')\n")
        for path in [work, *work.rglob("*")]:
            os.chown(path, 65534, 65534)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
               "PYTHONPATH": str(work / "no-mininet"), "MPLCONFIGDIR": str(work / "mpl")}
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run(as_nobody + [str(ROOT / ".venv" / "bin" / "python"), "-c", "import mininet"],
                               capture_output=True, text=True, env=env)
        assert probe.returncode != 0 and "mininet is not available" in probe.stderr
        for command in ("analyze", "report"):
            res = subprocess.run(as_nobody + ["/usr/bin/python3", str(ROOT / "run.py"), command, str(root)],
                                 capture_output=True, text=True, env=env, timeout=300)
            assert res.returncode == 0, (command, res.stdout[-1000:], res.stderr[-2000:])
            assert "report:" in res.stdout
        assert (root / "report.html").stat().st_uid == 65534
    finally:
        shutil.rmtree(work, ignore_errors=True)
