"""Loads startlab's BPF objects with bpftool and keeps their per-node settings.

Per emulation instance (one Network), created on first use and removed at teardown:
  - a scheme's congestion controls, the struct_ops of hosts/implementations/<scheme>.bpf.c
    (beside its Python module, which asks for them by kind: CongestionControls), registered
    object by object under names carrying the instance prefix ("stl3f_blitz"), so concurrent
    instances never collide (a congestion control's name is machine-wide);
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
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from machine import binaries, registry
from machine.capabilities import bpffs_mount, cgroup2_mount

HERE = Path(__file__).resolve().parent
OBJ_DIR = binaries.BPF_OBJECTS
SOCKOPS_OBJECT = OBJ_DIR / "stl_sockops.bpf.o"
BPFFS = Path("/sys/fs/bpf")
MOUNT_MARKER = registry.REGISTRY_DIR / "bpffs.mounted-by-startlab"

CC_PLACEHOLDER = "stlXX"             # the prefix STL_CC (stl_cc.h) writes in every name
_CC_PLACEHOLDER_NAME = re.compile(re.escape(CC_PLACEHOLDER.encode()) + rb"_(\w+)\0")
AVAILABLE_CCS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
QS_HOST_OBJECT = OBJ_DIR / "stl_qs_host.bpf.o"
QS_ROUTER_OBJECT = OBJ_DIR / "stl_qs_router.bpf.o"
QS_SHARED_MAPS = ("stl_qs_hosts", "stl_qs_sent", "stl_qs_recv", "stl_qs_reports")
FAULT_OBJECT = OBJ_DIR / "stl_fault.bpf.o"
FAULT_SEGMENTS = 8
FAULT_FORMAT = f"<IIQQII{FAULT_SEGMENTS}I"      # struct stl_fault (stl_fault.bpf.c)

# struct stl_node_cfg (hosts/bpf/stl_common.h): flags, hint_kbps, tech, cwnd_clamp, cc[16],
# n_accept_opts and accept_opts[ACCEPT_OPTS] (level, optname, value), then the counters
# the program writes.
ACCEPT_OPTS = 4
SOCKOPT_FORMAT = "IIi"
COUNTERS = ("syns_hinted", "hints_seen", "last_hint_kbps", "last_rtt_us", "last_cwnd", "cc_set", "errors")
CFG_FORMAT = "<4I16sI" + SOCKOPT_FORMAT * ACCEPT_OPTS + f"{len(COUNTERS)}I"
CFG_SIZE = struct.calcsize(CFG_FORMAT)
CLIENT_HINT, SERVER_BLITZ, SERVER_CC = 1 << 0, 1 << 1, 1 << 2
CLIENT_QS, SERVER_QS = 1 << 3, 1 << 4
PACE = 1 << 5
CWND_CLAMP = 1 << 6
TCP_BPF_RTO_MIN = 1004            # uapi linux/bpf.h: a socket's RTO floor in microseconds (BPF only)

# struct stl_qs_host (stl_common.h): the rate code and after_idle, then the counters.
QS_HOST_FORMAT = "<20I"
QS_HOST_COUNTERS = ("requests_sent", "echoes", "approved", "rejected", "ttl_mismatch", "nonce_mismatch",
                    "no_echo", "last_rate_code", "last_rtt_us", "last_cwnd", "requests_seen",
                    "echoes_sent", "errors", "restart_requests", "restart_approved", "reports_sent",
                    "reports_zero", "reports_gso")
# struct stl_qs_router: lock, method, capacity, interval, N, approval intervals, thresh, w,
# approval interval, extreme, pad; then the state (epoch, 8 slots, approval epoch, 8 slots,
# ewma, 64 + 64 promise buckets) and the counters.
QS_ROUTER_BUCKETS = 64
QS_ROUTER_CONFIG_FORMAT = "<IIQQIIIIQII"
QS_ROUTER_STATE_WORDS = 1 + 8 + 1 + 8 + 1 + 2 * QS_ROUTER_BUCKETS
QS_ROUTER_COUNTERS = ("requests", "approved", "reduced", "rejected", "granted_bps", "last_util_bps",
                      "reports", "reports_lower", "reports_untracked", "returned_bps", "tracked",
                      "tracked_used", "phase_bytes", "last_promised_bps", "fin_returned_bps", "sum_util_bps",
                      "sum_promised_bps")
QS_ROUTER_FORMAT = QS_ROUTER_CONFIG_FORMAT + "Q" * (QS_ROUTER_STATE_WORDS + len(QS_ROUTER_COUNTERS))
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
@dataclass(frozen=True)
class SockOpt:
    """A socket option the sock_ops program sets on a node's accepted sockets (an int)."""
    level: int
    optname: int
    value: int


