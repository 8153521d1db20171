#!/usr/bin/env python3
"""startlab command line: a thin layer over scenarios → topologies → hosts → results → analysis."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _ensure_environment() -> None:
    """Run under the project's venv, provisioning the machine first if it is not yet.

    A fresh checkout has no venv and no native builds; rather than failing, provision
    (quick and a no-op once done), then re-execute this script with the venv's python.
    """
    if os.environ.get("STARTLAB_NO_REEXEC") or Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        return
    bootstrap = ROOT / "playbooks" / "bootstrap.sh"
    result = subprocess.run([str(bootstrap)], stdout=sys.stderr)
    if result.returncode != 0:
        sys.exit(result.returncode)
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])


if __name__ == "__main__":
    _ensure_environment()
    sys.path.insert(0, str(ROOT))
    from cli.main import main
    sys.exit(main(sys.argv[1:]))
