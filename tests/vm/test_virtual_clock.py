"""The virtual clock (machine/vm/icount.py), booted for real: a stock-kernel guest under
QEMU's instruction-counted time runs a campaign, and a second boot of the same checkout and
seed runs it again beside a busy loop on the host, started by an ordinary user (a cluster's
jobs do not run as root; QEMU's TCG needs no root, and the user boots a copy of the image
root built). Both boots run beside the step's other guests (tests/vm/conftest.py).

On the virtual clock a timing figure has one outcome: the same run gives the same figures
whatever the host does, so the test asserts identity, file for file, and every run's record
of the clock it ran on; nothing here depends on this host's timers.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "vm"))

from analysis import determinism  # noqa: E402
from machine import provenance  # noqa: E402
from machine.vm import icount  # noqa: E402
from results import nightly  # noqa: E402
from jobs import Job  # noqa: E402

# One variant, one short run: the smallest campaign with the whole path (tbf, netem, three
# captures, a competing long flow). At dsl-slow (25 Mbit/s), not the smoke scenario's
# dsl-fast: at 50 Mbit/s this workload is at the edge of the guest's one CPU, and one
# checkout's trajectory fell over it (the long flow held at 42 Mbit/s with no loss, the tbf
# behind a standing queue of ~160 packets: its dequeue starved), so whether the test ran
# would depend on the checkout's bytes.
CAMPAIGN = ["scenarios/smoke.yaml", "--profiles", "dsl-slow", "--variants", "cubic-iw10", "--reps", "1"]


# An ordinary user: nobody's uid, no groups, no home of its own.
USER = 65534


def as_user(argv: list[str], home: Path) -> list[str]:
    """`argv` as USER. Where an ancestor of the checkout is closed to other users (a clone in
    root's home), in a private mount namespace in which that ancestor is an empty directory
    open to all that holds the checkout at its own path: the machine's modes stay as they
    are, and the guest's bundle names the same path."""
    user = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--", *argv]
    closed = next((p for p in reversed(ROOT.parents) if not os.stat(p).st_mode & 0o001), None)
    if closed is None:
        return user
    script = ('set -e; mount --bind "$1" "$2"; mount -t tmpfs -o mode=755 startlab-view "$3"; '
              'mkdir -p "$1"; mount --move "$2" "$1"; shift 3; exec "$@"')
    (home / "checkout").mkdir()
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            str(ROOT), str(home / "checkout"), str(closed), *user]


def campaign(busy_loops: int, dest: Path, stop, user: bool = False) -> Path:
    """The campaign in a guest, into `dest`, with `busy_loops` busy loops on the host
    beside it, started by root or by an ordinary user (in a home of its own under /tmp,
    removed after: its copy of the image, its registry); a failed command raises with its
    output."""
    argv = [sys.executable, str(ROOT / "run.py"), "run", *CAMPAIGN, "--clock", "virtual", "--json"]
    env = {**os.environ, "STARTLAB_NO_REEXEC": "1"}
    home = Path(tempfile.mkdtemp(prefix="startlab-user-", dir="/tmp")) if user else None
    out_dir = (home / "campaign") if home else (dest / "campaign")
    if home:
        os.chown(home, USER, USER)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "STARTLAB_NO_REEXEC": "1"}
        argv = as_user(argv, home)
    registry = Path("/tmp") / f"startlab-{USER}"
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(busy_loops)]
    try:
        out = subprocess.run([*argv, "--out", str(out_dir)], capture_output=True, text=True, env=env, timeout=1800)
        sys.stderr.write(out.stderr)
        assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-1500:]}"
        if home:
            # The user's boot registered its QEMU in a registry of the user's own and left it empty.
            assert registry.is_dir() and not list(registry.glob("*.json")), list(registry.iterdir())
            assert "copying the machine's VM image" in out.stderr, out.stderr[-1500:]
            shutil.copytree(out_dir, dest / "campaign")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        if home:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(registry, ignore_errors=True)
    return dest / "campaign"