@dataclass
class NodeConfig:
    """What the sock_ops program does in one namespace (see stl_common.h).

    With SERVER_CC, accepted sockets get `accept_opts` in order, then the congestion
    control `cc`: a scheme that needs no more than that needs no code in the program."""
    flags: int = 0
    hint_kbps: int = 0
    tech: int = 0
    cwnd_clamp: int = 0
    cc: str = ""
    accept_opts: tuple[SockOpt, ...] = ()

    def pack(self) -> bytes:
        name = self.cc.encode()
        if len(name) >= 16:
            raise ValueError(f"congestion control name '{self.cc}' is longer than 15 bytes")
        if len(self.accept_opts) > ACCEPT_OPTS:
            raise ValueError(f"{len(self.accept_opts)} socket options for accepted sockets, at most {ACCEPT_OPTS}")
        opts = [*self.accept_opts, *[SockOpt(0, 0, 0)] * (ACCEPT_OPTS - len(self.accept_opts))]
        return struct.pack(CFG_FORMAT, self.flags, self.hint_kbps, self.tech, self.cwnd_clamp, name,
                           len(self.accept_opts), *(f for o in opts for f in (o.level, o.optname, o.value)),
                           *([0] * len(COUNTERS)))


def unpack_counters(value: bytes) -> dict[str, int]:
    """The counters of a stl_nodes value, by name."""
    fields = struct.unpack(CFG_FORMAT, value[:CFG_SIZE])
    return dict(zip(COUNTERS, fields[-len(COUNTERS):]))


# -- congestion controls (naming pure, unit-tested) ---------------------------------------
def cc_name(instance: registry.Instance, kind: str) -> str:
    """The registered name of congestion control `kind` for this instance."""
    if len(instance.prefix) != len(CC_PLACEHOLDER):
        raise BpfError(f"instance prefix '{instance.prefix}' does not fit the placeholder '{CC_PLACEHOLDER}'")
    return f"{instance.prefix}_{kind}"


def cc_kinds(obj: bytes) -> list[str]:
    """The kinds of congestion control an object declares: its placeholder names (STL_CC)."""
    return [m.decode() for m in _CC_PLACEHOLDER_NAME.findall(obj)]


def rename_ccs(obj: bytes, prefix: str) -> bytes:
    """The object with every placeholder name rewritten to carry `prefix` (same length)."""
    kinds = cc_kinds(obj)
    if not kinds:
        raise BpfError(f"no congestion control named '{CC_PLACEHOLDER}_<kind>' in the object")
    for kind in kinds:
        old = f"{CC_PLACEHOLDER}_{kind}\0".encode()
        if obj.count(old) != 1:
            raise BpfError(f"expected the name '{old[:-1].decode()}' exactly once in the object")
        obj = obj.replace(old, f"{prefix}_{kind}\0".encode())
    return obj


def available_ccs() -> list[str]:
    """The congestion controls the kernel knows: a registered struct_ops is listed by name."""
    return AVAILABLE_CCS.read_text().split()


