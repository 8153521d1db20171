"""A VM image of a stock Debian userland with Debian's own kernels, built from Debian's
packages (debootstrap) and cached outside the checkout, keyed by the packages' versions.

The guest runs startlab from the host's checkout (shared over 9p at the same path), so its
userland is the host's release (bookworm): the same Python, the same distribution
packages the checkout's venv and native builds were made against. What differs is only
the kernel, which is the point: one image holds every kernel of KERNELS, and qemu boots
the one asked for (machine/vm/qemu.py).

The mirror is the host's own Debian mirror, read from its apt sources: a user's
configuration, not a host named here.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from machine.errors import UserError

SUITE = "bookworm"
# The machine's cache, where root builds images. An ordinary user (a cluster's, where jobs
# do not run as root) boots the newest image found there from a copy in a cache of their
# own (user_image): QEMU maps the image privately but opens it for writing.
SYSTEM_CACHE = Path("/var/cache/startlab/vm")


def _cache_dir() -> Path:
    if os.environ.get("STARTLAB_VM_CACHE"):
        return Path(os.environ["STARTLAB_VM_CACHE"])
    if os.geteuid() == 0:
        return SYSTEM_CACHE
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "startlab" / "vm"


CACHE_DIR = _cache_dir()
IMAGE_SIZE = "6G"
# The guest's init (PID 1): mounts the share and hands over to the checkout's guest script.
GUEST_INIT = Path(__file__).with_name("guest-init.sh")
# PID 1 on the virtual clock (machine/vm/icount.py): no host I/O but character devices.
VIRTUAL_INIT = Path(__file__).with_name("virtual-init.sh")
# Loaded by the initramfs: the virtual clock's root and bundle are NVDIMMs (reads are memory
# copies, synchronous in guest time), and its only way out is a virtio serial port.
INITRAMFS_MODULES = ("libnvdimm", "nfit", "nd_pmem", "nd_btt", "virtio_console")


@dataclass(frozen=True)
class Kernel:
    """One stock kernel: where Debian ships it."""
    name: str          # what users type: --kernels 6.1,6.12
    suite: str         # the suite its linux-image-amd64 comes from
    shipped_by: str    # which distribution release ships it by default


KERNELS = {
    "6.1": Kernel("6.1", SUITE, "Debian 12"),
    "6.12": Kernel("6.12", f"{SUITE}-backports", "Debian 13, and Debian 12's backports"),
}

# What the checks run inside the guest. The host's checkout brings the venv and the Rust
# builds (and the QUIC stacks' programs and venv, hosts/stacks); the BPF programs are built
# in the guest against its own kernel's BTF, as provisioning does on a user's machine
# (hosts/bpf/build.sh), hence clang and libbpf. ngtcp2's stack is Debian's example programs.
GUEST_PACKAGES = (
    "initramfs-tools", "kmod", "procps", "iproute2", "iputils-ping", "ethtool", "psmisc",
    "mininet", "openvswitch-switch", "bridge-utils", "iperf3", "lighttpd", "curl", "tcpdump",
    "httperf", "vsftpd", "bpftool", "python3", "python3-venv", "python3-yaml", "python3-numpy",
    "python3-scipy", "python3-matplotlib", "python3-pytest", "ca-certificates",
    "clang", "llvm", "libbpf-dev", "linux-libc-dev", "libc6-dev", "ngtcp2-client", "ngtcp2-server",
)


def kernel_names() -> list[str]:
    return list(KERNELS)


def parse_kernels(text: str) -> list[Kernel]:
    """'6.1,6.12' → Kernels; an unknown name lists the valid ones."""
    out = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        if name not in KERNELS:
            raise UserError(f"unknown kernel '{name}': choose from {', '.join(KERNELS)}")
        out.append(KERNELS[name])
    if not out:
        raise UserError(f"no kernel given: choose from {', '.join(KERNELS)}")
    return out


def host_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror the host's apt uses for SUITE (deb822 or one-line sources)."""
    files = sorted(sources.glob("sources.list.d/*.sources")) + sorted(sources.glob("sources.list.d/*.list"))
    files += [sources / "sources.list"]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and SUITE in suites.group(1).split():
                return uris.group(1)
        for line in text.splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s", line)
            if m and m.group(2) == SUITE:
                return m.group(1)
    raise UserError(f"no Debian {SUITE} mirror in the host's apt sources ({sources}): the VM image is "
                    "built from Debian's packages; give one with --mirror")


