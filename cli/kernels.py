"""`run.py kernels`: startlab on Debian's stock kernels, each booted in a VM (machine/vm).

For each kernel one guest boots from the cached image, runs every check of CHECKS in turn
on the host's own checkout, and powers off; the host then judges each check from the files
the guest left and prints a kernel × check matrix. A cell is `ok`, `unsupported` (with the
kernel's reason), `failed` (with the error) or, for a timing figure under software
emulation, `not judged (TCG)`: a TCG guest's clock is no clock for an emulated network, so
what it runs is checked for function only and its timing verdicts never count as passes.
"""
from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from machine.errors import UserError
from machine.vm import image as vm_image
from machine.vm import qemu

ROOT = Path(__file__).resolve().parent.parent
# Where a check's campaign writes in the guest: its own disk, copied to the job directory
# after the check. Written straight to the job's 9p share, a capture falls behind (under
# TCG tcpdump wrote 480 packets/s there) and the run fails as inexact.
LOCAL = "/var/tmp/startlab"
# Where the netem smoke campaign runs: the smallest campaign that builds the whole path.
SMOKE = "scenarios/smoke.yaml"


@dataclass
class Cell:
    status: str                 # ok | unsupported | failed | not judged (TCG)
    detail: str = ""
    seconds: float | None = None


@dataclass
class Check:
    """One check: the guest's shell command (its output in /job/NAME.out, its exit code in
    /job/NAME.rc) and the host's judgement of what it left."""
    name: str
    what: str
    command: str
    judge: Callable[[Path, int, str], Cell]


def _out(job: Path, name: str) -> str:
    p = job / f"{name}.out"
    return p.read_text(errors="replace") if p.is_file() else ""


