"""Provisioning's stages: the demo's (core), everything (full), and everything with Vagrant
and libvirt (vagrant), chosen on bootstrap.sh's command line; a wrong stage is refused in one
line before anything is installed."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_an_unknown_stage_is_refused_before_anything_runs():
    out = subprocess.run([str(ROOT / "playbooks" / "bootstrap.sh"), "--stage", "most"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "--stage is core, full or vagrant, not most" in out.stderr


@pytest.mark.parametrize("stage", ["core", "full", "vagrant"])
def test_the_playbook_parses_in_each_stage(stage):
    if shutil.which("ansible-playbook") is None:
        pytest.fail("ansible-playbook is missing: provisioning installs it (playbooks/bootstrap.sh)")
    out = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "localhost,", "-e", f"startlab_stage={stage}",
                          str(ROOT / "playbooks" / "site.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
