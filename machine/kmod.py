"""startlab's kernel modules (their sources in hosts/kmod/: what a BPF program cannot do,
done where a kernel loads modules). Each is built against the kernel's own headers (Debian's
linux-headers and linux-kbuild packages) with module BTF, since BPF programs call its
kfuncs, into the directory of that kernel's BPF objects (machine/binaries.BPF_OBJECTS);
an instance loads it and removes it at teardown.

The stock-kernel guest loads them: machine/vm/icount.py builds them on the host against
the guest kernel's headers and BTF, beside its BPF objects. A host whose kernel has its
headers installed builds them for itself (`ensure_built`).
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from machine import binaries, registry

HERE = binaries.REPO / "hosts" / "kmod"          # the modules' sources and their Kbuild
PROC_MODULES = Path("/proc/modules")
MODULES_DISABLED = Path("/proc/sys/kernel/modules_disabled")
KALLSYMS = Path("/proc/kallsyms")
# Where a kbuild keeps the tool that gives a module's kfunc sets their BTF ids (Debian's 6.12
# kbuild has it, its 6.1 kbuild has not).
RESOLVE_BTFIDS = Path("tools/bpf/resolve_btfids/resolve_btfids")
# Each module's parameters that take the address of a kernel function not exported to
# modules (read from /proc/kallsyms at load, checked by the module against its symbol).
ADDRESS_PARAMS = {"stl_fs_gbn": {"enter_loss": "tcp_enter_loss"}}
# Beside the objects built for another kernel (the guest's): why its modules are not there.
BUILD_FAILED = "kmod-build-failed.txt"


class KmodError(Exception):
    pass


def sources() -> list[Path]:
    return sorted(HERE.glob("*.c"))


def module_path(name: str, out: Path | None = None) -> Path:
    return (out or binaries.BPF_OBJECTS) / f"{name}.ko"


def _section(elf: Path, name: str) -> bytes | None:
    """One section of a 64-bit little-endian ELF file (a .ko), or None."""
    data = elf.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    for h in headers:
        start = strtab[4] + h[0]
        if data[start:data.index(b"\0", start)].decode() == name:
            return data[h[4]:h[4] + h[5]]
    return None


def btf_ids_resolved(ko: Path) -> bool:
    """Whether the module's kfunc sets carry BTF ids (resolve_btfids ran): a set8 is a
    count and flags, then (id, flags) pairs; an unresolved id is 0."""
    ids = _section(ko, ".BTF_ids")
    if not ids or _section(ko, ".BTF") is None:
        return False
    count, = struct.unpack_from("<I", ids, 0)
    pairs = [struct.unpack_from("<II", ids, 8 + 8 * i) for i in range(count)]
    return count > 0 and all(ident for ident, _ in pairs)


def _shadow_tree(headers: Path, btf: Path, root: Path, where: Path) -> Path:
    """An object tree of symlinks to `headers`' entries, with the kernel's BTF as its
    vmlinux: kbuild's step for module BTF runs only when the object tree has a vmlinux with
    BTF, and Debian's headers have none. Debian's headers Makefile includes the common part
    by its absolute path, which, for headers unpacked under `root`, is rewritten to point
    there."""
    tree = where / "objtree"
    tree.mkdir()
    for entry in headers.iterdir():
        if entry.name not in ("Makefile", "vmlinux"):
            (tree / entry.name).symlink_to(os.path.realpath(entry))
    makefile = (headers / "Makefile").read_text()
    if root != Path("/"):
        makefile = makefile.replace("include /", f"include {root}/")
    (tree / "Makefile").write_text(makefile)
    (tree / "vmlinux").symlink_to(btf.resolve())
    return tree


def build(headers: Path, btf: Path, out: Path, resolve_btfids: Path | None = None,
          root: Path = Path("/")) -> list[Path]:
    """Build every module here against a kernel's `headers` (its build directory; unpacked
    under `root` if not installed) with module BTF based on `btf` (the kernel's
    /sys/kernel/btf/vmlinux), into `out`. Quick when nothing changed. `resolve_btfids` is
    for a kbuild that lacks it (Debian's 6.1 does; its 6.12 ships one, and the tool reads
    any kernel's objects)."""
    out.mkdir(parents=True, exist_ok=True)
    built = [module_path(src.stem, out) for src in sources()]
    newest = max(p.stat().st_mtime for p in [*sources(), HERE / "Kbuild", btf])
    if all(ko.is_file() and ko.stat().st_mtime > newest for ko in built):
        return built
    if shutil.which("pahole") is None:
        raise KmodError("pahole is missing (the dwarves package): the modules' BTF cannot be made; "
                        "provision with playbooks/bootstrap.sh")
    tool = resolve_btfids or headers / RESOLVE_BTFIDS
    if not tool.exists():
        raise KmodError(f"this kernel's kbuild ({headers}) has no resolve_btfids: the modules' kfuncs "
                        "cannot get their BTF ids")
    with tempfile.TemporaryDirectory(prefix="stl-kmod-") as tmp:
        work = Path(tmp)
        src = work / "src"
        src.mkdir()
        for f in [*sources(), HERE / "Kbuild"]:
            shutil.copy(f, src / f.name)
        tree = _shadow_tree(headers, btf, root, work)
        # The build directory is random: mapped to one name, two builds give the same bytes
        # (the module is part of the virtual clock's bundle, docs/emulation.md).
        r = subprocess.run(["make", "-C", str(tree), f"M={src}", f"RESOLVE_BTFIDS={tool.resolve()}",
                            f"KCFLAGS=-ffile-prefix-map={work}=/startlab-kmod", "modules"],
                           capture_output=True, text=True)
        if r.returncode != 0 or "Skipping BTF generation" in r.stderr:
            raise KmodError(f"building the kernel modules against {headers} failed: "
                            f"{(r.stderr or r.stdout).strip()[-600:]}")
        for ko in built:
            made = src / ko.name
            if not btf_ids_resolved(made):
                raise KmodError(f"{ko.name}: its kfunc set has no BTF ids after the build")
            if str(work).encode() in made.read_bytes():
                raise KmodError(f"{ko.name} names its build directory {work}: two builds would differ")
            shutil.copy(made, ko.with_suffix(".ko.tmp"))
            os.rename(ko.with_suffix(".ko.tmp"), ko)
    return built


def local_headers() -> Path:
    return Path("/lib/modules") / os.uname().release / "build"


def cannot_load() -> str | None:
    """Why this kernel cannot load a module of ours at all (None: it can)."""
    if not PROC_MODULES.exists():
        return f"kernel {os.uname().release} loads no modules (built without CONFIG_MODULES)"
    if MODULES_DISABLED.is_file() and MODULES_DISABLED.read_text().strip() == "1":
        return "module loading is disabled on this machine (kernel.modules_disabled = 1)"
    if shutil.which("insmod") is None:
        return "insmod is missing (the kmod package)"
    return None


def ensure_built(name: str) -> Path:
    """This kernel's build of module `name`: the one beside the BPF objects (the guest's,
    built on the host), else built now against the installed headers."""
    ko = module_path(name)
    if ko.is_file() and _vermagic_release(ko) == os.uname().release:
        return ko
    failed = ko.parent / BUILD_FAILED
    if failed.is_file():
        raise KmodError(failed.read_text().strip())
    headers = local_headers()
    if not (headers / "Makefile").is_file():
        raise KmodError(f"no headers for kernel {os.uname().release} ({headers}): install "
                        f"linux-headers-{os.uname().release}")
    btf = Path("/sys/kernel/btf/vmlinux")
    if not btf.is_file():
        raise KmodError("this kernel has no BTF (/sys/kernel/btf/vmlinux): a module's kfuncs need it")
    build(headers, btf, ko.parent)
    return ko


def _vermagic_release(ko: Path) -> str | None:
    """The kernel release a module was built for (the first word of its vermagic)."""
    info = _section(ko, ".modinfo") or b""
    for field in info.split(b"\0"):
        if field.startswith(b"vermagic="):
            return field[len(b"vermagic="):].decode().split()[0]
    return None


def kallsyms(symbol: str) -> int:
    """The address of a kernel function, as root reads it from /proc/kallsyms."""
    for line in KALLSYMS.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == symbol and parts[1] in "tT":
            address = int(parts[0], 16)
            if address == 0:
                raise KmodError("/proc/kallsyms hides addresses (kernel.kptr_restrict): run as root, "
                                "or with kptr_restrict at most 1")
            return address
    raise KmodError(f"kernel {os.uname().release} has no function {symbol}")


def loaded(name: str) -> bool:
    return Path("/sys/module", name).is_dir()


def load(instance: registry.Instance, name: str) -> None:
    """Load module `name` for `instance`, recording its removal. Shared by instances of ours
    that run at once: whichever finds it loaded uses it, and removal waits until no
    congestion control calls into it any more (a BPF program holds its module)."""
    why = cannot_load()
    if why:
        raise KmodError(why)
    if not loaded(name):
        ko = ensure_built(name)
        params = {param: hex(kallsyms(symbol)) for param, symbol in ADDRESS_PARAMS.get(name, {}).items()}
        r = subprocess.run(["insmod", str(ko), *(f"{k}={v}" for k, v in params.items())],
                           capture_output=True, text=True)
        if r.returncode != 0 and not loaded(name):
            tail = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.strip().splitlines()[-2:]
            raise KmodError(f"insmod {ko.name} failed: {r.stderr.strip()} ({' | '.join(tail)})")
    # A BPF program's module reference goes some time after its struct_ops is unregistered.
    instance.add_undo(["sh", "-c", f"for i in $(seq 100); do [ -d /sys/module/{name} ] || exit 0; "
                                   f"rmmod {name} 2>/dev/null && exit 0; sleep 0.05; done; exit 1"],
                      f"kernel module {name}")


def ours_loaded() -> list[str]:
    """Modules of ours in the kernel (those named as a source in hosts/kmod)."""
    base = Path("/sys/module")
    names = {src.stem for src in sources()}
    return sorted(p.name for p in base.iterdir() if p.name in names) if base.is_dir() else []
