#!/usr/bin/env python3
"""startlab command line: a thin layer over scenarios → topologies → hosts → results → analysis."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
sys.path.insert(0, str(ROOT))

from cli.main import RESULT_COMMANDS, main  # noqa: E402  (needs ROOT on the path)


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _ensure_environment(argv: list[str]) -> None:
    """Run under the project's venv, provisioning the machine first if it is not yet.

    A fresh checkout has no venv and no native builds; rather than failing, provision
    (quick and a no-op once done), then re-execute this script with the venv's python.
    Commands that only read and write result files never provision (they need no root):
    they use the venv where there is one, else this interpreter. Nor does an ordinary user,
    who cannot: they use the venv root provisioned (the virtual clock needs no root).
    """
    in_venv = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()
    if os.environ.get("STARTLAB_NO_REEXEC") or in_venv:
        return
    user = os.geteuid() != 0
    if _command(argv) in RESULT_COMMANDS or user:
        if os.access(VENV_PYTHON, os.X_OK):
            os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *argv])
        if user and _command(argv) not in RESULT_COMMANDS:
            sys.exit("startlab: this checkout is not provisioned yet, and provisioning needs root: "
                     "run `sudo ./run.py doctor` once")
        return
    bootstrap = ROOT / "playbooks" / "bootstrap.sh"
    result = subprocess.run([str(bootstrap)], stdout=sys.stderr)
    if result.returncode != 0:
        sys.exit(result.returncode)
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *argv])


if __name__ == "__main__":
    _ensure_environment(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
