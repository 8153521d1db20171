"""The virtual clock's pure parts: the export stream, the guest CPU figures, QEMU's command
line and the bundle (no guest is booted here; tests/vm/test_virtual_clock.py boots them)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import clock  # noqa: E402
from machine.vm import icount  # noqa: E402
from machine.vm.image import Image, Kernel  # noqa: E402
from results import export  # noqa: E402


def _run_dir(base: Path, name: str, payload: bytes) -> Path:
    d = base / name
    (d / "sub").mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"run_id": name}))
    (d / "sub" / "cap.pcap").write_bytes(payload)
    return d


def test_export_records_round_trip_and_an_incomplete_record_waits(tmp_path: Path) -> None:
    port = tmp_path / "stream"
    export.export(_run_dir(tmp_path / "g", "run-a", b"\x00\x01" * 5000), "run-a", str(port))
    export.export(_run_dir(tmp_path / "g", "run-b", b"x"), "run-b", str(port))
    whole = port.read_bytes()
    port.write_bytes(whole[:-10])                    # the guest was killed mid-record
    recs, offset = export.records(port)
    assert [n for n, _ in recs] == ["run-a"]
    dest = tmp_path / "host"
    dest.mkdir()
    export.unpack(*recs[0], dest)
    assert (dest / "run-a" / "sub" / "cap.pcap").read_bytes() == b"\x00\x01" * 5000
    assert not list(dest.glob("*.partial"))
    port.write_bytes(whole)                          # the rest arrives: read on from the offset
    recs, _ = export.records(port, offset)
    assert [n for n, _ in recs] == ["run-b"]


def test_the_same_directory_exports_the_same_bytes(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, "run", b"abc")
    assert export._tar(d) == export._tar(d)


def test_export_refuses_a_record_outside_the_campaign_and_garbage(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, "run", b"abc")
    data = export._tar(d)
    with pytest.raises(ValueError):
        export.unpack("../escape", data, tmp_path / "host")
    bad = tmp_path / "bad"
    bad.write_bytes(b"hello world\n")
    with pytest.raises(ValueError, match="not an export record"):
        export.records(bad)


def test_campaign_files_merge_into_the_campaign_top(tmp_path: Path) -> None:
    files = tmp_path / "g" / export.CAMPAIGN_FILES
    (files / "networks" / "n1").mkdir(parents=True)
    (files / "campaign.json").write_text("{}")
    dest = tmp_path / "host"
    dest.mkdir()
    export.unpack(export.CAMPAIGN_FILES, export._tar(files), dest)
    export.merge_campaign_files(dest)
    assert (dest / "campaign.json").is_file() and (dest / "networks" / "n1").is_dir()
    assert not (dest / export.CAMPAIGN_FILES).exists()


def test_guest_cpu_busy_fraction_and_its_flag(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\n")
    before = clock.cpu_times(stat)
    assert before == (150, 1000)
    stat.write_text("cpu  1050 0 50 850 50 0 0 0 0 0\n")
    busy = clock.busy_fraction(before, clock.cpu_times(stat))
    assert busy == pytest.approx(950 / 1000)
    assert clock.saturation_flags(busy) and "busy 95%" in clock.saturation_flags(busy)[0]
    assert clock.saturation_flags(0.5) == [] and clock.saturation_flags(None) == []


def test_a_failed_runs_message_says_how_busy_the_guest_cpu_was(monkeypatch) -> None:
    monkeypatch.setattr(clock, "is_virtual", lambda: False)
    assert clock.failure_note((0, 0)) == ""
    monkeypatch.setattr(clock, "is_virtual", lambda: True)
    monkeypatch.setattr(clock, "cpu_times", lambda: (990, 1000))
    note = clock.failure_note((0, 0))
    assert "busy 99%" in note and "saturated" in note and "lower-rate profile" in note
    monkeypatch.setattr(clock, "cpu_times", lambda: (400, 1000))
    assert "busy 40%" in clock.failure_note((0, 0)) and "saturated" not in clock.failure_note((0, 0))


def test_the_clock_record_comes_from_the_bundle(tmp_path: Path, monkeypatch) -> None:
    clock.record.cache_clear()
    monkeypatch.delenv("STARTLAB_CLOCK_FILE", raising=False)
    assert clock.record() == {"clock": "real"} and not clock.is_virtual()
    f = tmp_path / "clock.json"
    f.write_text(json.dumps({"shift": 0, "seed": 7}))
    monkeypatch.setenv("STARTLAB_CLOCK_FILE", str(f))
    clock.record.cache_clear()
    assert clock.record() == {"clock": "virtual", "shift": 0, "seed": 7} and clock.is_virtual()
    clock.record.cache_clear()


def _fake_image(tmp_path: Path) -> Image:
    d = tmp_path / "img"
    d.mkdir()
    (d / "root.ext4").write_bytes(b"\0" * 4096)
    for f in ("vmlinuz-6.1.0-1-amd64", "initrd.img-6.1.0-1-amd64"):
        (d / f).write_bytes(b"k")
    (d / "manifest.json").write_text(json.dumps({"kernels": {"6.1": {
        "release": "6.1.0-1-amd64", "vmlinuz": "vmlinuz-6.1.0-1-amd64", "initrd": "initrd.img-6.1.0-1-amd64"}}}))
    return Image(d)


def test_qemu_runs_on_instruction_counted_time_with_nothing_asynchronous(tmp_path: Path) -> None:
    img = _fake_image(tmp_path)
    bundle = tmp_path / "bundle.ext4"
    bundle.write_bytes(b"\0" * icount.ALIGN)
    a = icount.argv(img, Kernel("6.1", "bookworm", "Debian 12"), bundle, Path("/co"), tmp_path / "job", seed=42)
    line = " ".join(a)
    assert "-icount shift=0,sleep=off,align=off" in line and "-seed 42" in line
    assert "-accel tcg,thread=single" in line and "-smp 1" in line and "clock=vm" in line
    assert "ioeventfd=off" in line
    # No disk, no 9p share, no network: the host's I/O timing cannot reach the guest.
    assert not any(x in a for x in ("-drive", "-virtfs", "-hda")) and "-nic none" in line
    assert line.count("nvdimm,") == 2 and "share=off" in line


@pytest.mark.skipif(subprocess.run(["which", "mkfs.ext4"], capture_output=True).returncode != 0,
                    reason="mkfs.ext4 missing")
def test_the_same_files_make_the_same_bundle_byte_for_byte(tmp_path: Path) -> None:
    co = tmp_path / "co"
    (co / "pkg").mkdir(parents=True)
    (co / "pkg" / "mod.py").write_text("X = 1\n")
    (co / "run.py").write_text("print('hi')\n")
    subprocess.run(["git", "init", "-q", str(co)], check=True)
    subprocess.run(["git", "-C", str(co), "add", "."], check=True)
    subprocess.run(["git", "-C", str(co), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x"],
                   check=True)
    bpf = tmp_path / "bpf"
    bpf.mkdir()
    (bpf / "vmlinux.h").write_text("/* btf */\n")
    (bpf / "a.bpf.o").write_bytes(b"ELF")
    images, digests = [], []
    for n, (job, seed) in enumerate([("true\n", 1), ("true\n", 1), ("false\n", 2)]):
        work = tmp_path / f"w{n}"
        work.mkdir()
        img, clock = icount.make_bundle(co, work, job, {"seed": seed}, bpf)
        assert clock["seed"] == seed
        images.append(img.read_bytes())
        digests.append(clock["bundle"])
    assert images[0] == images[1] != images[2]
    # The clock record names the checkout's files, whatever the job and the seed.
    assert digests[0] == digests[1] == digests[2]
    (co / "pkg" / "mod.py").write_text("X = 2\n")
    work = tmp_path / "w3"
    work.mkdir()
    assert icount.make_bundle(co, work, "true\n", {"seed": 1}, bpf)[1]["bundle"] != digests[0]
    assert len(images[0]) % icount.ALIGN == 0
    # The bundle has no history: it carries the checkout's revision for the runs' meta.json.
    rev = subprocess.run(["git", "-C", str(co), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp_path / "b.ext4").write_bytes(images[0])
    carried = subprocess.run(["debugfs", "-R", f"cat /{icount.BUNDLE_DIR}/git_rev", str(tmp_path / "b.ext4")],
                             capture_output=True, text=True).stdout
    assert carried == rev


def test_clean_removes_the_scratch_of_a_dead_boot_and_keeps_a_live_ones(tmp_path: Path, monkeypatch) -> None:
    from machine import cleanup
    from machine.vm import image
    monkeypatch.setattr(image, "CACHE_DIR", tmp_path)
    key = tmp_path / "0123456789abcdef"
    dead = key / ".virtual-99999999-x1"
    live = key / f".virtual-{__import__('os').getpid()}-x2"
    other = key / ".hidden-thing"
    for d in (dead, live, other):
        d.mkdir(parents=True)
    removed = cleanup.remove_dead_vm_scratch()
    assert removed == [f"virtual clock scratch {dead}"]
    assert not dead.exists() and live.exists() and other.exists()


def test_a_runs_guest_seed_is_its_own_and_the_same_every_time() -> None:
    a = icount.run_seed(1, "dsl-slow_200KB_cubic-iw10_r01")
    assert a == icount.run_seed(1, "dsl-slow_200KB_cubic-iw10_r01")
    # Repetitions, and the same run under another campaign seed, draw other randomness.
    assert a != icount.run_seed(1, "dsl-slow_200KB_cubic-iw10_r02")
    assert a != icount.run_seed(2, "dsl-slow_200KB_cubic-iw10_r01")
    assert 0 <= a < 2 ** 31


def test_a_runs_guest_job_names_that_run_alone() -> None:
    """The job is the same whatever else the campaign, its batch or its cluster task holds:
    the guest, and with it the run's figures, then are too."""
    from cli.virtual import run_job
    selection = ["run", "/co/scenarios/smoke.yaml", "--profiles", "dsl-slow"]
    job = run_job(selection, "dsl-slow_200KB_reno-iw3_r01", "auto")
    assert job == run_job(list(selection), "dsl-slow_200KB_reno-iw3_r01", "auto")
    assert "dsl-slow_200KB_reno-iw3_r01" in job and "cubic" not in job
    assert "--profiles dsl-slow" in job and "--delay-backend auto" in job


