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

from analysis.stats import t_interval
from analysis.tidy import tidy_rows
from analysis.workloads.competing import ANALYSIS, FCT
from results.campaign import load_campaign
from conftest import ROOT

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CAMPAIGNS = ["campaign-v1", "campaign-v1-sweep"]


def unpack(name: str, into: Path) -> Path:
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(into)              # our own fixture: trusted content
    return into / name


def _key(row: dict) -> tuple:
    return tuple(row[k] or "" for k in ("profile", "size_bytes", "sweep_param", "sweep_value", "variant", "model",
                                          "mode", "figure"))


def _level_ci(row: dict) -> bool:
    """A figure row holding a level's interval (format 1 had such columns of their own)."""
    return "_ci_low" in row["figure"] or "_ci_high" in row["figure"]


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
    after, figures = read_csv(root / "summary.csv"), read_csv(root / "figures.csv")
    # The old summary (one wide row per cell) in today's tidy tables (analysis.tidy: the
    # conversion old summary.json files are upgraded with), against the re-analysis.
    old_summary, old_figures = tidy_rows(ANALYSIS, [{k: v if v != "" else None for k, v in r.items()}
                                                    for r in before])
    assert len(after) == len(old_summary) == len(before) > 0
    # Every figure of the old summary, value for value, except the levels' intervals, whose
    # method changed on purpose in summary format 3 (a bootstrap, none below 3 runs:
    # analysis.stats.CI_METHOD); the differences' intervals are still Welch's and compared.
    not_compared = {"ci_low", "ci_high", "fct_ci_low_s", "fct_ci_high_s"}
    # Columns the old format did not have (the emulator counts came later) are not compared.
    not_compared |= {"emulator_flagged_runs", "flow_check_failed_runs"} - set(before[0])
    new_by_key = {_key(f): f for f in figures}
    skipped = 0
    for old_rows, new_rows in ((old_summary, after), (old_figures, None)):
        for i, old in enumerate(old_rows):
            new = new_rows[i] if new_rows is not None else new_by_key[_key(old)]
            old = {k: "" if v is None else v for k, v in old.items()}
            kept = [k for k in old if k not in not_compared and k != "value" or k == "value" and not _level_ci(old)]
            skipped += len(old) - len(kept)
            assert {k: new[k] for k in kept} == {k: old[k] for k in kept}, old
    assert skipped > 0
    # The levels' intervals left out above, by the format-1 method (Student's t over the
    # runs, analysis.stats.t_interval) from the re-analysed runs: the old values, so the
    # re-analysis agrees on every figure the old summary had.
    _, records = load_campaign(root)
    fcts: dict[tuple, list[float]] = {}
    for rec in records:
        fcts.setdefault((rec.profile, str(rec.size_bytes), rec.variant, rec.sweep_value), []).append(FCT.get(rec))
    for old in before:
        sweep = float(old["sweep_value"]) if old.get("sweep_value") else None
        low, high = t_interval(fcts[(old["profile"], old["size_bytes"], old["variant"], sweep)])
        assert (low, high) == (pytest.approx(float(old["fct_ci_low_s"]), rel=1e-12),
                               pytest.approx(float(old["fct_ci_high_s"]), rel=1e-12)), old
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


def test_a_campaign_given_as_a_relative_path_hands_absolute_paths_to_the_hosts(tmp_path, monkeypatch):
    """`--out campaigns/x` (relative, as the docs write it): every path a run hands to an
    application in an emulated host (a web server's document root, a capture file) is
    absolute, since those processes do not share this one's working directory (a relative
    document root made lighttpd answer every request with 500)."""
    from results.campaign import Campaign
    from scenarios.runner import scratch_dir
    monkeypatch.chdir(tmp_path)
    from results import schema
    campaign = Campaign.create_or_resume(Path("campaigns/x"), {"format": schema.FORMAT, "scenario_hash": "h"})
    assert campaign.path == tmp_path / "campaigns" / "x" and campaign.path.is_absolute()
    assert campaign.start_run("r1").is_absolute() and scratch_dir(campaign.path).is_absolute()
    assert Campaign.open("campaigns/x").path == campaign.path
