"""Loads startlab's BPF objects with bpftool and keeps their per-node settings.

Per emulation instance (one Network), created on first use and removed at teardown:
  - the congestion controls of hosts/bpf/stl_cc.bpf.c, registered as struct_ops under
    names carrying the instance prefix ("stl3f_blitz"), so concurrent instances never
    collide (a congestion control's name is machine-wide);
  - the sock_ops program of hosts/bpf/stl_sockops.bpf.c, pinned with its maps under
    /sys/fs/bpf/<prefix>/ and attached (multi) to the cgroup v2 root, where it runs for
    every namespace; it acts only on namespaces whose netns cookie is a key of its
    `stl_nodes` map, which install/remove fill and empty node by node.

Every object is recorded in the instance's registry entry as it is made (undo
commands run newest first), so teardown and `run.py clean` remove exactly these.
Debian's libbpf 1.1 cannot load `.struct_ops.link`, hence the legacy `.struct_ops`
section that `bpftool struct_ops register` keeps registered until unregistered.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from machine import registry
from machine.capabilities import bpffs_mount, cgroup2_mount

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
OBJ_DIR = REPO / "target" / "bpf"
CC_OBJECT = OBJ_DIR / "stl_cc.bpf.o"
SOCKOPS_OBJECT = OBJ_DIR / "stl_sockops.bpf.o"
BPFFS = Path("/sys/fs/bpf")
MOUNT_MARKER = registry.REGISTRY_DIR / "bpffs.mounted-by-startlab"

CC_PLACEHOLDER = "stlXX"                       # the prefix written in stl_cc.bpf.c's names
CC_KINDS = ("js_reno", "js_cubic", "blitz")

# struct stl_node_cfg (hosts/bpf/stl_common.h): flags, hint_kbps, tech, sndbuf, cc[16],
# then the counters the program writes.
CFG_FORMAT = "<4I16s8I"
CFG_SIZE = struct.calcsize(CFG_FORMAT)
COUNTERS = ("syns_hinted", "hints_seen", "last_hint_kbps", "last_rtt_us", "last_cwnd", "cc_set", "errors")
CLIENT_HINT, SERVER_BLITZ, SERVER_JS = 1 << 0, 1 << 1, 1 << 2
SO_NETNS_COOKIE = 71

# Unmount bpffs only if startlab mounted it and nothing but the kernel's own
# preload entries (maps.debug, progs.debug) is left in it.
_UMOUNT_IF_OURS = (f'[ -e "{MOUNT_MARKER}" ] || exit 0; '
                   f'for e in {BPFFS}/*; do case "$e" in *.debug|"{BPFFS}/*") ;; *) exit 0;; esac; done; '
                   f'umount {BPFFS} && rm -f "{MOUNT_MARKER}"')


class BpfError(RuntimeError):
    pass


def bpftool_path() -> str:
    return shutil.which("bpftool") or "/usr/sbin/bpftool"


def bpftool(*args: str, as_json: bool = False):
    """Run bpftool; its output (parsed with as_json; else stdout and stderr, where it
    reports some successes), or BpfError with its message."""
    argv = [bpftool_path(), *(["-j"] if as_json else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise BpfError(f"{' '.join(argv)}: {(result.stderr or result.stdout).strip()}")
    if not as_json:
        return result.stdout + result.stderr
    text = result.stdout.strip()          # `cgroup show` prints a bare newline when empty
    return json.loads(text) if text else None


# -- per-node configuration (pure, unit-tested) ------------------------------------------
@dataclass
class NodeConfig:
    """What the sock_ops program does in one namespace (see stl_common.h)."""
    flags: int = 0
    hint_kbps: int = 0
    tech: int = 0
    sndbuf: int = 0
    cc: str = ""

    def pack(self) -> bytes:
        name = self.cc.encode()
        if len(name) >= 16:
            raise ValueError(f"congestion control name '{self.cc}' is longer than 15 bytes")
        return struct.pack(CFG_FORMAT, self.flags, self.hint_kbps, self.tech, self.sndbuf, name,
                           *([0] * 8))


def unpack_counters(value: bytes) -> dict[str, int]:
    """The counters of a stl_nodes value, by name."""
    fields = struct.unpack(CFG_FORMAT, value[:CFG_SIZE])
    return dict(zip(COUNTERS, fields[5:5 + len(COUNTERS)]))


def cc_name(instance: registry.Instance, kind: str) -> str:
    """The registered name of congestion control `kind` for this instance."""
    if kind not in CC_KINDS:
        raise ValueError(f"unknown congestion control kind '{kind}'")
    if len(instance.prefix) != len(CC_PLACEHOLDER):
        raise BpfError(f"instance prefix '{instance.prefix}' does not fit the placeholder '{CC_PLACEHOLDER}'")
    return f"{instance.prefix}_{kind}"


def rename_ccs(obj: bytes, prefix: str) -> bytes:
    """The object with every placeholder name rewritten to carry `prefix` (same length)."""
    for kind in CC_KINDS:
        old = f"{CC_PLACEHOLDER}_{kind}\0".encode()
        if obj.count(old) != 1:
            raise BpfError(f"{CC_OBJECT.name}: expected the name '{old[:-1].decode()}' exactly once")
        obj = obj.replace(old, f"{prefix}_{kind}\0".encode())
    return obj


def _hex(data: bytes) -> list[str]:
    return ["hex", *(f"{b:02x}" for b in data)]


# -- machine-wide objects of one instance --------------------------------------------------
def pin_dir(instance: registry.Instance) -> Path:
    return BPFFS / instance.prefix


def build() -> None:
    """Run hosts/bpf/build.sh (quick when nothing changed)."""
    result = subprocess.run([str(HERE / "build.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        raise BpfError(f"building the BPF objects failed: {result.stderr.strip()[-500:]}")


def ensure_bpffs(instance: registry.Instance) -> None:
    """Mount bpffs at /sys/fs/bpf if nothing is mounted there; record how to unmount it."""
    if bpffs_mount() is None:
        subprocess.run(["mount", "-t", "bpf", "stl-bpffs", str(BPFFS)], check=True,
                       capture_output=True)
        MOUNT_MARKER.parent.mkdir(parents=True, exist_ok=True)
        MOUNT_MARKER.touch()
    elif Path(bpffs_mount()) != BPFFS:
        raise BpfError(f"bpffs is mounted at {bpffs_mount()}, not {BPFFS}")
    # Every instance that pins records the conditional unmount: the last one out does it.
    if not any(item["what"] == "bpffs" for item in instance.undo):
        instance.add_undo(["sh", "-c", _UMOUNT_IF_OURS], "bpffs")


def loaded(instance: registry.Instance) -> bool:
    return (pin_dir(instance) / "sockops").exists()


def ensure_loaded(instance: registry.Instance) -> Path:
    """Register the congestion controls and attach the sock_ops program, once per instance."""
    pins = pin_dir(instance)
    if loaded(instance):
        return pins
    cgroup = cgroup2_mount()
    if cgroup is None:
        raise BpfError("no cgroup v2 mount: sock_ops programs cannot be attached")
    build()
    ensure_bpffs(instance)
    pins.mkdir(exist_ok=True)
    instance.add_undo(["rm", "-rf", "--one-file-system", str(pins)], f"pins {pins}")
    renamed = Path(instance.path).with_suffix(".cc.bpf.o")
    renamed.write_bytes(rename_ccs(CC_OBJECT.read_bytes(), instance.prefix))
    try:
        out = bpftool("struct_ops", "register", str(renamed))
    finally:
        renamed.unlink(missing_ok=True)
    ids = re.findall(r"Registered \S+ (\S+) id (\d+)", out)
    for map_name, ident in ids:
        instance.add_undo([bpftool_path(), "struct_ops", "unregister", "id", ident],
                          f"struct_ops {map_name} ({ident})")
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    missing = [cc_name(instance, k) for k in CC_KINDS if cc_name(instance, k) not in available]
    if len(ids) != len(CC_KINDS) or missing:
        raise BpfError(f"struct_ops registration incomplete (bpftool said: {out.strip()}; missing {missing})")
    bpftool("prog", "load", str(SOCKOPS_OBJECT), str(pins / "sockops"), "type", "sockops",
            "pinmaps", str(pins))
    bpftool("cgroup", "attach", cgroup, "sock_ops", "pinned", str(pins / "sockops"), "multi")
    instance.add_undo([bpftool_path(), "cgroup", "detach", cgroup, "sock_ops", "pinned",
                       str(pins / "sockops")], f"sock_ops {pins / 'sockops'} on {cgroup}")
    return pins


# -- per-node entries --------------------------------------------------------------------
def netns_cookie(node) -> int:
    """The netns cookie of `node`'s namespace, as bpf_get_netns_cookie() sees it."""
    code = ("import socket; s = socket.socket(); "
            f"print(int.from_bytes(s.getsockopt(socket.SOL_SOCKET, {SO_NETNS_COOKIE}, 8), 'little'))")
    out = node.cmd(f"{sys.executable} -c \"{code}\"").strip()
    if not out.isdigit():
        raise BpfError(f"{node.name}: cannot read the netns cookie: {out[-200:]}")
    return int(out)