def test_guests_side_by_side_are_at_most_the_cpus_this_process_may_use() -> None:
    import os
    n = icount.guests_at_once()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_the_kernel_objects_directory_follows_the_sources_contents_not_their_times_or_place(tmp_path: Path) -> None:
    """Checkouts share a guest build only when their sources are the same: an older source
    in one checkout never takes the objects another built (build.sh judges by times)."""
    import os
    import shutil
    digests = []
    for name in ("one", "two"):
        top = tmp_path / name
        for folder in icount.KERNEL_OBJECT_SOURCES:
            shutil.copytree(ROOT / folder, top / folder, ignore=shutil.ignore_patterns("__pycache__"))
        digests.append(icount.kernel_object_digest(top))
    assert digests[0] == digests[1]
    src = tmp_path / "two" / "hosts" / "implementations" / "careful_resume.bpf.c"
    os.utime(src, (0, 0))
    assert icount.kernel_object_digest(tmp_path / "two") == digests[0]
    src.write_text(src.read_text() + "\n")
    assert icount.kernel_object_digest(tmp_path / "two") != digests[0]
    (tmp_path / "one" / "hosts" / "implementations" / "notes.py").write_text("# not a kernel source\n")
    assert icount.kernel_object_digest(tmp_path / "one") == digests[0]


