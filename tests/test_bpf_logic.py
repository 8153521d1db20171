"""Unit tests (no root): the pure parts of the BPF loader and the Blitzstart hint."""
from __future__ import annotations

import re
import socket
import struct
from pathlib import Path

import pytest

from hosts.bpf import loader
from hosts.implementations import faststart
from hosts.implementations.blitzstart import Blitzstart
from wire.blitzstart import (OPTION_EXID, OPTION_KIND, TECHNOLOGIES, decode_option, encode_option, hint_kbps,
                             initial_cwnd)
from hosts.implementations.jumpstart import JumpStart
from hosts.variants import IMPLEMENTATIONS, VARIANTS
from machine.registry import Instance

SOURCES = loader.HERE
SCHEMES = SOURCES.parent / "implementations"
SCHEME_SOURCES = sorted(SCHEMES.glob("*.bpf.c"))


def instance(prefix: str = "stl3f") -> Instance:
    return Instance(id=prefix, owner_pid=1, owner_start=None, created=0.0)


def test_hint_is_the_factor_of_the_true_rate_in_kbps():
    assert hint_kbps(50e6, 1.0) == 50_000
    assert hint_kbps(50e6, 0.5) == 25_000
    assert hint_kbps(8e6, 3.0) == 24_000
    assert hint_kbps(1e3, 0.01) == 1            # never zero: zero means "no hint"
    with pytest.raises(ValueError):
        hint_kbps(0, 1.0)


def test_the_hints_basis_on_a_trace_link_is_its_mean_its_10th_percentile_or_what_it_offers_next():
    """On a trace link `basis` picks the rate the factor multiplies; at a fixed rate all are it."""
    from hosts.implementations.base import InstallContext
    from links import traces
    # 100 ms at 24 Mbit/s (2 opportunities of 1500 B per ms), then 100 ms of nothing
    t = traces.parse("".join(f"{ms}\n{ms}\n" for ms in range(1, 101)) + "200\n")
    clock = traces.TraceClock(t, epoch_s=1000.0, packet_bytes=1500)
    ctx = InstallContext(rate_bps=t.mean_bps(), rtt_s=0.02, trace_clock=clock)
    params = Blitzstart().resolve({"basis": "rate"})
    assert Blitzstart._basis_bps(params, ctx, 1000.0) == ctx.rate_bps
    # 10th percentile over 20 ms windows: two fifths of them fall in the silence
    assert Blitzstart._basis_bps({**params, "basis": "p10"}, ctx, 1000.0) == 0.0
    # The oracle reads the RTT after the handshake: [t + 20 ms, t + 40 ms)
    assert Blitzstart._basis_bps({**params, "basis": "oracle"}, ctx, 1000.010) == pytest.approx(24e6)
    assert Blitzstart._basis_bps({**params, "basis": "oracle"}, ctx, 1000.120) == 0.0
    assert Blitzstart._basis_bps({**params, "basis": "oracle"}, ctx, 1000.190) == pytest.approx(24e6)  # next loop
    fixed = InstallContext(rate_bps=50e6, rtt_s=0.05)
    for basis in ("rate", "p10", "oracle"):
        assert Blitzstart._basis_bps({**params, "basis": basis}, fixed, 0.0) == 50e6
    assert Blitzstart._client_config({**params, "factor": 2.0}, ctx, 0.0).hint_kbps == 2   # an outage still hints
    with pytest.raises(ValueError):
        Blitzstart().resolve({"basis": "median"})


def test_option_round_trip_and_layout():
    opt = encode_option(50_000, TECHNOLOGIES["dsl"])
    assert len(opt) == 10 and opt[0] == OPTION_KIND and opt[1] == 10
    assert struct.unpack("!H", opt[2:4])[0] == OPTION_EXID
    # Linux SYN options around it: MSS, SACK-permitted + timestamps, NOP + window scale.
    syn = b"\x02\x04\x05\xb4" + b"\x04\x02\x08\x0a" + bytes(8) + b"\x01\x03\x03\x07" + opt + b"\x01\x01"
    assert decode_option(syn) == (50_000, TECHNOLOGIES["dsl"])


