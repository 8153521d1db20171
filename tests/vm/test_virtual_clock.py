"""The virtual clock (machine/vm/icount.py), booted for real: a stock-kernel guest under
QEMU's instruction-counted time runs a campaign, and a second boot of the same checkout and
seed runs it again beside a busy loop on the host (both boots beside the step's other guests:
tests/vm/conftest.py).

On the virtual clock a timing figure has one outcome: the same run gives the same figures
whatever the host does, so the test asserts identity, file for file, and every run's record
of the clock it ran on; nothing here depends on this host's timers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
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


def campaign(busy_loops: int, dest: Path, stop) -> Path:
    """The campaign in a guest, into `dest`, with `busy_loops` busy loops on the host
    beside it; a failed command raises with its output."""
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(busy_loops)]
    try:
        out = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", *CAMPAIGN, "--clock", "virtual",
                              "--out", str(dest / "campaign"), "--json"], capture_output=True, text=True,
                             env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, timeout=1800)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    sys.stderr.write(out.stderr)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-1500:]}"
    return dest / "campaign"


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
        "6.1 campaign, second boot beside a busy loop": Job(partial(campaign, 1), ("6.1",), 150),
        "6.1 night": Job(night, ("6.1",), 140)}


def test_a_campaign_on_the_virtual_clock_is_the_same_in_two_boots_whatever_the_host_does(guests: dict) -> None:
    runs = [guests[name].result() for name in ("6.1 campaign, first boot",
                                               "6.1 campaign, second boot beside a busy loop")]
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
