"""The layering contracts (pyproject.toml, [tool.importlinter]) hold, and really check:
a forbidden import added to a copy of the tree breaks them."""
from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

from conftest import ROOT

PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
LINT = ROOT / ".venv" / "bin" / "lint-imports"


def lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})


def copy_tree(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "target", "*.rs"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_contracts_hold_on_the_tree():
    res = lint(ROOT)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "0 broken" in res.stdout


def test_a_forbidden_import_breaks_them(tmp_path):
    tree = copy_tree(tmp_path)
    assert lint(tree).returncode == 0
    stats = tree / "analysis" / "stats.py"
    stats.write_text(stats.read_text() + "\nfrom hosts import session  # noqa: E402 (the forbidden arrow)\n")
    res = lint(tree)
    assert res.returncode != 0
    assert "Results and analysis run without emulation" in res.stdout and "BROKEN" in res.stdout
    assert "analysis.stats -> hosts.session" in res.stdout, res.stdout[-2000:]