@pytest.mark.parametrize("options", [
    b"",
    b"\x02\x04\x05\xb4\x01\x01",                                     # no option 253
    bytes([253, 10, 0x12, 0x34]) + bytes(6),                          # another experiment's ExID
    bytes([253, 6, 0x53, 0x54, 0, 0]),                                # our ExID, wrong length
    b"\x00" + encode_option(1000, 0),                                 # after end-of-list
    encode_option(1000, 0)[:7],                                       # truncated
    b"\x02\x00\x05\xb4" + encode_option(1000, 0),                     # a zero length before it
])
def test_option_not_decoded_when_absent_or_malformed(options):
    assert decode_option(options) is None


def test_initial_cwnd_is_the_hinted_bdp_in_segments():
    # 50 Mbit/s x 50 ms = 312,500 bytes = 215.8 -> 216 segments of 1448 bytes.
    assert initial_cwnd(50_000, 50_000, 1448) == 216
    assert initial_cwnd(1, 1, 1448) == 2                     # floor of two segments
    assert initial_cwnd(10 ** 9, 10 ** 6, 1448) == 65535     # clamped


def test_node_config_packs_the_c_layout():
    cfg = loader.NodeConfig(flags=loader.CLIENT_HINT, hint_kbps=50_000, tech=2, cc="stl3f_blitz")
    packed = cfg.pack()
    assert len(packed) == loader.CFG_SIZE == 112
    assert loader.NodeConfig(flags=loader.CWND_CLAMP, cwnd_clamp=8).pack()[12:16] == (8).to_bytes(4, "little")
    assert struct.unpack("<4I", packed[:16]) == (1, 50_000, 2, 0)
    assert packed[16:32].rstrip(b"\0") == b"stl3f_blitz"
    assert packed[32:84] == bytes(52)                        # no socket options
    assert loader.unpack_counters(packed) == {name: 0 for name in loader.COUNTERS}
    with pytest.raises(ValueError):
        loader.NodeConfig(cc="x" * 16).pack()


def test_accepted_sockets_options_are_a_table_in_order():
    opts = (loader.SockOpt(socket.SOL_SOCKET, socket.SO_MARK, 0x46070e01),
            loader.SockOpt(socket.IPPROTO_TCP, loader.TCP_BPF_RTO_MIN, 10_000))
    packed = loader.NodeConfig(flags=loader.SERVER_CC, cc="stl3f_fs", accept_opts=opts).pack()
    assert struct.unpack("<I6I", packed[32:60]) == (2, 1, 36, 0x46070e01, 6, 1004, 10_000)
    assert packed[60:84] == bytes(24)
    counters = bytearray(packed)
    counters[-8:-4] = (3).to_bytes(4, "little")
    assert loader.unpack_counters(bytes(counters))["cc_set"] == 3
    with pytest.raises(ValueError):
        loader.NodeConfig(accept_opts=opts * 3).pack()


def c_defines(text: str) -> dict[str, int]:
    """`#define NAME value` lines whose value is a C integer expression of literals."""
    out = {}
    for name, value in re.findall(r"^#define (\w+) ([^/\n]+)", text, re.M):
        expr = re.sub(r"(?<=[0-9a-fA-F])u\b", "", value.strip())      # unsigned suffixes
        if re.fullmatch(r"[0-9a-fA-Fx ()<]+", expr):
            out[name] = eval(expr)                      # digits, parentheses and shifts only
    return out


def c_struct_fields(text: str, name: str) -> list[tuple[str, str]]:
    """(type, field) of `struct name`'s members, in order."""
    start = text.index(f"struct {name} {{")
    body = text[start:text.index("};", start)]
    return re.findall(r"^\s*((?:struct )?\w+) (\w+)(?:\[\w+\])?;", body, re.M)