@dataclass
class Image:
    """A built image: the root filesystem and, per kernel, its vmlinuz and initrd."""
    dir: Path

    @property
    def disk(self) -> Path:
        return self.dir / "root.ext4"

    @property
    def manifest(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())

    def boot_files(self, kernel: Kernel) -> tuple[Path, Path, str]:
        """(vmlinuz, initrd, exact kernel release) of one kernel of the image."""
        entry = self.manifest["kernels"].get(kernel.name)
        if not entry:
            raise UserError(f"the image in {self.dir} has no {kernel.name} kernel")
        return self.dir / entry["vmlinuz"], self.dir / entry["initrd"], entry["release"]


def _run(argv: list[str], log: Path, **kw) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise UserError(f"building the VM image: '{' '.join(argv[:3])} …' exited {r.returncode} "
                        f"(log {log}):\n  " + "\n  ".join(tail))


def _private_apt(mirror: str, suites: list[str], work: Path) -> list[str]:
    """apt options for a private apt state in `work` reading `suites` of the mirror (the
    host's apt configuration and lists stay as they are), its lists updated."""
    state = work / "apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text("".join(f"deb {mirror} {s} main\n" for s in sorted(set(suites))))
    opts = [f"-oDir::State={state}", f"-oDir::Cache={state / 'cache'}", f"-oDir::Etc::SourceList={state / 'sources.list'}",
            "-oDir::Etc::SourceParts=/nonexistent", "-oAPT::Architecture=amd64"]
    r = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"apt-get update against {mirror} failed: {r.stderr.strip()[-400:]}")
    return opts


def _apt_versions(mirror: str, packages: list[tuple[str, str]], work: Path) -> dict[str, str]:
    """Candidate versions of (package, suite) pairs on the mirror."""
    opts = _private_apt(mirror, [s for _, s in packages], work)
    out = {}
    for pkg, suite in packages:
        r = subprocess.run(["apt-cache", *opts, "madison", pkg], capture_output=True, text=True)
        versions = [ln.split("|") for ln in r.stdout.splitlines() if "|" in ln]
        match = [v[1].strip() for v in versions if f" {suite}/" in v[2] or v[2].strip().startswith(suite + "/")]
        if not match:
            raise UserError(f"{pkg} not found in {suite} on {mirror}")
        out[f"{pkg}@{suite}"] = match[0]
    return out