@dataclass(frozen=True)
class CongestionControls:
    """One scheme's congestion controls: the struct_ops of hosts/implementations/<scheme>.bpf.c,
    built to target/bpf/<scheme>.bpf.o and registered for an instance when first asked for.
    The kinds are what the object declares, so nothing lists them a second time."""
    scheme: str

    @property
    def object(self) -> Path:
        return OBJ_DIR / f"{self.scheme}.bpf.o"

    def name(self, instance: registry.Instance, kind: str) -> str:
        """The instance's name of congestion control `kind` of this object, registering the
        object first if this instance has not yet (all of its kinds at once)."""
        name = cc_name(instance, kind)
        registered = name in available_ccs()
        if not registered:
            build()
        kinds = cc_kinds(self.object.read_bytes())
        if kind not in kinds:
            raise ValueError(f"{self.object.name} declares no congestion control '{kind}' "
                             f"(it has: {', '.join(kinds)})")
        if not registered:
            register_ccs(instance, self.object)
        return name

    def map_id(self, instance: registry.Instance, map_name: str) -> int:
        """The id of map `map_name` of this object as registered for `instance` (registered
        objects pin nothing: the map is found through the instance's struct_ops and its
        programs)."""
        kinds = cc_kinds(self.object.read_bytes())
        self.name(instance, kinds[0])
        names = {cc_name(instance, k) for k in kinds}
        dump = subprocess.run([bpftool_path(), "struct_ops", "dump", "name", f"stl_{kinds[0]}"],
                              capture_output=True, text=True).stdout
        for chunk in dump.split('"bpf_struct_ops_tcp_congestion_ops"'):
            found = re.search(r'"name": "([^"]+)"', chunk)
            if not found or found.group(1) not in names:
                continue
            for prog in re.findall(r"prog_id:(\d+)", chunk):
                for ident in bpftool("prog", "show", "id", prog, as_json=True).get("map_ids", []):
                    if bpftool("map", "show", "id", str(ident), as_json=True).get("name") == map_name:
                        return ident
        raise BpfError(f"{self.object.name}: no map {map_name} registered for instance {instance.prefix}")

    def update_map(self, instance: registry.Instance, map_name: str, key: bytes, value: bytes) -> None:
        bpftool("map", "update", "id", str(self.map_id(instance, map_name)), "key", *_hex(key),
                "value", *_hex(value))

    def dump_map(self, instance: registry.Instance, map_name: str) -> list[tuple[bytes, bytes]]:
        """Every (key, value) of the map."""
        rows = bpftool("map", "dump", "id", str(self.map_id(instance, map_name)), as_json=True) or []
        return [(bytes(int(b, 16) for b in r["key"]), bytes(int(b, 16) for b in r["value"])) for r in rows]


def congestion_controls(module_file: str) -> CongestionControls:
    """The congestion controls of the scheme whose Python module is `module_file`
    (its __file__): the BPF source of the same name beside it."""
    return CongestionControls(Path(module_file).name.removesuffix(".py"))


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


def register_ccs(instance: registry.Instance, obj: Path) -> None:
    """Register the congestion controls of `obj` under the instance's names; each struct_ops
    is recorded for removal as soon as it exists."""
    original = obj.read_bytes()
    kinds = cc_kinds(original)
    renamed = Path(instance.path).with_suffix(f".{obj.name}")
    renamed.write_bytes(rename_ccs(original, instance.prefix))
    try:
        out = bpftool("struct_ops", "register", str(renamed))
    finally:
        renamed.unlink(missing_ok=True)
    ids = re.findall(r"Registered \S+ (\S+) id (\d+)", out)
    for map_name, ident in ids:
        instance.add_undo([bpftool_path(), "struct_ops", "unregister", "id", ident],
                          f"struct_ops {map_name} ({ident})")
    available = available_ccs()
    missing = [cc_name(instance, k) for k in kinds if cc_name(instance, k) not in available]
    if len(ids) != len(kinds) or missing:
        raise BpfError(f"struct_ops registration of {obj.name} incomplete (bpftool said: {out.strip()}; "
                       f"missing {missing})")