def test_c_header_matches_the_python_constants():
    header = (SOURCES / "stl_common.h").read_text()
    defines = c_defines(header)
    assert defines["STL_OPT_KIND"] == OPTION_KIND
    assert defines["STL_OPT_EXID"] == OPTION_EXID
    assert defines["STL_OPT_LEN"] == 10
    assert defines["STL_CLIENT_HINT"] == loader.CLIENT_HINT
    assert defines["STL_SERVER_BLITZ"] == loader.SERVER_BLITZ
    assert defines["STL_SERVER_CC"] == loader.SERVER_CC
    assert defines["STL_PACE"] == loader.PACE
    assert defines["STL_CWND_CLAMP"] == loader.CWND_CLAMP
    assert defines["STL_CC_NAME_LEN"] == 16
    assert defines["STL_ACCEPT_OPTS"] == loader.ACCEPT_OPTS
    assert c_struct_fields(header, "stl_sockopt") == [("__u32", "level"), ("__u32", "optname"), ("__s32", "value")]
    fields = c_struct_fields(header, "stl_node_cfg")
    assert [f for _, f in fields] == ["flags", "hint_kbps", "tech", "cwnd_clamp", "cc", "n_accept_opts",
                                      "accept_opts", *loader.COUNTERS]
    sizes = {"__u32": 4, "char": defines["STL_CC_NAME_LEN"], "struct stl_sockopt": 12 * loader.ACCEPT_OPTS}
    assert sum(sizes[t] for t, _ in fields) == loader.CFG_SIZE


def test_cc_names_carry_the_instance_prefix():
    assert loader.cc_name(instance("stl3f"), "blitz") == "stl3f_blitz"
    with pytest.raises(loader.BpfError):
        loader.cc_name(instance("stl3f0"), "blitz")
    assert f'#define STL_CC_PLACEHOLDER "{loader.CC_PLACEHOLDER}"' in (SOURCES / "stl_cc.h").read_text()


def test_rename_rewrites_each_placeholder_once():
    obj = b"\x7fELF..stlXX_js_reno\0..stlXX_js_cubic\0..xstlXX_fs\0.."
    assert loader.cc_kinds(obj) == ["js_reno", "js_cubic", "fs"]
    out = loader.rename_ccs(obj, "stl3f")
    assert len(out) == len(obj)
    assert b"stlXX" not in out and out.count(b"stl3f_") == 3
    with pytest.raises(loader.BpfError):
        loader.rename_ccs(obj + b"stlXX_fs\0", "stl3f")
    with pytest.raises(loader.BpfError):
        loader.rename_ccs(b"\x7fELF..", "stl3f")


def test_a_schemes_congestion_controls_are_found_by_its_module_name():
    ccs = loader.congestion_controls(str(SCHEMES / "jumpstart.py"))
    assert ccs.object == loader.OBJ_DIR / "jumpstart.bpf.o"


def test_a_scheme_registers_its_object_once_and_names_only_its_own_kinds(tmp_path, monkeypatch):
    (tmp_path / "demo.bpf.o").write_bytes(b"\x7fELF..stlXX_demo_a\0..stlXX_demo_b\0")
    registered: list[Path] = []
    monkeypatch.setattr(loader, "OBJ_DIR", tmp_path)
    monkeypatch.setattr(loader, "build", lambda: None)
    monkeypatch.setattr(loader, "register_ccs", lambda inst, obj: registered.append(obj))
    monkeypatch.setattr(loader, "available_ccs", lambda: ["cubic", "stl3f_blitz"] + [
        f"stl3f_{k}" for obj in registered for k in loader.cc_kinds(obj.read_bytes())])
    ccs = loader.CongestionControls("demo")
    assert ccs.name(instance(), "demo_a") == "stl3f_demo_a"
    assert ccs.name(instance(), "demo_b") == "stl3f_demo_b"
    assert registered == [tmp_path / "demo.bpf.o"]            # all of its kinds at once
    with pytest.raises(ValueError, match="no congestion control 'blitz'"):
        ccs.name(instance(), "blitz")                          # registered, but another scheme's