def cache_key(versions: dict[str, str]) -> str:
    """The image's key: the kernels' versions, the guest's package list and its init."""
    h = hashlib.sha256(json.dumps({"versions": versions, "packages": GUEST_PACKAGES, "suite": SUITE,
                                   "init": GUEST_INIT.read_text(), "virtual_init": VIRTUAL_INIT.read_text(),
                                   "initramfs_modules": INITRAMFS_MODULES}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def ensure_image(kernels: list[Kernel], mirror: str | None = None, progress=print) -> Image:
    """The cached image holding `kernels`, built first if there is none for these versions.

    Built in a temporary directory beside the cache and renamed into place when whole: an
    interrupted build leaves no half image that a later run would take for a good one.
    """
    for tool in ("debootstrap", "mkfs.ext4", "chroot"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is missing: provision with playbooks/bootstrap.sh (it installs the VM tools)")
    mirror = mirror or host_mirror()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=CACHE_DIR))
    try:
        wanted = sorted(KERNELS.values(), key=lambda k: k.name)   # one image holds every kernel
        versions = _apt_versions(mirror, [("linux-image-amd64", k.suite) for k in wanted], work)
        key = cache_key(versions)
        image = Image(CACHE_DIR / key)
        if (image.dir / "manifest.json").is_file():
            os.chmod(image.dir, 0o755)         # readable by the machine's users (user_image)
            return image
        progress(f"building the VM image {key} from Debian's packages ({', '.join(f'{k}={v}' for k, v in versions.items())})")
        _build(work, mirror, wanted, versions, progress)
        shutil.rmtree(work / "apt", ignore_errors=True)
        os.chmod(work, 0o755)
        os.rename(work, image.dir)
        return image
    finally:
        if work.exists():
            _remove_tree(work)


def newest_image(cache: Path) -> Image | None:
    """The most recently built whole image in `cache` (None: there is none); a build or a
    copy under way (a dot directory) is not one yet."""
    built = sorted((m for m in cache.glob("*/manifest.json") if not m.parent.name.startswith(".")),
                   key=lambda p: p.stat().st_mtime) if cache.is_dir() else []
    return Image(built[-1].parent) if built else None


def user_image(progress=print) -> Image:
    """An ordinary user's image: the newest in their cache, else a copy of the newest the
    machine's root built (SYSTEM_CACHE), made once. Building one takes root (debootstrap,
    chroot), so a user never builds; the error says who can."""
    own = newest_image(CACHE_DIR)
    system = newest_image(SYSTEM_CACHE) if CACHE_DIR != SYSTEM_CACHE else None
    if own is not None and (system is None or own.dir.name == system.dir.name):
        return own
    if system is None:
        raise UserError(f"no VM image for the virtual clock in {CACHE_DIR} or {SYSTEM_CACHE}, and building "
                        "one needs root (debootstrap): run `sudo ./run.py doctor --clock virtual` once on this "
                        "machine, or point STARTLAB_VM_CACHE at a cache that holds one")
    if not os.access(system.disk, os.R_OK):
        raise UserError(f"the machine's VM image {system.dir} is not readable by this user: root made it "
                        "before images were made readable; `sudo ./run.py doctor --clock virtual` makes it so")
    progress(f"copying the machine's VM image {system.dir.name} into {CACHE_DIR} (once; QEMU opens it for "
             "writing, and it is root's)")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=CACHE_DIR))
    try:
        for src in sorted(system.dir.iterdir()):
            if src.name.startswith("."):
                continue                        # another boot's work, another build
            dst = work / src.name
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=True)
            else:
                subprocess.run(["cp", "--sparse=always", "--preserve=timestamps", str(src), str(dst)], check=True)
        os.rename(work, CACHE_DIR / system.dir.name)
        return Image(CACHE_DIR / system.dir.name)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _mounts_below(path: Path) -> list[str]:
    """Mount points at or under `path`, deepest first (debootstrap and a killed build can
    leave /proc, /sys or /dev mounted in the root being built)."""
    prefix = str(path.resolve())
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _remove_tree(path: Path) -> None:
    """Remove a build directory, never through a mount: unmount what is mounted below it
    first, and refuse to remove anything if a mount stays."""
    for point in _mounts_below(path):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    left = _mounts_below(path)
    if left:
        raise UserError(f"{path} still has mounts ({', '.join(left)}): not removing it; unmount them by hand")
    shutil.rmtree(path, ignore_errors=True)


