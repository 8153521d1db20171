"""`vagrant up` with the libvirt provider on startlab's own box, then the demo inside.

Machines without systemd have no libvirt daemon, and a system libvirtd would change the host:
its networks put bridges, dnsmasq and NAT rules in the root network namespace, and its
definitions go to /etc/libvirt. So startlab starts a private libvirtd for the duration:
- in a network namespace of its own (named with startlab's prefix, in the registry), where
  libvirt's networks, their dnsmasq and Vagrant's ssh to the guest all live;
- in a mount namespace of its own, where libvirt's configuration, state, logs and runtime
  directories are bind-mounted from a scratch directory: whatever it defines is gone with it.
Vagrant talks to it over that scratch directory's socket. The box's disk volume lives in a
storage pool in the VM cache (uploaded once per box), Vagrant's home beside it.

A killed harness leaves a registry entry whose undo ends every process in that namespace
(all of them were started here), deletes the namespace and the scratch directory.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from machine import registry
from machine.errors import UserError
from machine.vm import box as vm_box
from machine.vm import image as vm_image
from machine.vm import qemu

ROOT = Path(__file__).resolve().parents[2]
HOME = vm_image.CACHE_DIR.parent / "vagrant"        # VAGRANT_HOME: the added box
DEMO = "cd /vagrant && sudo ./startlab demo"
INSIDE = "/var/tmp/startlab-inside"     # the command's output (.out) and exit code (.rc) in the guest
POLL_S = 30.0
UNREACHABLE_S = 300.0
TOOLS = ("vagrant", "libvirtd", "virtlogd", "virsh", "dnsmasq", "rsync")
# libvirt's directories that the private daemon gets from the scratch directory.
PRIVATE_DIRS = {"etc": "/etc/libvirt", "lib": "/var/lib/libvirt", "log": "/var/log/libvirt",
                "cache": "/var/cache/libvirt", "run": "/run"}
# Runs as `ip netns exec NS unshare -m --propagation private sh -c LAUNCH launch SCRATCH`.
LAUNCH = r"""
set -eu
w=$1
for pair in """ + " ".join(f"{sub}:{target}" for sub, target in PRIVATE_DIRS.items()) + r"""; do
  mkdir -p "${pair#*:}"; mount --bind "$w/${pair%%:*}" "${pair#*:}"