def ensure_loaded(instance: registry.Instance) -> Path:
    """Attach the sock_ops program, once per instance."""
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


# -- Quick-Start (hosts/bpf/stl_qs_host.bpf.c, stl_qs_router.bpf.c) ----------------------
def _ip_key(ip: str) -> list[str]:
    return ["key", *_hex(bytes(int(x) for x in ip.split(".")))]


def qs_set_host(instance: registry.Instance, ip: str, rate_code: int, after_idle: bool = False) -> None:
    """Make `ip` a Quick-Start host (rate_code > 0: a server requesting it, after_idle: again
    after each restart after idle); counters at 0."""
    write_qs_host(ensure_loaded(instance), ip, rate_code, after_idle)


def write_qs_host(pins: Path, ip: str, rate_code: int, after_idle: bool = False) -> None:
    """qs_set_host's map update on the host object's maps pinned under `pins` (a test loads
    the object into a bpffs of its own)."""
    value = struct.pack(QS_HOST_FORMAT, rate_code, int(after_idle), *([0] * len(QS_HOST_COUNTERS)))
    bpftool("map", "update", "pinned", str(pins / "stl_qs_hosts"), *_ip_key(ip), "value", *_hex(value))


def qs_clear_host(instance: registry.Instance, ip: str) -> None:
    if not loaded(instance):
        return
    try:
        bpftool("map", "delete", "pinned", str(pin_dir(instance) / "stl_qs_hosts"), *_ip_key(ip))
    except BpfError as exc:
        if "No such file" not in str(exc) and "not found" not in str(exc).lower():
            raise


def qs_host_counters(instance: registry.Instance, ip: str) -> dict[str, int] | None:
    if not loaded(instance):
        return None
    try:
        entry = bpftool("map", "lookup", "pinned", str(pin_dir(instance) / "stl_qs_hosts"), *_ip_key(ip),
                        as_json=True)
    except BpfError:
        return None
    fields = struct.unpack(QS_HOST_FORMAT, bytes(int(b, 16) for b in entry["value"]))
    return {"rate_code": fields[0], "after_idle": fields[1], **dict(zip(QS_HOST_COUNTERS, fields[2:]))}


def _qs_host_programs(instance: registry.Instance) -> Path:
    """The endpoints' tc programs, loaded once per instance and sharing the sock_ops maps."""
    pins = ensure_loaded(instance)
    progs = pins / "qs_host"
    if not progs.exists():
        reuse = [arg for name in QS_SHARED_MAPS for arg in ("map", "name", name, "pinned", str(pins / name))]
        bpftool("prog", "loadall", str(QS_HOST_OBJECT), str(progs), "type", "classifier", *reuse)
    return progs


def _tc(node, *args: str) -> subprocess.CompletedProcess:
    """tc in `node`'s network namespace but the machine's mount namespace, where bpffs and
    the pins are (Mininet hosts have mount namespaces of their own)."""
    return subprocess.run(["nsenter", f"--net=/proc/{node.pid}/ns/net", "tc", *args],
                          capture_output=True, text=True)


def tc_attach(node, intf: str, direction: str, program: Path) -> None:
    """Attach a pinned classifier to `intf` in `node`'s namespace (clsact, direct action).

    The filter lives and dies with the namespace; tc_detach removes it earlier."""
    _tc(node, "qdisc", "add", "dev", intf, "clsact")          # exists already: fine
    result = _tc(node, "filter", "add", "dev", intf, direction, "bpf", "da", "pinned", str(program))
    if result.returncode != 0:
        raise BpfError(f"{node.name}: attaching {program.name} to {intf} {direction} failed: "
                       f"{(result.stderr or result.stdout).strip()[-300:]}")


def tc_detach(node, intf: str) -> None:
    _tc(node, "qdisc", "del", "dev", intf, "clsact")