def _key(cookie: int) -> list[str]:
    return ["key", *_hex(cookie.to_bytes(8, "little"))]


def set_node(instance: registry.Instance, node, config: NodeConfig) -> None:
    """Tell the sock_ops program what to do in `node`'s namespace (counters start at 0)."""
    pins = ensure_loaded(instance)
    bpftool("map", "update", "pinned", str(pins / "stl_nodes"), *_key(netns_cookie(node)),
            "value", *_hex(config.pack()))


def clear_node(instance: registry.Instance, node) -> None:
    """Forget `node`'s namespace; its new connections are the kernel's again."""
    pins = pin_dir(instance)
    if not loaded(instance):
        return
    try:
        bpftool("map", "delete", "pinned", str(pins / "stl_nodes"), *_key(netns_cookie(node)))
    except BpfError as exc:
        if "No such file" not in str(exc) and "not found" not in str(exc).lower():
            raise


def node_counters(instance: registry.Instance, node) -> dict[str, int] | None:
    """What the program counted in `node`'s namespace, or None if it has no entry."""
    if not loaded(instance):
        return None
    try:
        entry = bpftool("map", "lookup", "pinned", str(pin_dir(instance) / "stl_nodes"),
                        *_key(netns_cookie(node)), as_json=True)
    except BpfError:
        return None
    value = bytes(int(b, 16) for b in entry["value"])
    return unpack_counters(value)