def _build(work: Path, mirror: str, kernels: list[Kernel], versions: dict[str, str], progress) -> None:
    root = work / "root"
    log = work / "build.log"
    t0 = time.monotonic()
    progress("  debootstrap (userland and the 6.1 kernel) …")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(GUEST_PACKAGES + ('linux-image-amd64',))}",
          SUITE, str(root), mirror], log)
    backports = sorted({k.suite for k in kernels if k.suite != SUITE})
    if backports:
        progress(f"  kernels from {', '.join(backports)} …")
        (root / "etc/apt/sources.list.d/startlab-kernels.list").write_text(
            "".join(f"deb {mirror} {s} main\n" for s in backports))
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["chroot", str(root), "apt-get", "update"], log, env=env)
        for suite in backports:
            _run(["chroot", str(root), "apt-get", "install", "-y", "--no-install-recommends", "-t", suite,
                  "linux-image-amd64"], log, env=env)
        _run(["chroot", str(root), "apt-get", "clean"], log)
    for init, name in ((GUEST_INIT, "startlab-init"), (VIRTUAL_INIT, "startlab-vinit")):
        shutil.copy(init, root / "sbin" / name)
        os.chmod(root / "sbin" / name, 0o755)
    progress("  initramfs with the NVDIMM and virtio console drivers …")
    with (root / "etc/initramfs-tools/modules").open("a") as f:
        f.write("".join(m + "\n" for m in INITRAMFS_MODULES))
    _run(["chroot", str(root), "update-initramfs", "-u", "-k", "all"], log)
    (root / "etc/hostname").write_text("startlab-guest\n")
    manifest = {"suite": SUITE, "mirror": mirror, "versions": versions, "packages": list(GUEST_PACKAGES),
                "kernels": {}, "built_unix_s": time.time()}
    releases = sorted(p.name[len("vmlinuz-"):] for p in (root / "boot").glob("vmlinuz-*"))
    for k in kernels:
        major = [r for r in releases if re.match(rf"{re.escape(k.name)}\.", r)]
        if not major:
            raise UserError(f"the image has no {k.name} kernel after installing it (found {releases})")
        release = major[-1]
        for f in (f"vmlinuz-{release}", f"initrd.img-{release}"):
            shutil.copy(root / "boot" / f, work / f)
        manifest["kernels"][k.name] = {"release": release, "vmlinuz": f"vmlinuz-{release}",
                                       "initrd": f"initrd.img-{release}"}
    progress("  ext4 image …")
    _run(["mkfs.ext4", "-q", "-F", "-L", "startlab", "-d", str(root), str(work / "root.ext4"), IMAGE_SIZE], log)
    _remove_tree(root)
    manifest["build_s"] = round(time.monotonic() - t0, 1)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1))
    progress(f"  built in {manifest['build_s']:.0f} s")


def kernel_headers(image: Image, kernel: Kernel, progress=print) -> tuple[Path, Path]:
    """(root, headers) of the kernel's build directory, Debian's linux-headers and
    linux-kbuild packages of exactly the image's kernel unpacked under `root` beside the
    image (once): what startlab's kernel modules are built against (hosts/kmod). Taken
    from the mirror the image was built from, where the image's versions are current (an
    image is keyed by them)."""
    _, _, release = image.boot_files(kernel)
    root = image.dir / f"kbuild-{release}"
    headers = root / "usr" / "src" / f"linux-headers-{release}"
    if (headers / "Makefile").is_file():
        return root, headers
    progress(f"fetching the headers of kernel {release} (once per image and kernel) …")
    work = Path(tempfile.mkdtemp(prefix=".work-kbuild-", dir=image.dir))
    try:
        opts = _private_apt(image.manifest["mirror"], [kernel.suite], work)
        debs = work / "debs"
        debs.mkdir()
        wanted, done = [f"linux-headers-{release}"], set()
        while wanted:                           # the headers, their common part, the kbuild
            pkg = wanted.pop()
            r = subprocess.run(["apt-get", *opts, "download", pkg], cwd=debs, capture_output=True, text=True)
            if r.returncode != 0:
                raise UserError(f"downloading {pkg} from {image.manifest['mirror']} failed: {r.stderr.strip()[-300:]}")
            done.add(pkg)
            deb = next(debs.glob(f"{pkg}_*.deb"))
            depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True).stdout
            for dep in (d.split()[0] for d in depends.replace("|", ",").split(",") if d.strip()):
                if dep.startswith(("linux-headers-", "linux-kbuild-")) and dep not in done:
                    wanted.append(dep)
        unpacked = work / "root"
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)           # an earlier, interrupted unpacking
        os.rename(unpacked, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root, headers
