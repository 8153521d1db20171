"""The netem and Open vSwitch path on a stock kernel: Debian 12's 6.1, booted in a VM from an
image built from Debian's packages (run.py kernels, machine/vm).

This kernel (the host's) has neither sch_netem nor the OVS datapath, so without a VM those
code paths would never run. The guest runs the smoke campaign with the netem delay backend
and OVS switches from this checkout, then `clean`, and the host judges what it left. The
guest is on the virtual clock (machine/vm/icount.py), so its timing is exact on any host and
the smoke cell is judged like any other: every run finished and none was flagged (under plain
TCG it could only be "not judged").

Its own step of `./startlab test` (after the main suite): the image build alone takes
minutes on a fresh machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "vm"))

from cli.kernels import SMOKE, smoke_profile  # noqa: E402
from jobs import Job  # noqa: E402
from scenarios.spec import Run, load_scenario  # noqa: E402


def smoke_in_guest(dest: Path, stop) -> tuple[subprocess.CompletedProcess, Path]:
    """`kernels --kernels 6.1 --checks smoke,clean --clock virtual`, the guest's files kept."""
    keep = dest / "guest"
    out = subprocess.run([sys.executable, str(ROOT / "run.py"), "kernels", "--kernels", "6.1",
                          "--checks", "smoke,clean", "--clock", "virtual", "--keep", str(keep), "--json"],
                         capture_output=True, text=True, env={**os.environ, "STARTLAB_NO_REEXEC": "1"},
                         timeout=3000)
    return out, keep


# About 200 s alone on an idle 2-core machine here (it orders the step's jobs).
JOBS = {"6.1 netem and OVS smoke": Job(smoke_in_guest, ("6.1",), 200)}


def test_netem_and_ovs_smoke_on_debian_6_1(guests: dict) -> None:
    out, keep = guests["6.1 netem and OVS smoke"].result()
    sys.stderr.write(out.stderr)
    [result] = json.loads(out.stdout)
    cells = result["cells"]
    assert result["release"].startswith("6.1."), result
    smoke, clean = cells["smoke"], cells["clean"]
    # On the virtual clock the guest's timing is exact: the cell is judged (every run
    # finished, none flagged), as under KVM.
    assert result["accel"] == "virtual", result
    assert smoke["status"] == "ok", smoke
    assert clean["status"] == "ok", clean
    # Every run of the campaign (each variant, one repetition) is accounted for: it
    # finished, or it failed with its error kept and named in the cell. Under KVM every run
    # finishes; under TCG a run may fail on the guest's slowness (the cell lists each), and
    # at least one must have run the whole path.
    # Under TCG on the low-rate profile the guest can carry (cli/kernels.py smoke_profile).
    scenario = load_scenario(ROOT / SMOKE)
    profile = smoke_profile(result["accel"]) or scenario.profiles[0].name
    expected = sorted(Run(profile, size, variant, 1).run_id
                      for size in scenario.sizes for variant in scenario.variants)
    smoke_dir = keep / "job-6.1" / "smoke"
    runs = sorted(d.name for d in smoke_dir.iterdir() if d.is_dir() and d.name.startswith(f"{profile}_"))
    finished = [r for r in runs if not r.endswith(".failed")]
    failed = [r.removesuffix(".failed") for r in runs if r.endswith(".failed")]
    assert sorted(finished + failed) == expected, (runs, smoke)
    for r in failed:
        assert (smoke_dir / f"{r}.failed" / "error.txt").is_file() and f"{r}.failed: " in smoke["detail"], smoke
    assert len(finished) == len(expected), smoke
    metas = [smoke_dir / r / "meta.json" for r in finished]
    for m in metas:
        meta = json.loads(m.read_text())
        assert (meta["link"]["delay_backend"], meta["link"]["switch"]) == ("netem", "ovs")
        assert meta["kernel"].startswith("6.1.")
        assert [f["observed_cc"] for f in meta["flows"] if f["name"] == "short"] != [[]]
    assert out.returncode == 0, out.stderr[-2000:]
