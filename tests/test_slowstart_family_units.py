"""The slow-start schemes of stl_sslog.h on the Python side: the layouts they share with
their BPF sources (mark tags, event codes, the log, the settings) and the decoding of a
connection's log."""
from __future__ import annotations

import re
import socket
import struct
from pathlib import Path

import pytest

from hosts.implementations import per_install
from hosts.implementations.rapidstart import IMPLEMENTATION as RAPID
from hosts.implementations.search import IMPLEMENTATION as SEARCH
from hosts.implementations.suss import IMPLEMENTATION as SUSS

HERE = Path(__file__).resolve().parent.parent / "hosts"
HEADER = (HERE / "bpf" / "stl_sslog.h").read_text()
SCHEMES = {RAPID: ("rapidstart.bpf.c", "STL_RS_MARK_TAG", "rs_event", "rs_config"),
           SEARCH: ("search.bpf.c", "STL_SEARCH_MARK_TAG", "search_event", "search_config"),
           SUSS: ("suss.bpf.c", "STL_SUSS_MARK_TAG", "suss_event", "suss_config")}


def test_the_log_layout_matches_the_header():
    assert f"#define STL_SS_EVENTS {per_install.SS_EVENTS}" in HEADER
    fields = re.search(r"struct stl_ss_event \{([^}]*)\}", HEADER).group(1)
    assert [f.split()[0] for f in fields.strip().splitlines() if f.strip()] == ["u64", "u32", "u32", "u32", "u32", "u32"]
    assert struct.calcsize(per_install.SS_EVENT_FORMAT) == 8 + 4 * 4 + 4 * 4


@pytest.mark.parametrize("scheme", list(SCHEMES), ids=lambda s: s.name)
def test_each_scheme_names_its_tag_events_and_settings_as_its_source(scheme):
    source_name, tag, enum, config = SCHEMES[scheme]
    source = (HERE / "implementations" / source_name).read_text()
    assert f"#define {tag} {scheme.tag:#010x}u" in source
    assert f'STL_CC({scheme.kind}, STL_CUBIC' in source
    codes = re.search(rf"enum {enum} \{{([^}}]*)\}}", source).group(1).split(",")
    assert len(codes) == len(scheme.log_events) and "= 1" in codes[0]
    members = re.search(rf"struct {config} \{{([^}}]*)\}}", source).group(1)
    words = sum(int(n) if n else 1 for n in re.findall(r"u32 \w+(?:\[(\d+)\])?;", members))
    assert words * 4 == len(scheme.config_value(scheme.resolve({}))) == 32


def test_rapid_start_packs_k_beta_and_the_threshold():
    packed = struct.unpack("<8I", RAPID.config_value(RAPID.resolve({"beta": 0.5, "thresh_add_ms": 2.5})))
    assert packed == (2, 3, 500, 2500, 110, 3, 0, 0)
    with pytest.raises(ValueError, match="above 1"):
        RAPID.resolve({"k_num": 4, "k_den": 3})


def test_search_packs_thresh_and_window():
    assert struct.unpack("<8I", SEARCH.config_value(SEARCH.resolve({})))[:2] == (260, 350)


def test_a_log_decodes_with_the_schemes_names():
    key = struct.pack(per_install.CONN_FORMAT, struct.unpack("<I", socket.inet_aton("10.2.0.1"))[0],
                      struct.unpack("<I", socket.inet_aton("10.1.0.1"))[0], 80, 40000, 7)
    events = [(1_000, 1, 3, 92, 0x7FFFFFFF, 100_130, 104_130, 30, 0),
              (2_000, 2, 7, 4532, 0x7FFFFFFF, 4532, 2, 3171, 242)]
    raw = b"".join(struct.pack(per_install.SS_EVENT_FORMAT, *e) for e in events)
    value = struct.pack("<II", 2, 1448) + raw + bytes(40 * (per_install.SS_EVENTS - 2))
    log = RAPID.decode_log(key, value)
    assert log["local"] == "10.2.0.1:80" and log["remote"] == "10.1.0.1:40000" and log["mss"] == 1448
    first, loss = log["events"]
    assert first == {"t_ns": 1_000, "event": "round", "round": 3, "cwnd": 92, "ssthresh": 0x7FFFFFFF,
                     "rtt_floor_us": 100_130, "threshold_us": 104_130, "acked_3x": 30, "acked_2x": 0}
    assert loss["event"] == "loss" and loss["pre_cwnd"] == 4532 and loss["target"] == 3171


def test_suss_packs_its_settings_and_names_its_exits():
    assert struct.unpack("<8I", SUSS.config_value(SUSS.resolve({})))[:3] == (10, 3, 10_000)
    source = (HERE / "implementations" / "suss.bpf.c").read_text()
    exits = re.search(r"enum suss_exit \{([^}]*)\}", source).group(1)
    assert [x.strip().split(" ")[0].removeprefix("EXIT_").lower() for x in exits.split(",")] == \
        ["delay", "train", "cap", "loss"]
    key = struct.pack(per_install.CONN_FORMAT, 1, 2, 80, 40000, 1)
    value = struct.pack("<II", 1, 1448) + struct.pack(per_install.SS_EVENT_FORMAT, 5, 3, 6, 700, 700, 2, 0, 0, 1) \
        + bytes(40 * (per_install.SS_EVENTS - 1))
    assert SUSS.decode_log(key, value)["events"][0]["why"] == "ack_train"
