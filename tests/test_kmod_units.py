"""Unit tests of machine/kmod's pure logic: reading a module's sections, the object tree a
module is built in, the reasons a kernel cannot load one, kallsyms."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from machine import kmod
from hosts.implementations.faststart import CCS, GBN_CCS, IMPLEMENTATION as FASTSTART
from topologies.endhosts import EndHostDefaults


def elf_with(sections: dict[str, bytes]) -> bytes:
    """A minimal 64-bit little-endian ELF file holding `sections` (and its name table)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    body, offsets = bytearray(b"\0" * 64), []
    for data in [*sections.values(), names]:
        offsets.append(len(body))
        body += data
    shoff = len(body)
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    name_at = 1
    for (name, data), off in zip([*sections.items(), (".shstrtab", names)], offsets):
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, off, len(data), 0, 0, 1, 0))
        name_at += len(name) + 1
    body[0:4] = b"\x7fELF"
    struct.pack_into("<Q", body, 0x28, shoff)
    struct.pack_into("<HHH", body, 0x3A, 64, len(headers), len(headers) - 1)
    return bytes(body) + b"".join(headers)


def set8(*ids: int) -> bytes:
    return struct.pack("<II", len(ids), 0) + b"".join(struct.pack("<II", i, 0) for i in ids)


def test_a_kfunc_set_counts_as_resolved_only_with_btf_and_nonzero_ids(tmp_path: Path) -> None:
    ko = tmp_path / "m.ko"
    ko.write_bytes(elf_with({".BTF": b"btf", ".BTF_ids": set8(100648)}))
    assert kmod.btf_ids_resolved(ko)
    ko.write_bytes(elf_with({".BTF": b"btf", ".BTF_ids": set8(0)}))      # resolve_btfids never ran
    assert not kmod.btf_ids_resolved(ko)
    ko.write_bytes(elf_with({".BTF_ids": set8(100648)}))                  # no module BTF
    assert not kmod.btf_ids_resolved(ko)
    ko.write_bytes(elf_with({".BTF": b"btf", ".BTF_ids": set8()}))        # an empty set
    assert not kmod.btf_ids_resolved(ko)


def test_the_kernel_a_module_was_built_for_is_read_from_its_vermagic(tmp_path: Path) -> None:
    ko = tmp_path / "m.ko"
    info = b"license=GPL\0vermagic=6.1.0-50-amd64 SMP preempt mod_unload modversions \0name=m\0"
    ko.write_bytes(elf_with({".modinfo": info}))
    assert kmod._vermagic_release(ko) == "6.1.0-50-amd64"
    ko.write_bytes(elf_with({".modinfo": b"license=GPL\0"}))
    assert kmod._vermagic_release(ko) is None


def test_the_object_tree_points_at_unpacked_headers_and_takes_the_kernels_btf(tmp_path: Path) -> None:
    """Debian's headers Makefile includes the common part by absolute path: for headers
    unpacked elsewhere the include is moved there, every other entry is a link to its real
    place (relative links of the package resolved), and vmlinux is the kernel's BTF."""
    root = tmp_path / "root"
    headers = root / "usr/src/linux-headers-6.1.0-50-amd64"
    kbuild = root / "usr/lib/linux-kbuild-6.1/scripts"
    kbuild.mkdir(parents=True)
    headers.mkdir(parents=True)
    (headers / "Makefile").write_text("include /usr/src/linux-headers-6.1.0-50-common/Makefile\n")
    (headers / ".config").write_text("CONFIG_MODULES=y\n")
    (headers / "scripts").symlink_to("../../lib/linux-kbuild-6.1/scripts")
    (headers / "vmlinux").write_text("the package's own")
    btf = tmp_path / "btf"
    btf.write_bytes(b"\x9f\xeb")
    work = tmp_path / "work"
    work.mkdir()
    tree = kmod._shadow_tree(headers, btf, root, work)
    assert (tree / "Makefile").read_text() == f"include {root}/usr/src/linux-headers-6.1.0-50-common/Makefile\n"
    assert (tree / "scripts").resolve() == kbuild.resolve()
    assert (tree / ".config").read_text() == "CONFIG_MODULES=y\n"
    assert (tree / "vmlinux").resolve() == btf.resolve()
    (tmp_path / "work2").mkdir()
    installed = kmod._shadow_tree(headers, btf, Path("/"), tmp_path / "work2")     # headers where they belong
    assert (installed / "Makefile").read_text() == (headers / "Makefile").read_text()


def test_a_kernel_that_cannot_load_modules_says_why(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(kmod, "PROC_MODULES", tmp_path / "no-modules")
    assert "CONFIG_MODULES" in kmod.cannot_load()
    (tmp_path / "modules").write_text("")
    (tmp_path / "disabled").write_text("1\n")
    monkeypatch.setattr(kmod, "PROC_MODULES", tmp_path / "modules")
    monkeypatch.setattr(kmod, "MODULES_DISABLED", tmp_path / "disabled")
    assert "modules_disabled" in kmod.cannot_load()


def test_kallsyms_gives_a_functions_address_or_the_reason_it_cannot(tmp_path: Path, monkeypatch) -> None:
    syms = tmp_path / "kallsyms"
    monkeypatch.setattr(kmod, "KALLSYMS", syms)
    syms.write_text("ffffffff81a00000 T tcp_enter_loss\nffffffff81a00100 t tcp_enter_loss_x\n"
                    "ffffffff82000000 D tcp_enter_loss_data\n")
    assert kmod.kallsyms("tcp_enter_loss") == 0xFFFFFFFF81A00000
    with pytest.raises(kmod.KmodError, match="no function tcp_enter_loss_data"):
        kmod.kallsyms("tcp_enter_loss_data")            # data, not a function
    syms.write_text("0000000000000000 T tcp_enter_loss\n")
    with pytest.raises(kmod.KmodError, match="kptr_restrict"):
        kmod.kallsyms("tcp_enter_loss")


def test_the_multiple_loss_rule_is_its_own_congestion_control() -> None:
    """fs loads everywhere; with gbn the object whose kfunc needs the module, declared as
    the congestion control a run reads back."""
    plain, gbn = FASTSTART.resolve({}), FASTSTART.resolve({"gbn": True})
    assert FASTSTART.kernel_objects("server", plain)[0] == CCS.object
    assert FASTSTART.kernel_objects("server", gbn)[0] == GBN_CCS.object
    defaults = EndHostDefaults()
    assert FASTSTART.declares("server", plain, defaults).cc == ("fs",)
    assert FASTSTART.declares("server", gbn, defaults).cc == ("fsgbn",)
