"""Unit tests (no root): the pure parts of the BPF loader and the Blitzstart hint."""
from __future__ import annotations

import re
import struct

import pytest

from hosts.bpf import loader
from hosts.implementations.blitzstart import Blitzstart
from wire.blitzstart import (OPTION_EXID, OPTION_KIND, TECHNOLOGIES, decode_option, encode_option, hint_kbps,
                             initial_cwnd)
from hosts.implementations.jumpstart import JumpStart
from hosts.variants import VARIANTS
from machine.registry import Instance

SOURCES = loader.HERE


def instance(prefix: str = "stl3f") -> Instance:
    return Instance(id=prefix, owner_pid=1, owner_start=None, created=0.0)


def test_hint_is_the_factor_of_the_true_rate_in_kbps():
    assert hint_kbps(50e6, 1.0) == 50_000
    assert hint_kbps(50e6, 0.5) == 25_000
    assert hint_kbps(8e6, 3.0) == 24_000
    assert hint_kbps(1e3, 0.01) == 1            # never zero: zero means "no hint"
    with pytest.raises(ValueError):
        hint_kbps(0, 1.0)


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
    cfg = loader.NodeConfig(flags=loader.CLIENT_HINT, hint_kbps=50_000, tech=2, sndbuf=0, cc="stl3f_blitz")
    packed = cfg.pack()
    assert len(packed) == loader.CFG_SIZE == 68
    assert loader.NodeConfig(flags=loader.CWND_CLAMP, cwnd_clamp=8).pack()[-4:] == (8).to_bytes(4, "little")
    assert struct.unpack("<4I", packed[:16]) == (1, 50_000, 2, 0)
    assert packed[16:32].rstrip(b"\0") == b"stl3f_blitz"
    assert loader.unpack_counters(packed) == {name: 0 for name in loader.COUNTERS}
    with pytest.raises(ValueError):
        loader.NodeConfig(cc="x" * 16).pack()


def c_defines(text: str) -> dict[str, int]:
    """`#define NAME value` lines whose value is a C integer expression of literals."""
    out = {}
    for name, value in re.findall(r"^#define (\w+) ([^/\n]+)", text, re.M):
        expr = value.strip().replace("1u", "1")
        if re.fullmatch(r"[0-9a-fA-Fx ()<]+", expr):
            out[name] = eval(expr)                      # digits, parentheses and shifts only
    return out


def test_c_header_matches_the_python_constants():
    header = (SOURCES / "stl_common.h").read_text()
    defines = c_defines(header)
    assert defines["STL_OPT_KIND"] == OPTION_KIND
    assert defines["STL_OPT_EXID"] == OPTION_EXID
    assert defines["STL_OPT_LEN"] == 10
    assert defines["STL_CLIENT_HINT"] == loader.CLIENT_HINT
    assert defines["STL_SERVER_BLITZ"] == loader.SERVER_BLITZ
    assert defines["STL_SERVER_JS"] == loader.SERVER_JS
    assert defines["STL_PACE"] == loader.PACE and defines["STL_SERVER_FS"] == loader.SERVER_FS
    assert defines["STL_CWND_CLAMP"] == loader.CWND_CLAMP
    assert defines["STL_CC_NAME_LEN"] == 16
    start = header.index("struct stl_node_cfg {")
    fields = re.findall(r"^\s*(__u32|char) (\w+)", header[start:header.index("};", start)], re.M)
    assert [f for _, f in fields][5:5 + len(loader.COUNTERS)] == list(loader.COUNTERS)
    assert len(fields) * 4 + 12 == loader.CFG_SIZE            # 17 u32 + cc[16]
    assert [f for _, f in fields][-2:] == ["fs_mark", "cwnd_clamp"]


def test_cc_names_carry_the_instance_prefix_and_fit_the_kernel_limit():
    inst = instance("stl3f")
    names = [loader.cc_name(inst, k) for k in loader.CC_KINDS]
    assert names == ["stl3f_js_reno", "stl3f_js_cubic", "stl3f_blitz", "stl3f_qs_reno", "stl3f_qs_cubic", "stl3f_fs"]
    assert all(len(n) <= 15 for n in names)
    with pytest.raises(ValueError):
        loader.cc_name(inst, "bbr")


def test_rename_rewrites_each_placeholder_once():
    obj = b"\x7fELF..stlXX_js_reno\0..stlXX_js_cubic\0..stlXX_blitz\0..stlXX_qs_reno\0..stlXX_qs_cubic\0..stlXX_fs\0"
    out = loader.rename_ccs(obj, "stl3f")
    assert len(out) == len(obj)
    assert b"stlXX" not in out and out.count(b"stl3f_") == 6
    with pytest.raises(loader.BpfError):
        loader.rename_ccs(obj.replace(b"stlXX_blitz", b"other_blitz"), "stl3f")


def test_rename_finds_the_names_in_the_built_object():
    if not loader.CC_OBJECT.exists():
        pytest.skip("BPF objects not built (hosts/bpf/build.sh)")
    out = loader.rename_ccs(loader.CC_OBJECT.read_bytes(), "stl3f")
    assert out.count(b"stl3f_js_cubic\0") == 1


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
    mark = loader.fs_mark(pdrop=True, flr=False, dscp=14, generation=7)
    assert mark >> 24 == 0x46 and (mark >> 16) & 0xff == 7 and (mark >> 8) & 0x3f == 14
    assert mark & loader.FS_PDROP and not mark & loader.FS_FLR
    with pytest.raises(ValueError):
        loader.fs_mark(True, True, 64)
    assert loader.NodeConfig(flags=loader.SERVER_FS, cc="stl3f_fs", fs_mark=mark).pack()[-8:-4] == \
        mark.to_bytes(4, "little")