done
mkdir -p /run/libvirt
ip link set lo up
virtlogd -d
exec libvirtd
"""


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Report:
    accel: str
    accel_why: str
    steps: list[Step] = field(default_factory=list)
    demo_output: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]


class PrivateLibvirt:
    """A libvirtd of startlab's own, in its own network and mount namespaces (see above)."""

    def __init__(self, inst: registry.Instance):
        self.inst = inst
        self.netns = f"{inst.id}vg"
        self.scratch = Path(tempfile.mkdtemp(prefix="startlab-scratch-libvirt-"))
        self.proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.scratch / "run" / "libvirt" / "libvirt-sock"

    def env(self) -> dict[str, str]:
        return {**os.environ, "LIBVIRT_DEFAULT_URI": f"qemu:///system?socket={self.socket}"}

    def start(self, timeout_s: float = 60.0) -> None:
        for sub in PRIVATE_DIRS:
            (self.scratch / sub).mkdir()
        shutil.copytree("/etc/libvirt", self.scratch / "etc", dirs_exist_ok=True, symlinks=True)
        # Nothing of the host's autostarts in here (its default network stays undefined).
        for auto in (self.scratch / "etc").rglob("autostart"):
            shutil.rmtree(auto)
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        self.inst.add_undo(["sh", "-c", f"ip netns pids {self.netns} | xargs -r kill -9; sleep 1; "
                                        f"ip netns del {self.netns}; rm -rf {self.scratch}"],
                           f"private libvirtd in netns {self.netns}")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.netns, "unshare", "-m", "--propagation", "private",
                                      "sh", "-c", LAUNCH, "launch", str(self.scratch)],
                                     stdin=subprocess.DEVNULL, stdout=(self.scratch / "libvirtd.out").open("w"),
                                     stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise UserError(f"libvirtd exited {self.proc.returncode}: "
                                f"{(self.scratch / 'libvirtd.out').read_text(errors='replace')[-400:]}")
            if self.socket.exists() and self.virsh("version").returncode == 0:
                return
            time.sleep(0.5)
        raise UserError(f"libvirtd did not answer within {timeout_s:.0f} s")

    def virsh(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["virsh", "-q", *args], capture_output=True, text=True, env=self.env())

    def in_netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def stop(self) -> list[str]:
        """Destroy what is left of the guest, stop every process in the namespace, remove it."""
        if self.proc is not None and self.proc.poll() is None:
            # A guest `vagrant destroy` did not remove: stopped, and its disk (an overlay on the
            # box's volume, in the cached pool) removed with its definition.
            for name in self.virsh("list", "--all", "--name").stdout.split():
                self.virsh("destroy", name)
                self.virsh("undefine", name, "--remove-all-storage")
        pids = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 15)
            except (ProcessLookupError, ValueError):
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and subprocess.run(
                ["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout.split():
            time.sleep(0.5)
        return self.inst.remove_all()       # the undo: anything still there, the netns, the scratch


def _vagrant_env(lv: PrivateLibvirt, pool: str, accel: str, cpus: int, memory_mb: int, dot: Path) -> dict[str, str]:
    return {**lv.env(), "VAGRANT_HOME": str(HOME), "VAGRANT_DOTFILE_PATH": str(dot),
            "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_DEFAULT_PROVIDER": "libvirt",
            "STARTLAB_BOX": vm_box.NAME, "STARTLAB_VM_ACCEL": accel, "STARTLAB_VM_CPUS": str(cpus),
            "STARTLAB_VM_MEMORY": str(memory_mb), "STARTLAB_LIBVIRT_SOCKET": str(lv.socket),
            "STARTLAB_LIBVIRT_POOL": pool}


def _ensure_box(image: vm_image.Image, env: dict[str, str], progress) -> str:
    """Startlab's box in Vagrant's home, built and added unless this very box is there; returns
    its storage pool's directory name (one per box: a changed box never gets an old volume)."""
    key = vm_box.box_key(image)
    stamp = HOME / "box-key"
    listed = subprocess.run(["vagrant", "box", "list"], capture_output=True, text=True, env=env).stdout
    if not (stamp.is_file() and stamp.read_text().strip() == key and vm_box.NAME in listed):
        work = Path(tempfile.mkdtemp(prefix=".box-", dir=vm_image.CACHE_DIR))
        try:
            box_file = vm_box.build_box(image, work, progress)
            if vm_box.NAME in listed:
                subprocess.run(["vagrant", "box", "remove", "-f", "--all", vm_box.NAME], capture_output=True, env=env)
            r = subprocess.run(["vagrant", "box", "add", "--force", "--name", vm_box.NAME, str(box_file)],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                raise UserError(f"vagrant box add failed: {(r.stderr or r.stdout).strip()[-400:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        stamp.write_text(key)
    pool = f"pool-{key}"
    for old in HOME.glob("pool-*"):
        if old.name != pool:
            shutil.rmtree(old)
    (HOME / pool).mkdir(exist_ok=True)
    return pool


def _timed(report: Report, name: str, fn: Callable[[], str], progress) -> bool:
    progress(f"{name} …")
    t0 = time.monotonic()
    try:
        detail, ok = fn() or "", True
    except (UserError, subprocess.SubprocessError, OSError) as e:
        detail, ok = str(e), False
    step = Step(name, ok, round(time.monotonic() - t0, 1), detail)
    report.steps.append(step)
    progress(f"  {'ok' if ok else 'FAILED'} in {step.seconds:.0f} s{': ' + detail if detail else ''}")
    return ok


def _checked(argv: list[str], env: dict[str, str], log: Path, timeout_s: float, what: str) -> str:
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise UserError(f"{what} did not finish within {timeout_s:.0f} s (log {log})")
    if r.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-6:])
        raise UserError(f"{what} exited {r.returncode} (log {log}): {tail[-500:]}")
    return ""


def _ssh(lv: PrivateLibvirt, env: dict[str, str], command: str, timeout_s: float = 120) -> tuple[int, str]:
    try:
        r = subprocess.run(lv.in_netns(["vagrant", "ssh", "-c", command]), capture_output=True, text=True,
                           env=env, cwd=ROOT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 255, ""
    return r.returncode, r.stdout


def _inside(lv: PrivateLibvirt, env: dict[str, str], command: str, timeout_s: float, progress) -> tuple[int, str]:
    """Run `command` in the guest detached from the ssh session and poll for its end: one long
    session dropped (ssh's exit 255) while a loaded software-emulated guest ran a campaign,
    and the command's fate was then unknown. Returns (exit code, output)."""
    wrapped = f"( {command} ); echo $? > {INSIDE}.rc"     # a subshell: an `exit` in it ends only it
    rc, _ = _ssh(lv, env, f"rm -f {INSIDE}.rc {INSIDE}.out; setsid nohup sh -c {shlex.quote(wrapped)} "
                          f"> {INSIDE}.out 2>&1 < /dev/null &")
    if rc != 0:
        raise UserError(f"could not start the command in the VM (ssh exited {rc})")
    t0 = time.monotonic()
    unreachable_since: float | None = None
    while time.monotonic() - t0 < timeout_s:
        time.sleep(POLL_S)
        rc, out = _ssh(lv, env, f"cat {INSIDE}.rc 2>/dev/null; echo; tail -c 300 {INSIDE}.out | tr '\\r' '\\n' "
                                "| grep . | tail -1")
        if rc != 0:
            unreachable_since = unreachable_since or time.monotonic()
            if time.monotonic() - unreachable_since > UNREACHABLE_S:
                raise UserError(f"the VM did not answer ssh for {UNREACHABLE_S:.0f} s")
            continue
        unreachable_since = None
        first, _, last = out.partition("\n")
        if first.strip():
            _, full = _ssh(lv, env, f"cat {INSIDE}.out")
            return int(first.strip()), full
        progress(f"  {time.monotonic() - t0:.0f} s: {last.strip()[:160]}")
    raise UserError(f"the command in the VM did not finish within {timeout_s:.0f} s")


def run(accel: str, cpus: int, memory_mb: int, workdir: Path, timeout_s: float, inside: str = DEMO,
        progress=print) -> Report:
    """The whole path: image, box, private libvirtd, `vagrant up`, `inside` (the demo) in the
    VM, `vagrant destroy`."""
    missing = missing_tools()
    if missing:
        raise UserError(f"missing {', '.join(missing)}: provision with playbooks/bootstrap.sh (the vagrant stage)")
    HOME.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "vagrant.log"
    report = Report(accel=accel, accel_why="")
    state: dict = {}

    def build() -> str:
        image = vm_image.ensure_image(list(vm_image.KERNELS.values()), progress=progress)
        state["pool"] = _ensure_box(image, {**os.environ, "VAGRANT_HOME": str(HOME)}, progress)
        # The same probe as the kernel matrix: a KVM guest that cannot boot hangs, not fails.
        report.accel, report.accel_why = qemu.choose_accel(image, vm_image.KERNELS[vm_box.KERNEL], ROOT,
                                                           workdir, accel)
        return f"{vm_box.NAME} {state['pool'][len('pool-'):]}; {report.accel}: {report.accel_why}"

    if not _timed(report, "image and box (each built once)", build, progress):
        return report
    accel = report.accel
    # The guest gets this checkout as it is, and it cannot install anything (its network ends
    # at the private libvirt's NAT): the checkout must be provisioned for its current files,
    # fully (`./run.py` in the guest asks for the full stage, the demo for the core one).
    if not _timed(report, "the checkout provisioned (the guest runs it as is)",
                  lambda: _checked([str(ROOT / "playbooks" / "bootstrap.sh"), "--stage", "full"], dict(os.environ),
                                   log, 3600, "provisioning the checkout"), progress):
        return report
    inst = registry.new_instance()
    lv = PrivateLibvirt(inst)
    try:
        def start() -> str:
            lv.start()
            pool = state["pool"]
            state["env"] = _vagrant_env(lv, pool, accel, cpus, memory_mb, workdir / "dot")
            r = lv.virsh("pool-create-as", pool, "dir", "--target", str(HOME / pool))
            if r.returncode != 0:
                raise UserError(f"virsh pool-create-as: {r.stderr.strip()}")
            return f"netns {lv.netns}, libvirt {lv.virsh('version', '--daemon').stdout.split(':')[-1].strip()}"

        if not _timed(report, "private libvirtd", start, progress):
            return report
        env = state["env"]
        up = lambda: _checked(lv.in_netns(["vagrant", "up", "--provider", "libvirt"]), env, log, timeout_s, "vagrant up")
        if _timed(report, "vagrant up", up, progress):
            def demo() -> str:
                rc, report.demo_output = _inside(lv, env, inside, timeout_s, progress)
                (workdir / "demo.out").write_text(report.demo_output)
                if rc != 0:
                    tail = " | ".join(report.demo_output.strip().splitlines()[-3:])
                    raise UserError(f"exited {rc} in the VM: {tail[-400:]}")
                return ""
            _timed(report, f"vagrant ssh -c '{inside}'", demo, progress)
        _timed(report, "vagrant destroy", lambda: _checked(lv.in_netns(["vagrant", "destroy", "-f"]), env, log,
                                                             600, "vagrant destroy"), progress)
    finally:
        lv.stop()
    return report


def as_json(report: Report) -> dict:
    return {"accel": report.accel, "accel_why": report.accel_why, "ok": report.ok,
            "steps": [asdict(s) for s in report.steps], "demo_output": report.demo_output}


def text(report: Report) -> str:
    lines = [f"accelerator: {report.accel} ({report.accel_why})"]
    for s in report.steps:
        lines.append(f"{'ok    ' if s.ok else 'FAILED'} {s.seconds:7.0f} s  {s.name}{': ' + s.detail if s.detail else ''}")
    lines.append(f"total {sum(s.seconds for s in report.steps):.0f} s: {'ok' if report.ok else 'failed'}")
    return "\n".join(lines)
