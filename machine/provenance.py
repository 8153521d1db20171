"""Where a result came from: code revision, kernel, tool versions (for every meta.json)."""
from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(checkout: Path) -> list[str]:
    """git in `checkout`, whoever owns it: a cluster's user runs a checkout another user
    cloned, which git otherwise refuses as of dubious ownership."""
    return ["git", "-c", "safe.directory=*", "-C", str(checkout)]


def git_revision(checkout: Path = ROOT) -> str | None:
    """HEAD's commit, with '-dirty' when tracked files differ from it."""
    try:
        rev = subprocess.run([*git(checkout), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run([*git(checkout), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not rev:
        return None
    return rev + ("-dirty" if dirty else "")


@lru_cache(maxsize=1)
def provenance() -> dict:
    from machine.capabilities import tool_versions
    # `host` names the testbed (a cluster's node on the real clock; on the virtual clock the
    # guest, and `slurm` the node); `git_rev` comes from the environment where the code has
    # no history: the virtual clock's guest runs a bundle of the files (machine/vm/icount.py).
    return {"git_rev": os.environ.get("STARTLAB_GIT_REV") or git_revision(), "kernel": os.uname().release,
            "machine": os.uname().nodename, "host": os.uname().nodename,
            "cpus": os.cpu_count(), "tools": tool_versions(),
            **({"slurm": slurm_task()} if slurm_task() else {})}


# Slurm's environment of an array task, as meta.json's `slurm` keeps it. On the virtual clock
# the task's job script passes them into the guest, where the runs' meta.json is written.
SLURM_ENV = {"job": "SLURM_ARRAY_JOB_ID", "task": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME",
             "restarts": "SLURM_RESTART_COUNT"}


def slurm_task() -> dict:
    """The Slurm job, array task, node and restart count this process runs in ({} outside one)."""
    if "SLURM_ARRAY_JOB_ID" not in os.environ:
        return {}
    return {k: os.environ.get(v, "0" if k == "restarts" else "") for k, v in SLURM_ENV.items()}
