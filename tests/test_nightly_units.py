"""The schedule playbooks/nightly.yml installs: its templates rendered as Ansible renders
them, the systemd units checked by `systemd-analyze verify` where it exists (else the test
says it was not checked), the cron entry read field by field."""
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

jinja2 = pytest.importorskip("jinja2", reason="jinja2 (Ansible's template engine) is not installed: "
                                              "the nightly unit templates were not checked")

TEMPLATES = ROOT / "playbooks" / "templates"


def playbook_vars() -> dict:
    """The playbook's defaults, with this checkout as the repository."""
    [play] = yaml.safe_load((ROOT / "playbooks" / "nightly.yml").read_text())
    values = {k: v for k, v in play["vars"].items() if "{{" not in str(v)}
    values.update(startlab_root=str(ROOT), startlab_nightly_config=str(ROOT / "config" / "nightly.yaml"))
    return values


def render(name: str, **extra) -> str:
    # Ansible's template module renders with trim_blocks on.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(**{**playbook_vars(), **extra})


@pytest.mark.parametrize("root", ["", "/srv/startlab-nightly"])
def test_systemd_units_verify(tmp_path, root):
    service = render("startlab-nightly.service.j2", startlab_nightly_root=root)
    timer = render("startlab-nightly.timer.j2")
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert exec_start.startswith(f"ExecStart={ROOT}/run.py nightly --once --config ")
    assert exec_start.endswith(f"--root {root}") if root else "--root" not in exec_start
    assert "OnCalendar=*-*-* 02:30:00" in timer and "Unit=startlab-nightly.service" in timer
    (tmp_path / "startlab-nightly.service").write_text(service)
    (tmp_path / "startlab-nightly.timer").write_text(timer)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the rendered units were NOT verified")
    result = subprocess.run([analyze, "verify", str(tmp_path / "startlab-nightly.service"),
                             str(tmp_path / "startlab-nightly.timer")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "startlab-nightly" not in result.stderr, result.stderr


def test_cron_entry(tmp_path):
    text = render("startlab-nightly.cron.j2", startlab_nightly_time="03:05", startlab_nightly_root="")
    assert text.endswith("\n")                      # cron ignores a last line without one
    [entry] = [line for line in text.splitlines() if line and not line.startswith("#") and "=" not in line.split()[0]]
    minute, hour, dom, month, dow, user, *command = entry.split()
    assert (minute, hour, dom, month, dow, user) == ("5", "3", "*", "*", "*", "root")
    command = " ".join(command)
    assert command.startswith(f"cd {ROOT} && flock -n ") and "./run.py nightly --once --config" in command