def qs_host_program(instance: registry.Instance, role: str) -> Path:
    """The pinned program of a server ('stl_qs_sender') or a client ('stl_qs_receiver')."""
    return _qs_host_programs(instance) / ("stl_qs_sender" if role == "server" else "stl_qs_receiver")


@dataclass
class QsRouterConfig:
    """The Target algorithm's parameters for one egress interface."""
    capacity_bps: int
    interval_ms: float = 150.0
    n_intervals: int = 5
    approval_intervals: int = 2
    qs_thresh: float = 0.9
    method: str = "peak"          # or "ewma"
    ewma_weight: float = 0.5
    approval_interval_ms: float = 0.0   # 0: interval_ms
    extreme: bool = False

    def pack(self) -> bytes:
        if not 1 <= self.n_intervals <= 7 or not 1 <= self.approval_intervals <= 8:
            raise ValueError("n_intervals must be 1..7 and approval_intervals 1..8")
        approval_ms = self.approval_interval_ms or self.interval_ms
        words = QS_ROUTER_STATE_WORDS + len(QS_ROUTER_COUNTERS)
        return struct.pack(QS_ROUTER_FORMAT, 0, 1 if self.method == "ewma" else 0, int(self.capacity_bps),
                           int(self.interval_ms * 1e6), self.n_intervals, self.approval_intervals,
                           round(self.qs_thresh * 1000), round(self.ewma_weight * 1000), int(approval_ms * 1e6),
                           int(self.extreme), 0, *([0] * words))


def qs_router_dir(instance: registry.Instance, node, intf: str) -> Path:
    return pin_dir(instance) / f"qsr_{intf}"


def qs_router_install(instance: registry.Instance, node, intf: str, config: QsRouterConfig) -> None:
    """Load a router program of its own for `intf`, configure it and attach it to egress."""
    where = qs_router_dir(instance, node, intf)
    ensure_loaded(instance)
    if not where.exists():
        where.mkdir()
        bpftool("prog", "loadall", str(QS_ROUTER_OBJECT), str(where), "type", "classifier",
                "pinmaps", str(where))
    bpftool("map", "update", "pinned", str(where / "stl_qs_rtr"), "key", *_hex(bytes(4)),
            "value", *_hex(config.pack()))
    tc_attach(node, intf, "egress", where / "stl_qs_router")
    if config.extreme:                  # each flow's handshake RTT, from the clients' side
        tc_attach(node, intf, "ingress", where / "stl_qs_router_rtt")


def qs_router_remove(instance: registry.Instance, node, intf: str) -> None:
    tc_detach(node, intf)
    where = qs_router_dir(instance, node, intf)
    if where.exists():
        shutil.rmtree(where, ignore_errors=True)


def qs_router_counters(instance: registry.Instance, node, intf: str) -> dict[str, int] | None:
    where = qs_router_dir(instance, node, intf)
    if not where.exists():
        return None
    entry = bpftool("map", "lookup", "pinned", str(where / "stl_qs_rtr"), "key", *_hex(bytes(4)), as_json=True)
    fields = struct.unpack(QS_ROUTER_FORMAT, bytes(int(b, 16) for b in entry["value"]))
    return dict(zip(QS_ROUTER_COUNTERS, fields[-len(QS_ROUTER_COUNTERS):]))


def _fault_dir(instance: registry.Instance, intf: str) -> Path:
    return pin_dir(instance) / f"fault_{intf}"


def _fault(instance: registry.Instance, node, intf: str, dscp: int | None, offsets: list[int]) -> None:
    where = _fault_dir(instance, intf)
    ensure_loaded(instance)
    if len(offsets) > FAULT_SEGMENTS:
        raise BpfError(f"at most {FAULT_SEGMENTS} segments can be dropped, not {len(offsets)}")
    fresh = not where.exists()
    if fresh:
        where.mkdir()
        bpftool("prog", "loadall", str(FAULT_OBJECT), str(where), "type", "classifier", "pinmaps", str(where))
    padded = list(offsets) + [0] * (FAULT_SEGMENTS - len(offsets))
    bpftool("map", "update", "pinned", str(where / "stl_fault_cfg"), "key", *_hex(bytes(4)),
            "value", *_hex(struct.pack(FAULT_FORMAT, 0 if dscp is None else dscp + 1, len(offsets), 0, 0, 0, 0,
                                       *padded)))
    if fresh:
        tc_attach(node, intf, "egress", where / "stl_fault_drop")