def qemu_children(pid: int) -> list[int]:
    """The QEMU processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, rest = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        if comm.split("(", 1)[1].startswith("qemu-system") and int(rest.split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def interrupted(dest: Path, stop) -> dict:
    """The campaign on the virtual clock, interrupted once its guest runs: how long the
    command took to end after it, and what it left. By SIGTERM (a scheduler's cancel), which
    the command unwinds as it does Ctrl-C (cli.main): SIGINT cannot be used here, since a
    non-interactive shell that starts the suite in the background has its children ignore
    it (measured: the command then finished its run)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "run", *CAMPAIGN, "--clock", "virtual",
                             "--out", str(dest / "campaign")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
    try:
        deadline = time.monotonic() + 900
        qemus: list[int] = []
        while not qemus and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            qemus = qemu_children(proc.pid)
        assert qemus, f"no guest was started (exit {proc.poll()})"
        time.sleep(5)                       # booting: the run it was started for is far from done
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        return {"rc": proc.returncode, "ended_after_s": time.monotonic() - sent, "stderr": err,
                "qemu_left": [q for q in qemus if Path(f"/proc/{q}").exists()],
                "runs": sorted(d.name for d in (dest / "campaign").glob("*_r[0-9]*"))}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def night(dest: Path, stop) -> tuple[subprocess.CompletedProcess, Path]:
    """`nightly --once --clock virtual` of tests/vm/nightly-smoke.yaml, its root in `dest`."""
    config = Path(__file__).with_name("nightly-smoke.yaml")
    out = subprocess.run([sys.executable, str(ROOT / "run.py"), "nightly", "--once", "--config", str(config),
                          "--root", str(dest), "--clock", "virtual"], capture_output=True, text=True,
                         env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=1800)
    return out, dest


# Each about 150 s alone on an idle 2-core machine here (it orders the step's jobs); the two
# boots of the campaign are two jobs, so they may also run side by side.
JOBS = {"6.1 campaign, first boot": Job(partial(campaign, 0), ("6.1",), 150),
        "6.1 campaign, second boot by an ordinary user beside a busy loop":
            Job(partial(campaign, 1, user=True), ("6.1",), 170),
        "6.1 night": Job(night, ("6.1",), 140),
        "6.1 campaign, interrupted": Job(interrupted, ("6.1",), 30)}


def test_a_campaign_on_the_virtual_clock_is_the_same_in_two_boots_by_root_and_a_user_whatever_the_host_does(guests: dict) -> None:
    runs = [guests[name].result() for name in ("6.1 campaign, first boot",
                                               "6.1 campaign, second boot by an ordinary user beside a busy loop")]
    metas = sorted(runs[0].glob("*/meta.json"))
    assert len(metas) == 1, metas
    meta = json.loads(metas[0].read_text())
    clock = meta["run_clock"]
    assert clock["clock"] == "virtual" and clock["shift"] == 0 and clock["cpus"] == 1
    # Each run in a fresh guest whose seed is the run's own (the campaign's seed is 1).
    assert clock["kernel"].startswith("6.1.") and clock["qemu"] and clock["image"]
    assert clock["seed"] == icount.run_seed(1, meta["run_id"])
    assert meta["git_rev"] == provenance.git_revision()         # the guest's bundle has no history
    # The guest's own path: netem in its kernel, its CPU measured over the run, not saturated.
    assert meta["link"]["delay_backend"] == "netem"
    assert 0 < meta["guest_cpu"]["busy_fraction"] < 0.9
    assert meta["guest_interrupts"] and all(n > 0 for n in meta["guest_interrupts"].values())
    assert not (meta["host_check"].get("flags") or []), meta["host_check"]
    results = determinism.compare(runs)
    print(determinism.text(results, runs))
    assert len(results) == 1
    assert not results[0].differing_figures, determinism.text(results, runs)
    assert not results[0].differing_files and not results[0].missing_files, determinism.text(results, runs)
    # The host wrote the report from what the guest exported; the guest left nothing here.
    assert (runs[0] / "report.html").is_file()
    assert not list(runs[0].glob("*.partial"))


def test_a_night_on_the_virtual_clock_runs_its_scenario_in_a_guest(guests: dict) -> None:
    """`nightly --clock virtual` (tests/vm/nightly-smoke.yaml: the campaign above as a night):
    the scenario's campaign in a guest, no host check, the report and the verdict on the host.
    Its run is not byte-identical to the same campaign's `run --clock virtual`: the guest's
    state when the run starts (PIDs, hence the instance's name; the uptime) depends on the
    command that got it there, so identity holds per command line, as the test above checks."""
    out, root = guests["6.1 night"].result()
    sys.stderr.write(out.stderr)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-1500:]}"
    assert "first night" in out.stdout, out.stdout
    nights = nightly.finished_nights(root / "smoke")
    assert len(nights) == 1 and (nights[0] / "report.html").is_file(), nights
    doc = json.loads((root / "regressions.json").read_text())
    assert doc["failures"] == [] and doc["host_unfit"] is None, doc
    metas = sorted(nights[0].glob("*/meta.json"))
    assert len(metas) == 1, metas
    meta = json.loads(metas[0].read_text())
    assert meta["run_clock"]["clock"] == "virtual" and meta["run_clock"]["seed"] == icount.run_seed(1, meta["run_id"])
    assert meta["variant"] == "cubic-iw10" and meta["link"]["delay_backend"] == "netem"


def test_an_interrupted_campaign_stops_its_guests_at_once_and_keeps_no_half_run(guests: dict) -> None:
    """Ctrl-C (or SIGTERM) of `run --clock virtual`: the running guests are stopped within
    half a second (before, each finished its run first: a minute or more of wall time), their
    QEMU is gone, and the campaign holds no run, finished or partial."""
    got = guests["6.1 campaign, interrupted"].result()
    sys.stderr.write(got["stderr"])
    print(f"interrupted: exit {got['rc']}, ended {got['ended_after_s']:.1f} s after SIGTERM")
    assert got["rc"] == 130, got
    assert "interrupted" in got["stderr"], got["stderr"][-800:]
    # A bound for a loaded host: QEMU killed, its bundle and scratch removed. The run it
    # stopped needs a minute or more of wall time, which is what the command waited before.
    assert got["ended_after_s"] < 30, got
    assert got["qemu_left"] == [] and got["runs"] == [], got
