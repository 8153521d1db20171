"""The virtual clock: one guest under QEMU's instruction-counted time (`-icount`).

Under TCG with `-icount shift=N,sleep=off` every guest instruction advances the guest's clock
by 2^N ns, and an idle guest's clock jumps to its next timer. Timers then fire exactly, and
the host's load, steal and wake-up latency change only how long a run takes on the wall
clock, not what happens in it. That holds only while nothing from the host reaches the guest
at a time the host decides, so this guest has no disk and no 9p share:

- its root is the image's ext4 file and its bundle (this checkout, its venv, its native
  builds and BPF objects built for the guest's kernel, and the job) an ext4 image made for
  the boot, both NVDIMMs backed by private file mappings: a read is a memory copy, within
  the reading instruction;
- its only way out is two virtio serial ports (the job's log and the export stream of
  finished runs, results/export.py), whose writes QEMU completes within the writing
  instruction (no ioeventfd under TCG);
- its randomness comes from QEMU's `-seed` (RDRAND), and its wall clock starts at RTC_BASE.

So a boot is a function of QEMU, the image, the bundle and the seed: the same inputs give the
same guest, instruction for instruction, however loaded the host (docs/emulation.md#the-virtual-clock).
Two machines that each built the image have different image bytes (debootstrap writes times
and random UUIDs), so identity across machines is not claimed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from machine import binaries, registry
from machine.provenance import git, git_revision
from machine.errors import UserError
from machine.vm.image import Image, Kernel
from machine.vm import qemu
from machine.vm.qemu import QEMU

# One instruction per ns, the fastest CPU icount models (shift is at least 0).
SHIFT = 0
MACHINE = "q35"
ACCEL = "tcg,thread=single"
CPUS = 1          # under icount, vCPUs take turns on one instruction counter: no capacity gained
MEMORY_MB = 4096
RTC_BASE = "2020-01-01"
BUNDLE_DIR = ".startlab-virtual"
BOOT_SCRIPT = Path(__file__).with_name("virtual-boot.sh")
# The bundle's file system is made the same way every time: its UUID and directory hash seed
# fixed, so the same files give the same image and the same lookups in the guest.
BUNDLE_UUID = "5ad1ab00-0000-4000-8000-000000000001"
BUNDLE_EPOCH = 1577836800       # 2020-01-01, RTC_BASE: every file's time in the bundle
ALIGN = 128 << 20
EXIT_PREFIX = "startlab-job: exit "
# The guest kernel's switches that decide its speed, recorded with the clock.
KERNEL_ARGS = f"nokaslr mitigations=off {qemu.TCG_KERNEL_ARGS}"


@lru_cache(maxsize=1)
def qemu_version() -> str:
    out = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].removeprefix("QEMU emulator version ").strip() if out else "unknown"


def run_seed(seed: int, run_id: str) -> int:
    """QEMU's `-seed` for the guest of one run: from the campaign's seed and the run's name,
    so a run's guest draws the same randomness every time (TCP's initial sequence numbers
    among it) and two repetitions draw different ones."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{run_id}".encode()).digest()[:4], "big") >> 1