def test_every_bpf_scheme_source_sits_beside_its_implementation():
    assert SCHEME_SOURCES
    modules = {impl.__class__.__module__.rsplit(".", 1)[1] for impl in IMPLEMENTATIONS.values()}
    for src in SCHEME_SOURCES:
        # A source that builds another scheme's (faststart_gbn: faststart with a rule more)
        # belongs to that scheme's module.
        built_from = re.findall(r'^#include "(\w+)\.bpf\.c"', src.read_text(), re.M)
        owner = built_from[0] if built_from else src.name.removesuffix(".bpf.c")
        assert owner in modules, f"{src.name} has no implementation module beside it"
        assert not (SOURCES / src.name).exists(), f"{src.name} also in {SOURCES}: the objects would collide"


def built_scheme_objects() -> list[Path]:
    objects = [loader.OBJ_DIR / src.name.replace(".bpf.c", ".bpf.o") for src in SCHEME_SOURCES]
    if not all(o.exists() for o in objects):
        pytest.skip("BPF objects not built (hosts/bpf/build.sh)")
    return objects


def test_built_objects_declare_distinct_kinds_that_fit_the_kernel_limit():
    kinds = [kind for obj in built_scheme_objects() for kind in loader.cc_kinds(obj.read_bytes())]
    assert {"js_reno", "js_cubic", "blitz", "qs_reno", "qs_cubic", "fs"} <= set(kinds)
    assert len(kinds) == len(set(kinds)), "two objects declare the same congestion control"
    assert all(len(loader.cc_name(instance("stl3f"), k)) <= 15 for k in kinds)


def test_rename_finds_the_names_in_the_built_objects():
    for obj in built_scheme_objects():
        data = obj.read_bytes()
        out = loader.rename_ccs(data, "stl3f")
        assert all(out.count(f"stl3f_{k}\0".encode()) == 1 for k in loader.cc_kinds(data)), obj.name


def test_variants_of_the_paper_table_and_jump_start_are_catalogued():
    for factor in ("0.5", "1.0", "1.5", "3.0", "4.0"):
        v = VARIANTS[f"blitz-{factor}x"]
        assert v.parts["client"].params["factor"] == float(factor)
        assert isinstance(v.parts["server"].impl, Blitzstart)
    js = VARIANTS["jumpstart"]
    assert isinstance(js.parts["server"].impl, JumpStart) and js.parts["server"].params["base_cc"] == "cubic"
    # the receiver must not cap D at the ~64 KB default window
    assert js.parts["client"].params["irw"] * 1448 > 290_000


def test_fast_start_settings_travel_in_the_socket_mark():
    mark = faststart.fs_mark(pdrop=True, flr=False, dscp=14, generation=7)
    assert mark >> 24 == 0x46 and (mark >> 16) & 0xff == 7 and (mark >> 8) & 0x3f == 14
    assert mark & faststart.FS_PDROP and not mark & faststart.FS_FLR
    with pytest.raises(ValueError):
        faststart.fs_mark(True, True, 64)
    # the mark first (the congestion control's init reads it); the RTO floor only with quick recovery
    assert faststart.accept_opts(mark) == (loader.SockOpt(socket.SOL_SOCKET, socket.SO_MARK, mark),)
    flr = faststart.fs_mark(pdrop=False, flr=True, dscp=14)
    assert [o.optname for o in faststart.accept_opts(flr)] == [socket.SO_MARK, loader.TCP_BPF_RTO_MIN]
    defines = c_defines((SCHEMES / "faststart.bpf.c").read_text())
    assert (defines["STL_FS_MARK_TAG"], defines["STL_FS_PDROP"], defines["STL_FS_FLR"]) == \
        (faststart.FS_MARK_TAG, faststart.FS_PDROP, faststart.FS_FLR)