def _built_image(cache: Path, key: str, mtime: float) -> None:
    d = cache / key
    (d / "bpf-6.1.0-1-amd64-abc").mkdir(parents=True)
    (d / "bpf-6.1.0-1-amd64-abc" / "a.bpf.o").write_bytes(b"ELF")
    with (d / "root.ext4").open("wb") as f:            # sparse, as the built image is
        f.truncate(1 << 20)
        f.write(b"ext4")
    (d / ".virtual-1-x").mkdir()                        # a boot's scratch: not copied
    (d / "manifest.json").write_text("{}")
    os.utime(d / "manifest.json", (mtime, mtime))


def test_an_ordinary_user_boots_a_copy_of_the_newest_image_root_built(tmp_path: Path, monkeypatch) -> None:
    """QEMU opens the image for writing (it maps it privately), so a user who is not root
    boots a copy in a cache of their own, made once per image; building one needs root."""
    from machine.errors import UserError
    from machine.vm import image
    system, own = tmp_path / "system", tmp_path / "own"
    monkeypatch.setattr(image, "SYSTEM_CACHE", system)
    monkeypatch.setattr(image, "CACHE_DIR", own)
    with pytest.raises(UserError, match=r"sudo \./run\.py doctor --clock virtual"):
        image.user_image(progress=lambda m: None)
    _built_image(system, ".build-0000000000", 5000)                                     # under way
    _built_image(system, "old0000000000000", 1000)
    _built_image(system, "new0000000000000", 2000)
    said = []
    img = image.user_image(progress=said.append)
    assert img.dir == own / "new0000000000000" and len(said) == 1
    assert (img.dir / "root.ext4").read_bytes() == (system / "new0000000000000" / "root.ext4").read_bytes()
    assert (img.dir / "bpf-6.1.0-1-amd64-abc" / "a.bpf.o").read_bytes() == b"ELF"
    assert not (img.dir / ".virtual-1-x").exists() and not list(own.glob(".build-*"))
    assert image.user_image(progress=said.append).dir == img.dir and len(said) == 1     # once
    _built_image(system, "newer00000000000", 3000)                                      # root rebuilt
    assert image.user_image(progress=said.append).dir == own / "newer00000000000" and len(said) == 2


def test_an_ordinary_users_registry_is_their_own(monkeypatch) -> None:
    from machine import registry
    monkeypatch.delenv("STARTLAB_REGISTRY", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert registry._registry_dir() == Path("/tmp/startlab-1000")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert registry._registry_dir() == Path("/run/startlab")


def test_interrupts_are_counted_per_source_and_a_run_keeps_those_it_took(tmp_path: Path) -> None:
    proc = tmp_path / "interrupts"
    proc.write_text("           CPU0       \n"
                    "  0:         41   IO-APIC   2-edge      timer\n"
                    " 25:        120   PCI-MSI 49153-edge      virtio1-output.0\n"
                    "LOC:       5000   Local timer interrupts\n"
                    "ERR:          0\n")
    before = clock.interrupts(proc)
    assert before == {"0 IO-APIC 2-edge timer": 41, "25 PCI-MSI 49153-edge virtio1-output.0": 120,
                      "LOC Local timer interrupts": 5000, "ERR": 0}
    after = {**before, "LOC Local timer interrupts": 5900, "25 PCI-MSI 49153-edge virtio1-output.0": 124}
    assert clock.interrupt_delta(before, after) == {"25 PCI-MSI 49153-edge virtio1-output.0": 4,
                                                    "LOC Local timer interrupts": 900}
