"""Root integration: `run.py fleet run smoke -i tests/inventory-local.ini` through real Ansible,
with one shard killed midway; the merged campaign still holds every run exactly once. The
shards run whatever their host calibration says (--unfit-host): this tests the fleet, not the host."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]
ENV = {**os.environ, "STARTLAB_NO_REEXEC": "1"}
WORKDIRS = Path("/tmp/startlab-fleet")          # tests/inventory-local.ini's working directories


def shard_process(host: str) -> int | None:
    """The `run.py run` of a host's shard (its argv names the host's working directory)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if any(w.endswith("run.py") for w in words) and "run" in words and \
                any(w.startswith(str(WORKDIRS / host)) for w in words):
            return int(entry.name)
    return None


def finished_in(host: str) -> list[str]:
    found = []
    for meta in WORKDIRS.glob(f"{host}/*/campaign/*/meta.json"):
        if meta.parent.name.endswith((".partial", ".failed")):
            continue                                     # only a renamed run dir counts as finished
        try:
            if json.loads(meta.read_text()).get("status") == "done":
                found.append(meta.parent.name)
        except (OSError, ValueError):
            pass
    return found


def test_fleet_survives_a_killed_shard_and_merges_every_run_once(tmp_path):
    shutil.rmtree(WORKDIRS, ignore_errors=True)
    out = tmp_path / "campaign"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "fleet", "run", "smoke", "-i",
                             "tests/inventory-local.ini", "--out", str(out), "--json", "--unfit-host"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    killed = None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if finished_in("local-a"):                   # midway: one of its two runs is done
                killed = shard_process("local-a")
                if killed:
                    os.kill(killed, signal.SIGKILL)
                    break
            time.sleep(0.5)
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
    try:
        assert killed, f"never saw local-a's shard with a finished run: {stderr[-2000:]}"
        assert proc.returncode == 0, stderr[-3000:]
        figures = json.loads(stdout)
        stats = figures["run_stats"]
        assert list(stats["failed_hosts"]) == ["local-a"], stats
        assert [r["round"] for r in stats["rounds"]] == [1, 2]
        assert stats["rounds"][1]["hosts"] == {"local-b": 1}, stats["rounds"]

        metas = [json.loads((p / "meta.json").read_text()) for p in out.iterdir() if (p / "meta.json").exists()]
        ids = sorted(m["run_id"] for m in metas)
        assert ids == sorted(f"dsl-fast_200KB_{v}_r{r:02d}" for v in ("cubic-iw10", "reno-iw3") for r in (1, 2))
        assert all(m["status"] == "done" for m in metas)
        hosts = [m["host"] for m in metas]
        # local-a's finished run was fetched and kept (never redone); the rest ran on local-b
        assert hosts.count("local-a") == 1 and hosts.count("local-b") == 3, hosts
        assert not list(out.glob("*.partial")) and not list(out.glob("*.failed")) and not list(out.glob(".merging-*"))
        assert (out / "summary.csv").is_file() and (out / "report.html").is_file()
    finally:
        shutil.rmtree(WORKDIRS, ignore_errors=True)
