"""Booting one kernel of the VM image with qemu and running a job inside.

The guest's init (guest-init.sh) mounts the host's checkout read-only at the same path and a
job directory read-write, runs the job's script and powers off: one boot, one job, nothing
of the guest's kept (the disk is a snapshot). KVM where it works, software emulation (TCG)
otherwise; which one ran is part of every result, since under TCG the guest's clock is no
clock for an emulated network: functions are checked there, never timing.

The qemu process is registered (machine/registry.py), so `run.py clean` stops a VM its
harness left when it was killed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from machine import registry
from machine.errors import UserError
from machine.vm.image import Image, Kernel

QEMU = "qemu-system-x86_64"
MEMORY_MB = 4096
UP_MARKER = "startlab-guest: up"
# How long a KVM boot may take to reach the guest's init before KVM is judged broken here
# (a guest without nested virtualisation hangs in early boot instead of failing).
KVM_PROBE_S = 45.0
WATCH_S = 30.0


@dataclass
class Boot:
    """What one boot did."""
    kernel: str         # the exact release booted
    accel: str          # "kvm" or "tcg"
    rc: int | None      # the job's exit code; None when the guest never finished it
    wall_s: float
    boot_s: float | None   # until the guest's init was up
    console: Path
    log: Path           # the job's output
    why: str = ""       # when rc is None: what went wrong


# A guest under TCG: every process at the same addresses (`norandmaps`). TCG reuses a block
# it translated only at the same virtual address (QEMU 7.2), so with randomised mappings
# each new process translated its libraries again; measured in docs/emulation.md.
TCG_KERNEL_ARGS = "norandmaps"
# A guest under TCG gets QEMU's `max` CPU without its AVX family, which QEMU 7.2 emulates
# at more host time per guest instruction; measured, with the CPUs not chosen and why, in
# docs/emulation.md ("The guest's CPU model").
TCG_CPU = "max,-avx,-avx2,-fma,-f16c"


def kvm_usable() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def _argv(image: Image, kernel: Kernel, checkout: Path, job: Path, accel: str, cpus: int) -> list[str]:
    vmlinuz, initrd, _ = image.boot_files(kernel)
    append = (f"root=/dev/vda rw console=ttyS0 init=/sbin/startlab-init panic=-1 "
              f"startlab.checkout={checkout}" + ("" if accel == "kvm" else f" {TCG_KERNEL_ARGS}"))
    return [QEMU, "-machine", f"q35,accel={accel}", "-cpu", "host" if accel == "kvm" else TCG_CPU,
            "-smp", str(cpus), "-m", str(MEMORY_MB), "-display", "none", "-monitor", "none",
            "-no-reboot", "-nic", "none", "-serial", f"file:{job / 'console.log'}",
            "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", append,
            "-drive", f"file={image.disk},if=virtio,format=raw,snapshot=on",
            "-virtfs", f"local,path={checkout},mount_tag=checkout,security_model=none,readonly=on",
            "-virtfs", f"local,path={job},mount_tag=job,security_model=none"]


def boot(image: Image, kernel: Kernel, checkout: Path, job: Path, script: str, accel: str,
         timeout_s: float, cpus: int = 2, up_within_s: float | None = None,
         watch: Callable[[float], None] | None = None) -> Boot:
    """Boot `kernel`, run `script` (sh) in the guest with `job` as its directory, wait.

    `up_within_s`: give up when the guest's init is not up by then (the KVM probe).
    `watch`: called with the elapsed time every WATCH_S while the guest runs (progress).
    """
    if shutil.which(QEMU) is None:
        raise UserError(f"{QEMU} is missing: provision with playbooks/bootstrap.sh (it installs the VM tools)")
    _, _, release = image.boot_files(kernel)
    job.mkdir(parents=True, exist_ok=True)
    for name in ("rc", "job.log", "console.log"):
        (job / name).unlink(missing_ok=True)
    (job / "job.sh").write_text(script)
    console = job / "console.log"
    inst = registry.new_instance()
    t0 = time.monotonic()
    # qemu's snapshot overlay goes to TMPDIR: the job's directory, removed with it.
    proc = subprocess.Popen(_argv(image, kernel, checkout, job, accel, cpus), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=(job / "qemu.err").open("w"),
                            env={**os.environ, "TMPDIR": str(job)})
    inst.add_process(proc.pid, f"qemu {kernel.name} ({accel})")
    boot_s, why = wait(proc, inst, console, t0, timeout_s, watch, up_within_s)
    wall = time.monotonic() - t0
    if boot_s is None and console.exists() and UP_MARKER in console.read_text(errors="replace"):
        boot_s = wall
    rc_file = job / "rc"
    rc = int(rc_file.read_text().strip()) if rc_file.is_file() else None
    if rc is None and not why:
        err = (job / "qemu.err").read_text(errors="replace").strip()
        why = f"the guest stopped without finishing its job{': ' + err[-300:] if err else ''} (console {console})"
    return Boot(kernel=release, accel=accel, rc=rc, wall_s=round(wall, 1),
                boot_s=round(boot_s, 1) if boot_s is not None else None, console=console,
                log=job / "job.log", why=why)


def wait(proc: subprocess.Popen, inst: registry.Instance, console: Path, t0: float, timeout_s: float,
         watch: Callable[[float], None] | None = None, up_within_s: float | None = None,
         stop: threading.Event | None = None) -> tuple[float | None, str]:
    """Wait for a registered qemu to power off; stop it (and forget its instance) past
    `timeout_s`, past `up_within_s` without the guest's init up, or within half a second of
    `stop` (a command interrupted: its guests do not finish their jobs first). Returns (wall
    seconds until the init was up, why it was stopped)."""
    boot_s: float | None = None
    why = ""
    next_watch = WATCH_S
    try:
        while proc.poll() is None:
            if stop is not None and stop.is_set():
                why = "stopped: the command was interrupted"
                break
            elapsed = time.monotonic() - t0
            if boot_s is None and console.exists() and UP_MARKER in console.read_text(errors="replace"):
                boot_s = elapsed
            if boot_s is None and up_within_s is not None and elapsed > up_within_s:
                why = f"the guest's init was not up after {up_within_s:.0f} s"
                break
            if elapsed > timeout_s:
                why = f"the job did not finish within {timeout_s:.0f} s"
                break
            if watch is not None and elapsed >= next_watch:
                watch(elapsed)
                next_watch += WATCH_S
            time.sleep(0.5)
    finally:
        inst.remove_all()      # stops qemu if it still runs, and forgets the instance
    return boot_s, why


def choose_accel(image: Image, kernel: Kernel, checkout: Path, scratch: Path, wanted: str) -> tuple[str, str]:
    """("kvm" or "tcg", why). "auto" tries KVM with a trivial job and falls back to TCG when
    /dev/kvm is missing or its guest does not come up (no nested virtualisation)."""
    if wanted in ("kvm", "tcg"):
        return wanted, f"asked for {wanted}"
    if not kvm_usable():
        return "tcg", "no usable /dev/kvm"
    probe = boot(image, kernel, checkout, scratch / "kvm-probe", "true\n", "kvm", timeout_s=KVM_PROBE_S,
                 up_within_s=KVM_PROBE_S)
    if probe.rc == 0:
        return "kvm", f"a KVM guest booted in {probe.boot_s} s"
    return "tcg", f"KVM does not work here ({probe.why or 'the probe job failed'}): software emulation"
