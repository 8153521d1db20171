"""hosts/bpf/build.sh run by two lanes at once (a campaign's lanes each build before their
first run): both finish and every object is whole."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parent.parent / "hosts" / "bpf" / "build.sh"
# the shared programs and every scheme's congestion controls (beside its Python module)
FOLDERS = (BUILD.parent, BUILD.parent.parent / "implementations")
SOURCES = sorted(p.name.replace(".bpf.c", ".bpf.o") for folder in FOLDERS for p in folder.glob("*.bpf.c"))


def test_two_builds_at_once_both_succeed(tmp_path: Path) -> None:
    if shutil.which("clang") is None or not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("clang or the kernel's BTF is missing (playbooks/site.yml installs clang)")
    env = {**os.environ, "STARTLAB_BPF_OUT": str(tmp_path)}
    builders = [subprocess.Popen([str(BUILD)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    results = [(b.wait(timeout=600), b.stderr.read()) for b in builders]
    assert [rc for rc, _ in results] == [0, 0], results
    assert sorted(p.name for p in tmp_path.glob("*.bpf.o")) == SOURCES
    assert not list(tmp_path.glob("*.tmp"))
    for obj in tmp_path.glob("*.bpf.o"):
        assert obj.read_bytes()[:4] == b"\x7fELF", obj


def test_the_same_sources_build_the_same_objects_in_any_checkout(tmp_path: Path) -> None:
    """Two checkouts at different paths, each building into a directory of its own, give
    the same bytes: the objects name no path of either (the virtual clock's bundle carries
    them, and a guest's run is then the same whichever checkout built them)."""
    if shutil.which("clang") is None or not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("clang or the kernel's BTF is missing (playbooks/site.yml installs clang)")
    built = []
    for name in ("one", "another-checkout"):
        top = tmp_path / name
        shutil.copytree(BUILD.parent, top / "hosts" / "bpf", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        (top / "hosts" / "implementations").mkdir()
        shutil.copy(FOLDERS[1] / "careful_resume.bpf.c", top / "hosts" / "implementations")
        out = tmp_path / f"objects-of-{name}"
        r = subprocess.run([str(top / "hosts" / "bpf" / "build.sh")], env={**os.environ, "STARTLAB_BPF_OUT": str(out)},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        objects = {p.name: p.read_bytes() for p in sorted(out.glob("*.bpf.o"))}
        for obj, data in objects.items():
            assert str(top).encode() not in data and str(out).encode() not in data, obj
        built.append(objects)
    assert "careful_resume.bpf.o" in built[0] and built[0] == built[1]
