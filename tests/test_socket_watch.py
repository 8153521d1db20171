"""The socket watch (hosts/socket_watch.py) ends when the startlab process that started it
is killed outright: its namespace would otherwise outlive every link `clean` knows it by,
and the next run on the node would find a stranger's process (a Slurm task killed with its
node left one)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCH = ROOT / "hosts" / "socket_watch.py"

# The owner: starts the watch, says its PID once the watch is watching, then waits to be killed.
OWNER = """
import subprocess, sys, time
w = subprocess.Popen([sys.executable, sys.argv[1], "9", "0.01", sys.argv[2]], stdout=subprocess.PIPE, text=True)
assert w.stdout.readline().strip() == "watching"
print(w.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_watch_ends_when_its_owner_is_killed(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(WATCH), str(tmp_path / "w.json")],
                             stdout=subprocess.PIPE, text=True)
    watch = int(owner.stdout.readline())
    try:
        time.sleep(0.2)
        assert _alive(watch), "the watch did not keep watching while its owner lived"
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 5
        while _alive(watch) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(watch), "the watch outlived its owner by 5 s"
        assert not (tmp_path / "w.json").exists(), "an orphaned watch wrote a report nobody reads"
    finally:
        if _alive(watch):
            os.kill(watch, signal.SIGKILL)
