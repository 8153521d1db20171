"""Every variant is loaded into the running kernel before a campaign builds a network, and
one this kernel cannot load is refused with the kernel's reason (exit 2) before anything
is built or written. doctor lists the catalogue's variants the same way."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from hosts.variants import VARIANTS
from machine import binaries, kmod

SCENARIO = """format: 1
name: unloadable
profiles: [dsl-fast]
sizes: [70KB]
workload:
  kind: competing
variants:
  - cubic-iw10
  - name: iw20
    server: {impl: cubic-iw20}
baseline: cubic-iw10
repetitions: 1
"""


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "STARTLAB_NO_REEXEC": "1", **(env or {})}, timeout=300)


@pytest.mark.usefixtures("clean_machine")
def test_every_catalogue_variant_loads_on_this_kernel_and_doctor_says_so() -> None:
    out = _run("doctor", "--json", "--no-host")
    report = json.loads(out.stdout)
    assert set(report["variants"]) == set(VARIANTS)
    refused = {n: v["reason"] for n, v in report["variants"].items() if not v["available"]}
    # A variant with a kernel module of ours runs only where the kernel loads modules: on a
    # kernel that cannot, doctor must give that reason (the stock-kernel guest runs them).
    cannot = kmod.cannot_load()
    if cannot:
        for name in (n for n, v in VARIANTS.items() if v.kernel_modules()):
            assert cannot in refused.pop(name, ""), f"{name}: {report['variants'][name]}"
    assert refused == {}, f"variants this kernel ({os.uname().release}) does not load: {refused}"


@pytest.mark.usefixtures("clean_machine")
def test_a_variant_the_kernel_cannot_load_is_refused_before_any_network(tmp_path: Path) -> None:
    # The iw20 scheme's object, damaged and newer than its source: build.sh keeps it, the
    # kernel refuses it, as it would refuse a program its verifier rejects.
    objects = tmp_path / "bpf"
    shutil.copytree(binaries.BPF_OBJECTS, objects, ignore=shutil.ignore_patterns(".build.lock"))
    damaged = objects / "cubic_iw20.bpf.o"
    damaged.write_bytes(damaged.read_bytes()[:200])
    scenario = tmp_path / "unloadable.yaml"
    scenario.write_text(SCENARIO)
    out = _run("run", str(scenario), "--out", str(tmp_path / "campaign"), env={"STARTLAB_BPF_OUT": str(objects)})
    assert out.returncode == 2, out.stderr
    assert "variant iw20 cannot run on this kernel" in out.stderr
    assert "its server part (cubic-iw20): cubic_iw20.bpf.o does not load" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "campaign").exists(), "a refused campaign wrote a directory"


@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("what, kwargs, said", [
    ("per-pair delays", {"pair_rtts_ms": {(1, 1): 120.0}}, "per-pair RTTs are applied by the delay line, not by netem"),
    ("the delay line's queue", {"shaper": "delayline"}, "the delayline shaper lives in the delayline delay element"),
])
def test_what_only_the_delay_line_does_is_refused_on_netem_by_name(tmp_path: Path, what, kwargs, said) -> None:
    """Never silently changed: asked for netem, a network that needs the delay line is
    refused before anything is built."""
    from links import shapers
    from links.profiles import get_profile
    from machine.errors import UserError
    from topologies.network import Network
    if "shaper" in kwargs:
        kwargs = {"shaper": shapers.from_cli(kwargs["shaper"])}
    net = Network(get_profile("dsl-fast"), tmp_path / "net", delay_backend="netem", **kwargs)
    with pytest.raises(UserError, match=said):
        net.build()
    assert net.instance is None, f"{what}: something was built"