def guests_at_once() -> int:
    """Guests booted side by side: one per CPU this process may use (a QEMU guest is one
    thread; a cluster's task has one CPU), no more than the memory holds at MEMORY_MB each."""
    from machine.cpuset import own_cpus
    available_kb = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemAvailable:")), 0)
    return max(1, min(len(own_cpus()), available_kb // 1024 // MEMORY_MB))


def clock_record(image: Image, kernel: Kernel, seed: int, shift: int = SHIFT) -> dict:
    """What every run's meta.json keeps of the clock it ran on (machine/clock.py reads it)."""
    _, _, release = image.boot_files(kernel)
    return {"shift": shift, "seed": seed, "qemu": qemu_version(), "machine": MACHINE, "accel": ACCEL,
            "cpu": qemu.TCG_CPU, "cpus": CPUS, "memory_mb": MEMORY_MB, "rtc_base": RTC_BASE, "kernel": release,
            "image": image.dir.name, "kernel_args": KERNEL_ARGS}


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def argv(image: Image, kernel: Kernel, bundle: Path, checkout: Path, job: Path, seed: int,
         shift: int = SHIFT) -> list[str]:
    vmlinuz, initrd, _ = image.boot_files(kernel)
    root_size, bundle_size = _aligned(image.disk.stat().st_size), bundle.stat().st_size
    append = (f"root=/dev/pmem0 rw rootfstype=ext4 console=ttyS0 init=/sbin/startlab-vinit panic=-1 "
              f"{KERNEL_ARGS} quiet startlab.checkout={checkout}")
    maxmem = MEMORY_MB + (root_size + bundle_size) // (1 << 20)
    return [QEMU, "-machine", f"{MACHINE},nvdimm=on", "-accel", ACCEL, "-cpu", qemu.TCG_CPU, "-smp", str(CPUS),
            "-m", f"{MEMORY_MB}M,slots=2,maxmem={maxmem}M",
            "-icount", f"shift={shift},sleep=off,align=off", "-rtc", f"base={RTC_BASE},clock=vm",
            "-seed", str(seed), "-display", "none", "-monitor", "none", "-no-reboot", "-nic", "none",
            "-serial", f"file:{job / 'console.log'}", "-kernel", str(vmlinuz), "-initrd", str(initrd),
            "-append", append,
            "-object", f"memory-backend-file,id=rootmem,mem-path={image.disk},size={root_size},share=off",
            "-device", "nvdimm,id=nv0,memdev=rootmem",
            "-object", f"memory-backend-file,id=bundlemem,mem-path={bundle},size={bundle_size},share=off",
            "-device", "nvdimm,id=nv1,memdev=bundlemem",
            "-device", "virtio-serial-pci,id=ports,ioeventfd=off",
            "-chardev", f"file,id=runs,path={job / 'runs.stream'}",
            "-device", "virtserialport,bus=ports.0,chardev=runs,name=startlab.runs",
            "-chardev", f"file,id=log,path={job / 'job.log'}",
            "-device", "virtserialport,bus=ports.0,chardev=log,name=startlab.log"]


def _tracked(checkout: Path) -> list[str]:
    r = subprocess.run([*git(checkout), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True)
    if r.returncode != 0:
        raise UserError(f"the virtual clock bundles the checkout's tracked files: git ls-files failed in {checkout}")
    return [f for f in r.stdout.decode().split("\0") if f]


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst, follow_symlinks=False)


def _normalise_times(stage: Path, bpf: Path | None) -> None:
    """Every file and directory at BUNDLE_EPOCH, so that the same files make the same image
    whenever they are bundled; the BPF objects after their sources and vmlinux.h, so that
    build.sh in the guest finds them up to date."""
    for p in [*stage.rglob("*"), stage]:
        os.utime(p, (BUNDLE_EPOCH, BUNDLE_EPOCH), follow_symlinks=False)
    if bpf is not None:
        for p in bpf.iterdir():
            t = BUNDLE_EPOCH + (2 if p.suffix == ".o" else 1)
            os.utime(p, (t, t))


def make_bundle(checkout: Path, work: Path, job: str, clock: dict, bpf: Path | None) -> tuple[Path, dict]:
    """The ext4 image the guest mounts at the checkout's path: the tracked files as they are
    in the work tree, the venv, the native release builds (the QUIC stacks' programs and
    venv with them), the guest kernel's BPF objects and BUNDLE_DIR (boot script, job,
    clock record, provisioning's machine-wide tools). Python's byte code is compiled here,
    once (checked by hash, not by time), rather than in the guest at every import. The same files
    give the same image, byte for byte (tests/test_virtual_clock_units.py). Returns the image
    and the clock record it carries, with the digest of everything but the job and that
    record (`bundle`): two runs are the same run only from the same bundle, since any
    change of a file the guest reads moves every later instruction."""
    stage = work / "bundle"
    shutil.rmtree(stage, ignore_errors=True)
    for rel in _tracked(checkout):
        src = checkout / rel
        if src.is_file() and not src.is_symlink():
            _copy(src, stage / rel)
    # The venv, and the QUIC stacks' own (hosts/stacks: aioquic's) beside it.
    for venv in (checkout / ".venv", *sorted((checkout / ".stacks").glob("*/"))):
        if venv.is_dir():
            shutil.copytree(venv, stage / venv.relative_to(checkout), symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for sub in ("release", "stacks", "stacks-rust/release"):
        for exe in sorted((checkout / "target" / sub).glob("startlab-*")):
            if exe.is_file() and os.access(exe, os.X_OK):
                _copy(exe, stage / "target" / sub / exe.name)
    extra = stage / BUNDLE_DIR
    extra.mkdir(parents=True)
    for tool in sorted((binaries.TOOLS / "bin").glob("*")):      # STARTLAB_TOOLS in the guest
        if tool.is_file() and os.access(tool, os.X_OK):
            _copy(tool, extra / "tools" / "bin" / tool.name)
    if bpf is not None:
        shutil.copytree(bpf, extra / "bpf", ignore=shutil.ignore_patterns(".build.lock", "*.tmp"))
    shutil.copy2(BOOT_SCRIPT, extra / "boot.sh")
    clock = {**clock, "bundle": files_digest(stage, list(stage.rglob("*")))}
    (extra / "job.sh").write_text(job)
    (extra / "clock.json").write_text(json.dumps(clock, sort_keys=True))
    (extra / "git_rev").write_text(git_revision(checkout) or "unknown")   # the bundle has no history
    subprocess.run(["/usr/bin/python3", "-m", "compileall", "-q", "-j0", "--invalidation-mode",
                    "unchecked-hash", "-s", str(stage), "-p", str(checkout), str(stage)],
                   capture_output=True)
    _normalise_times(stage, extra / "bpf" if bpf is not None else None)
    used = int(subprocess.run(["du", "-sb", str(stage)], capture_output=True, text=True).stdout.split()[0])
    size = _aligned(int(used * 1.3) + (64 << 20))
    img = work / "bundle.ext4"
    img.unlink(missing_ok=True)
    r = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "stl-bundle", "-U", BUNDLE_UUID,
                        "-E", f"root_owner=0:0,hash_seed={BUNDLE_UUID}", "-d", str(stage), str(img),
                        f"{size // 1024}k"], capture_output=True, text=True,
                       env={**os.environ, "E2FSPROGS_FAKE_TIME": str(BUNDLE_EPOCH)})
    if r.returncode != 0:
        raise UserError(f"making the virtual clock's bundle failed: {r.stderr.strip()[-400:]}")
    _fix_inode_times(stage, img)
    shutil.rmtree(stage)
    return img, clock


def files_digest(base: Path, paths: list[Path]) -> str:
    """The names (relative to `base`) and contents of `paths`, in name order: a symbolic
    link by its target, a directory not at all. Contents, never times: the same files give
    the same digest in any checkout and at any time."""
    h = hashlib.sha256()
    for p in sorted(paths):
        if p.is_symlink():
            data = os.readlink(p).encode()
        elif p.is_file():
            data = p.read_bytes()
        else:
            continue
        h.update(f"{p.relative_to(base)}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:16]


def _fix_inode_times(stage: Path, img: Path) -> None:
    """mke2fs -d copies each file's ctime (and an atime its reading moved) from the stage,
    which no one can set: debugfs sets them to BUNDLE_EPOCH, as the mtimes are. It copies
    the owner too, which is whoever bundled (root, or an ordinary user: run_in_guest): every
    file is root's, as the guest's job is."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(BUNDLE_EPOCH))
    paths = ["/"] + ["/" + str(p.relative_to(stage)) for p in sorted(stage.rglob("*"))]
    fields = [(f, stamp) for f in ("atime", "ctime", "crtime")] + [("uid", 0), ("gid", 0)]
    script = "".join(f'sif "{p}" {field} {value}\n' for p in paths for field, value in fields)
    r = subprocess.run(["debugfs", "-w", "-f", "-", str(img)], input=script, capture_output=True, text=True,
                       env={**os.environ, "E2FSPROGS_FAKE_TIME": str(BUNDLE_EPOCH)})   # its superblock write time
    if r.returncode != 0:
        raise UserError(f"setting the bundle's inode times failed: {r.stderr.strip()[-400:]}")


@dataclass
class VirtualBoot:
    """What one boot on the virtual clock did."""
    kernel: str
    rc: int | None          # the job's exit code; None when the guest never finished it
    wall_s: float
    boot_s: float | None    # wall seconds until the guest's init was up
    guest_s: float | None   # the guest's uptime at the job's end (virtual seconds)
    console: Path
    log: Path
    stream: Path
    why: str = ""


def _guest_uptime(log: Path) -> float | None:
    text = log.read_text(errors="replace") if log.is_file() else ""
    for line in reversed(text.splitlines()):
        if line.startswith("startlab-guest: uptime "):
            return float(line.split()[2])
    return None


def boot(image: Image, kernel: Kernel, bundle: Path, checkout: Path, job: Path, seed: int,
         timeout_s: float, watch: Callable[[float], None] | None = None, shift: int = SHIFT,
         stop: threading.Event | None = None) -> VirtualBoot:
    """Boot `kernel` on the virtual clock with `bundle`, wait for its job, return what it did.
    `watch` is called with the elapsed wall time every qemu.WATCH_S (progress); `stop` ends
    the guest at once (qemu.wait)."""
    if shutil.which(QEMU) is None:
        raise UserError(f"{QEMU} is missing: provision with playbooks/bootstrap.sh (it installs the VM tools)")
    _, _, release = image.boot_files(kernel)
    job.mkdir(parents=True, exist_ok=True)
    for name in ("job.log", "console.log", "runs.stream", "qemu.err"):
        (job / name).unlink(missing_ok=True)
    inst = registry.new_instance()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv(image, kernel, bundle, checkout, job, seed, shift), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=(job / "qemu.err").open("w"))
    inst.add_process(proc.pid, f"qemu {kernel.name} (virtual clock)")
    console, log = job / "console.log", job / "job.log"
    boot_s, why = qemu.wait(proc, inst, console, t0, timeout_s, watch, stop=stop)
    wall = time.monotonic() - t0
    text = log.read_text(errors="replace") if log.is_file() else ""
    ends = [ln for ln in text.splitlines() if ln.startswith(EXIT_PREFIX)]
    rc = int(ends[-1][len(EXIT_PREFIX):]) if ends else None
    if rc is None and not why:
        err = (job / "qemu.err").read_text(errors="replace").strip()
        tail = console.read_text(errors="replace").strip().splitlines()[-3:] if console.exists() else []
        why = (f"the guest stopped without finishing its job{': ' + err[-300:] if err else ''} "
               f"(console: {' | '.join(tail)})")
    return VirtualBoot(kernel=release, rc=rc, wall_s=round(wall, 1),
                       boot_s=round(boot_s, 1) if boot_s is not None else None, guest_s=_guest_uptime(log),
                       console=console, log=log, stream=job / "runs.stream", why=why)


def guest_btf(image: Image, kernel: Kernel, checkout: Path, progress=print) -> Path:
    """The guest kernel's BTF (/sys/kernel/btf/vmlinux), cached beside the image: one boot
    the first time, so the host can build the BPF objects for that kernel."""
    _, _, release = image.boot_files(kernel)
    cached = image.dir / f"btf-{release}"
    if cached.is_file() and cached.stat().st_size > 0:
        return cached
    progress(f"reading kernel {release}'s BTF in a guest (once per image and kernel) …")
    work = Path(tempfile.mkdtemp(prefix=f".work-{os.getpid()}-", dir=image.dir))
    try:
        clock = clock_record(image, kernel, seed=1)
        bundle, _ = make_bundle(checkout, work, 'cat /sys/kernel/btf/vmlinux > "$STARTLAB_EXPORT"\n', clock, None)
        b = boot(image, kernel, bundle, checkout, work / "job", seed=1, timeout_s=900)
        if b.rc != 0 or not b.stream.is_file() or b.stream.stat().st_size == 0:
            raise UserError(f"reading the guest kernel's BTF failed (exit {b.rc}): {b.why}")
        tmp = cached.with_suffix(".tmp")
        shutil.copy(b.stream, tmp)
        os.rename(tmp, cached)
        return cached
    finally:
        shutil.rmtree(work, ignore_errors=True)


# What the guest's BPF objects and kernel modules are built from (paths in a checkout).
KERNEL_OBJECT_SOURCES = ("hosts/bpf", "hosts/implementations", "hosts/kmod")


def kernel_object_digest(checkout: Path) -> str:
    """The digest of the sources a checkout builds its kernel objects from: their names
    and contents, not their times, so checkouts with the same sources share one build and
    a checkout with other sources never takes another's (build.sh judges by times)."""
    return files_digest(checkout, [p for top in KERNEL_OBJECT_SOURCES for p in (checkout / top).rglob("*")
                                   if p.is_file() and p.suffix in (".c", ".h", ".sh", "")])


def guest_bpf(image: Image, kernel: Kernel, checkout: Path, progress=print) -> Path:
    """startlab's BPF objects built on the host against the guest kernel's BTF (build.sh,
    quick when nothing changed), kept beside the image, one directory per release and
    sources (kernel_object_digest)."""
    _, _, release = image.boot_files(kernel)
    btf = guest_btf(image, kernel, checkout, progress)
    out = image.dir / f"bpf-{release}-{kernel_object_digest(checkout)}"
    env = {**os.environ, "STARTLAB_BPF_OUT": str(out), "STARTLAB_BTF": str(btf), "STARTLAB_BTF_KERNEL": release}
    r = subprocess.run([str(checkout / "hosts" / "bpf" / "build.sh")], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise UserError(f"building the BPF objects for kernel {release} failed: {r.stderr.strip()[-500:]}")
    guest_kmods(image, kernel, btf, out, progress)
    return out


def guest_kmods(image: Image, kernel: Kernel, btf: Path, out: Path, progress=print) -> None:
    """startlab's kernel modules (hosts/kmod) built on the host against the guest kernel's
    headers and BTF, into `out` beside its BPF objects. A failure costs only the schemes
    that need a module: its reason goes with the objects, and the guest's doctor and runs
    give it (machine/kmod.ensure_built)."""
    from machine import kmod
    from machine.vm.image import KERNELS, kernel_headers
    try:
        root, headers = kernel_headers(image, kernel, progress)
        tool = headers / kmod.RESOLVE_BTFIDS
        for other in (k for k in KERNELS.values() if k != kernel and not tool.exists()):
            tool = kernel_headers(image, other, progress)[1] / kmod.RESOLVE_BTFIDS   # any kbuild's reads every kernel's objects
        kmod.build(headers, btf, out, tool, root)
        (out / kmod.BUILD_FAILED).unlink(missing_ok=True)
    except (kmod.KmodError, UserError, OSError, subprocess.CalledProcessError) as exc:
        (out / kmod.BUILD_FAILED).write_text(f"the host could not build startlab's kernel modules for "
                                             f"{kernel.name}: {exc}\n")