def _tail(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text[-n:]


def _head(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text[:n] + ("…" if len(text) > n else "")


def judge_doctor(job: Path, rc: int, accel: str) -> Cell:
    try:
        report = json.loads((job / "doctor.json").read_text())
    except (OSError, ValueError) as e:
        return Cell("failed", f"doctor printed no report ({e}): {_tail(_out(job, 'doctor'))}")
    missing = [what for what, have in (("sch_netem", report["qdiscs"].get("netem")),
                                       ("the Open vSwitch datapath", report.get("ovs_datapath"))) if not have]
    if missing:
        return Cell("failed", f"doctor does not find {' or '.join(missing)}")
    return Cell("ok", f"netem and OVS found; delay backend {report['delay_backend']}, switch {report['switch']}"
                + (f"; problems: {'; '.join(report['problems'])}" if report.get("problems") else ""))


def judge_smoke(job: Path, rc: int, accel: str) -> Cell:
    """The smoke campaign with the netem backend: every run built a network whose meta.json
    says netem and OVS, and completed. Its figures are timing: judged only under KVM."""
    metas = sorted((job / "smoke").glob("*/meta.json"))
    if not metas:
        return Cell("failed", f"no run finished (exit {rc}): {_tail(_out(job, 'smoke'))}")
    seen = set()
    for m in metas:
        meta = json.loads(m.read_text())
        net = meta.get("link") or {}
        seen.add((net.get("delay_backend"), net.get("switch")))
    if seen != {("netem", "ovs")}:
        return Cell("failed", f"the runs used (delay backend, switch) {sorted(seen, key=str)}, declared netem and ovs")
    failed = {p.parent.name: _head(p.read_text(errors="replace")) for p in (job / "smoke").glob("*/error.txt")}
    unanalysed = sorted(m.parent.name for m in metas if not (m.parent / "metrics.json").is_file())
    if unanalysed:
        why = [ln for ln in _out(job, "smoke").splitlines() if "analysis of" in ln]
        return Cell("failed", f"{len(unanalysed)} of {len(metas)} runs could not be analysed: "
                    f"{_tail(why[0] if why else _out(job, 'smoke'))}")
    if accel == "tcg":
        return Cell("not judged (TCG)", f"{len(metas)} runs built and ran on netem and OVS (function ok); "
                    f"{len(failed)} failed" + "".join(f"; {r}: {e}" for r, e in failed.items())
                    + "; timing not judged under TCG")
    if rc != 0 or failed:
        return Cell("failed", f"exit {rc}; failed runs: " + "; ".join(f"{r}: {e}" for r, e in failed.items()))
    flagged = {m.parent.name: f for m in metas for f in (json.loads(m.read_text()).get("host_check") or {}).get("flags") or []}
    if flagged:
        return Cell("failed", f"{len(flagged)} of {len(metas)} runs flagged: "
                    + "; ".join(f"{r}: {_head(f)}" for r, f in flagged.items()))
    return Cell("ok", f"{len(metas)} runs on netem and OVS, none flagged" + (" (virtual clock)" if accel == "virtual" else ""))


# Every TCP variant of the catalogue, one run each at a low rate: installed, its connections'
# congestion control read from the kernel and its first flight from the wire against its
# declaration (analysis/flow_checks.py), removed. The QUIC variants are user-space programs,
# the same on every kernel.
VARIANTS_PROFILE = "js-dumbbell"


def variants_scenario() -> str:
    from hosts.variants import VARIANTS
    names = [n for n, v in VARIANTS.items() if all(p.impl.name != "quic" for p in v.parts.values())]
    return ("format: 1\nname: kernel-variants\n"
            f"description: every TCP variant once, {VARIANTS_PROFILE} (run.py kernels)\n"
            f"profiles: [{VARIANTS_PROFILE}]\nsizes: [70KB]\nworkload:\n  kind: competing\n"
            f"variants: [{', '.join(names)}]\nbaseline: {names[0]}\nrepetitions: 1\nseed: 1\n")


def judge_variants(job: Path, rc: int, accel: str) -> Cell:
    """Each variant's run: verified (analysed, every check held) or failed with its error."""
    runs = sorted(d for d in (job / "variants").glob(f"{VARIANTS_PROFILE}_*") if d.is_dir())
    if not runs:
        refused = [ln for ln in _out(job, "variants").splitlines() if "cannot run on this kernel" in ln]
        if refused:     # a variant this kernel cannot load stops the campaign, with the reason
            return Cell("unsupported", _head(refused[0].split(": ", 2)[-1], 400))
        return Cell("failed", f"no run (exit {rc}): {_tail(_out(job, 'variants'))}")
    bad = {}
    for d in runs:
        variant = d.name.split("_", 2)[2].rsplit("_r", 1)[0]
        if (d / "error.txt").is_file():
            bad[variant] = _head((d / "error.txt").read_text(errors="replace"))
        elif not (d / "metrics.json").is_file():
            bad[variant] = "not analysed"
    ok = len(runs) - len(bad)
    detail = f"{ok} of {len(runs)} variants verified on the wire"
    if bad:
        detail += "; " + "; ".join(f"{v}: {why}" for v, why in bad.items())
    return Cell("failed" if bad or rc != 0 else "ok", detail + (" (under TCG)" if accel == "tcg" else ""))


def judge_clean(job: Path, rc: int, accel: str) -> Cell:
    left = _out(job, "clean").strip().splitlines()
    leftovers = [ln for ln in left if ln.startswith("LEFT ")]
    if rc != 0 or leftovers:
        return Cell("failed", "; ".join(ln[5:] for ln in leftovers) or f"exit {rc}: {_tail(_out(job, 'clean'))}")
    return Cell("ok", "nothing of startlab's left: no namespace, link, bridge, qdisc, pinned BPF object")


# Under TCG the guest's CPU is emulated: three captures, netem and OVS in the guest cannot
# carry dsl-fast's 50 Mbit/s (measured: "the long flow did not fill the bottleneck within
# 60 s" in one or both smoke runs), so there the smoke campaign runs on the variants'
# low-rate profile: the same netem and OVS path, at a rate the guest keeps. The same holds
# on the virtual clock (one instruction per ns) with OVS's daemons running: its long flow
# reached 43.6 of 47.8 Mbit/s in one of two runs (on the Linux bridge, a campaign's switch
# there, dsl-fast is carried: docs/emulation.md#the-virtual-clock).
def smoke_profile(accel: str) -> str | None:
    """The profile the smoke campaign is run on under `accel` (None: the scenario's)."""
    return VARIANTS_PROFILE if accel in ("tcg", "virtual") else None


def checks(checkout: Path, accel: str = "kvm", job: str = "/job") -> list[Check]:
    """The checks' guest commands; `job` is where they leave their files (the 9p share, or
    on the virtual clock a directory the guest exports at the end)."""
    py = shlex.quote(str(checkout / ".venv" / "bin" / "python"))
    run = f"{py} {shlex.quote(str(checkout / 'run.py'))}"
    profile = smoke_profile(accel)
    # What `clean` must leave: nothing of ours in any of the kernel's lists.
    leftovers = (
        'ip netns list | grep . && echo "LEFT network namespaces"; '
        'ip -o link | grep -E ": stl" && echo "LEFT links"; '
        'tc qdisc show | grep -E "dev stl" && echo "LEFT qdiscs"; '
        'ls /sys/fs/bpf | grep . && echo "LEFT pinned BPF objects"; '
        'ovs-vsctl list-br 2>/dev/null | grep . && echo "LEFT OVS bridges"; '
        'ls /run/startlab 2>/dev/null | grep . && echo "LEFT registry entries"; true')
    return [
        Check("doctor", "doctor finds netem and OVS", f"{run} doctor --json --no-host > {job}/doctor.json",
              judge_doctor),
        Check("smoke", "the smoke campaign on the netem delay backend and OVS switches",
              f"{run} run {SMOKE} --delay-backend netem --reps 1 --unfit-host --out {LOCAL}/smoke"
              + (f" --profiles {profile}" if profile else ""), judge_smoke),
        Check("variants", "every TCP variant installs, is verified on the wire at a low rate, and is removed",
              f"{run} run {job}/variants.yaml --unfit-host --out {LOCAL}/variants", judge_variants),
        Check("clean", "clean leaves nothing", f"{run} clean; {leftovers}", judge_clean),
    ]


# On the virtual clock the checks leave their files here, exported whole at the end.
VIRTUAL_JOB = "/run/job"


def guest_script(checkout: Path, selected: list[Check], job: str = "/job") -> str:
    """The job the guest runs: OVS's daemons first (no systemd to start them), then each
    check with its output, exit code and time. On the virtual clock (`job` = VIRTUAL_JOB)
    the BPF objects come built for the guest's kernel, the variants' scenario is written in
    the guest, and the job's directory is exported at the end."""
    virtual = job == VIRTUAL_JOB
    lines = ["#!/bin/sh", "set -u", f"cd {shlex.quote(str(checkout))}", f"mkdir -p {job}"]
    if virtual:
        lines += [f"cat > {job}/variants.yaml <<'STARTLAB_EOF'", variants_scenario().rstrip(), "STARTLAB_EOF"]
    else:
        lines += ["export STARTLAB_BPF_OUT=/var/lib/startlab/bpf     # built against this kernel"]
    lines += ["/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-record-hostname"
              f" > {job}/ovs.out 2>&1",
              f"ovs-vsctl --timeout=10 show >> {job}/ovs.out 2>&1"]
    for c in selected:
        lines += [f"echo '== {c.name}'",
                  "t0=$(date +%s.%N)",
                  f"( {c.command} ) > {job}/{c.name}.out 2>&1; echo $? > {job}/{c.name}.rc",
                  f"[ -d {LOCAL}/{c.name} ] && cp -a {LOCAL}/{c.name} {job}/",
                  f"echo \"$t0 $(date +%s.%N)\" > {job}/{c.name}.time"]
    lines += [f"/usr/share/openvswitch/scripts/ovs-ctl stop >> {job}/ovs.out 2>&1"]
    if virtual:
        lines += [f"{shlex.quote(str(checkout / '.venv' / 'bin' / 'python'))} -m results.export {job} job"]
    return "\n".join(lines + [""])


@dataclass
class KernelResult:
    kernel: str
    release: str | None = None
    accel: str | None = None
    accel_reason: str = ""
    boot_s: float | None = None
    wall_s: float | None = None
    cells: dict[str, Cell] = field(default_factory=dict)


def guest_progress(job: Path, selected: list[Check]) -> str:
    """Which check the guest is at, and the last progress line (with its ETA) of a campaign
    it runs."""
    log = job / "job.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    started = [ln[3:].strip() for ln in text.splitlines() if ln.startswith("== ")]
    if not started:
        return "booting"
    name = started[-1]
    lines = [ln for ln in _out(job, name).replace("\r", "\n").splitlines() if ln.startswith("[")]
    return f"check {len(started)}/{len(selected)} {name}" + (f": {lines[-1].strip()}" if lines else "")


def judge_cells(res: KernelResult, job: Path, selected: list[Check], accel: str, why: str) -> KernelResult:
    """Each check's cell from the files the guest left in `job`."""
    for c in selected:
        rc_file = job / f"{c.name}.rc"
        if not rc_file.is_file():
            res.cells[c.name] = Cell("failed", f"did not run: {why or 'the guest stopped before it'}")
            continue
        rc = int(rc_file.read_text().strip() or 1)
        cell = c.judge(job, rc, accel)
        t = (job / f"{c.name}.time").read_text().split() if (job / f"{c.name}.time").is_file() else []
        cell.seconds = round(float(t[1]) - float(t[0]), 1) if len(t) == 2 else None
        res.cells[c.name] = cell
    return res


def run_kernel(img: vm_image.Image, kernel: vm_image.Kernel, selected: list[Check], accel: str,
               accel_reason: str, scratch: Path, timeout_s: float, progress=print) -> KernelResult:
    job = scratch / f"job-{kernel.name}"
    res = KernelResult(kernel.name, accel=accel, accel_reason=accel_reason)
    job.mkdir(parents=True, exist_ok=True)
    (job / "variants.yaml").write_text(variants_scenario())
    boot = qemu.boot(img, kernel, ROOT, job, guest_script(ROOT, selected), accel, timeout_s,
                     watch=lambda t: progress(f"  {kernel.name}, {t / 60:.0f} min in: {guest_progress(job, selected)}"))
    res.release, res.boot_s, res.wall_s = boot.kernel, boot.boot_s, boot.wall_s
    return judge_cells(res, job, selected, accel, boot.why)


def run_kernel_virtual(kernel: vm_image.Kernel, selected: list[Check], scratch: Path, timeout_s: float,
                       progress=print) -> KernelResult:
    """The checks in one guest on the virtual clock (cli/virtual.py): timing is judged."""
    from cli.virtual import run_in_guest
    got = scratch / f"virtual-{kernel.name}"
    job = scratch / f"job-{kernel.name}"      # laid out as a 9p guest's job directory
    res = KernelResult(kernel.name, accel="virtual", accel_reason="the virtual clock: TCG with icount")
    why = ""
    try:
        b, _ = run_in_guest(guest_script(ROOT, selected, VIRTUAL_JOB), 1, kernel.name, got, timeout_s, progress)
        res.release, res.boot_s, res.wall_s = b.kernel, b.boot_s, b.wall_s
    except UserError as exc:
        why = str(exc)
    if (got / "job").is_dir():
        shutil.move(got / "job", job)
    job.mkdir(parents=True, exist_ok=True)
    if (got / "guest.log").is_file():
        shutil.move(got / "guest.log", job / "job.log")
    return judge_cells(res, job, selected, "virtual", why)


def run_matrix(kernels: list[vm_image.Kernel], check_names: list[str] | None, accel: str,
               mirror: str | None, keep: Path | None, timeout_s: float, progress=print,
               clock: str = "real") -> list[KernelResult]:
    """Build (or reuse) the image, then one boot per kernel. `keep`: copy each guest's job
    directory (logs, results) there; otherwise they go with the scratch directory. On the
    virtual clock (`clock`) every guest runs under icount and its smoke cell is judged."""
    names = [c.name for c in checks(ROOT)]      # checked before the image is built
    if check_names:
        unknown = [n for n in check_names if n not in names]
        if unknown:
            raise UserError(f"unknown check {', '.join(unknown)}: choose from {', '.join(names)}")
    t0 = time.monotonic()
    img = vm_image.ensure_image(kernels, mirror, progress)
    progress(f"image {img.dir} ready after {time.monotonic() - t0:.0f} s")
    out = []
    with tempfile.TemporaryDirectory(prefix="startlab-vm-") as tmp:
        scratch = Path(tmp)
        if clock == "virtual":
            chosen, why = "virtual", "the virtual clock: TCG with icount"
        else:
            chosen, why = qemu.choose_accel(img, kernels[0], ROOT, scratch, accel)
        progress(f"accelerator: {chosen} ({why})")
        # The checks' commands depend on the accelerator (smoke_profile), so they are built now.
        selected = [c for c in checks(ROOT, chosen, VIRTUAL_JOB if chosen == "virtual" else "/job")
                    if not check_names or c.name in check_names]
        if chosen == "virtual":        # each check's campaign stays in the guest; the job goes out at the end
            selected = [Check(c.name, c.what, f"STARTLAB_EXPORT= {c.command}", c.judge) for c in selected]
        for i, k in enumerate(kernels, 1):
            progress(f"[{i}/{len(kernels)}] kernel {k.name}: booting, then {', '.join(c.name for c in selected)} …")
            res = (run_kernel_virtual(k, selected, scratch, timeout_s, progress) if chosen == "virtual" else
                   run_kernel(img, k, selected, chosen, why, scratch, timeout_s, progress))
            progress(f"[{i}/{len(kernels)}] kernel {res.release}: done in {res.wall_s} s (boot {res.boot_s} s)")
            out.append(res)
            if keep:
                dest = keep / f"job-{k.name}"
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(scratch / f"job-{k.name}", dest, ignore=shutil.ignore_patterns("vl.*", "*.ext4"))
    return out


def matrix_text(results: list[KernelResult]) -> str:
    names = list(results[0].cells) if results else []
    rows = []
    for r in results:
        rows.append(f"kernel {r.release or r.kernel} ({r.accel}; boot {r.boot_s} s, whole {r.wall_s} s)")
        for n in names:
            c = r.cells[n]
            took = f" [{c.seconds:.0f} s]" if c.seconds is not None else ""
            rows.append(f"  {n:<8} {c.status}{took}: {c.detail}")
    return "\n".join(rows)


def as_json(results: list[KernelResult]) -> list[dict]:
    return [asdict(r) for r in results]


def passed(results: list[KernelResult]) -> bool:
    """No failed cell (unsupported and not-judged cells are not failures, nor passes)."""
    return all(c.status != "failed" for r in results for c in r.cells.values())