def fault_drop_dscp(instance: registry.Instance, node, intf: str, dscp: int) -> None:
    """From now on drop every IPv4 packet with DSCP `dscp` leaving `intf` (stl_fault.bpf.c).

    The worst case of a drop-priority router, for forcing a fallback deterministically."""
    _fault(instance, node, intf, dscp, [])


def fault_drop_segments(instance: registry.Instance, node, intf: str, offsets: list[int]) -> None:
    """Drop the first transmission of the TCP data segments that start at these byte
    offsets of a connection's data (after the latest SYN leaving `intf`); their
    retransmissions pass. For the loss pattern a loss recovery is tested on."""
    _fault(instance, node, intf, None, offsets)


def fault_counts(instance: registry.Instance, intf: str) -> dict[str, int]:
    """What the fault program on `intf` dropped and passed so far."""
    entry = bpftool("map", "lookup", "pinned", str(_fault_dir(instance, intf) / "stl_fault_cfg"),
                    "key", *_hex(bytes(4)), as_json=True)
    fields = struct.unpack(FAULT_FORMAT, bytes(int(b, 16) for b in entry["value"]))
    return {"dropped": fields[2], "passed": fields[3]}


# -- can this kernel load them? ------------------------------------------------------------
_probed: dict[tuple[str, float], str | None] = {}


def _load_error(text: str) -> str:
    """The telling line of a failed load: the verifier's last words before the end of its
    log, or libbpf's error, or bpftool's."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "-- END PROG LOAD LOG --" in text:
        body = text.split("-- BEGIN PROG LOAD LOG --")[-1].split("-- END PROG LOAD LOG --")[0]
        log = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith(("processed", ";"))]
        if log:
            return "the verifier: " + log[-1][:240]
    generic = ("failed to load object", "failed to open object")
    said = [ln for ln in lines if ln.startswith("libbpf:") and not any(g in ln for g in generic)]
    said = said or [ln for ln in lines if ln.startswith("Error")] or lines[-1:] or ["no message"]
    return said[-1][:300]


def _probe_object(obj: Path) -> str | None:
    """Load one object into this kernel and take it out again: None if it loads, else why
    not. Congestion controls are registered as a run would (struct_ops), other programs
    loaded and pinned in a directory of a throwaway instance."""
    if not obj.is_file():
        return f"{obj} is not built"
    inst = registry.new_instance()
    try:
        if cc_kinds(obj.read_bytes()):
            register_ccs(inst, obj)
        else:
            ensure_bpffs(inst)
            pins = pin_dir(inst)
            pins.mkdir(exist_ok=True)
            inst.add_undo(["rm", "-rf", "--one-file-system", str(pins)], f"pins {pins}")
            bpftool("prog", "loadall", str(obj), str(pins / "probe"))
        return None
    except BpfError as exc:
        return f"{obj.name} does not load on kernel {os.uname().release}: {_load_error(str(exc))}"
    finally:
        inst.remove_all()


def unloadable(objects: list[Path]) -> str | None:
    """Why this kernel cannot load every one of `objects` (None: it loads them all),
    probed once per object and build in this process."""
    if not objects:
        return None
    try:
        build()
    except BpfError as exc:
        return str(exc)
    for obj in objects:
        key = (str(obj), obj.stat().st_mtime if obj.is_file() else 0.0)
        if key not in _probed:
            _probed[key] = _probe_object(obj)
        if _probed[key]:
            return _probed[key]
    return None
