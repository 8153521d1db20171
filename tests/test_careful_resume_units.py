"""Careful Resume's Python side: the layouts it shares with careful_resume.bpf.c (its
settings, its event log) and the decoding of a connection's phase changes."""
from __future__ import annotations

import re
import socket
import struct
from pathlib import Path

from hosts.implementations import careful_resume as cr
from hosts.implementations.per_install import CONN_FORMAT

SOURCE = (Path(__file__).resolve().parent.parent / "hosts" / "implementations" / "careful_resume.bpf.c").read_text()


def test_the_layouts_match_the_bpf_source():
    assert f"#define STL_CR_EVENTS {cr.EVENTS}" in SOURCE
    assert f"#define STL_CR_MARK_TAG {cr.CR_MARK_TAG:#010x}u" in SOURCE
    phases = re.search(r"enum cr_phase \{([^}]*)\}", SOURCE).group(1)
    assert [p.strip().split(" ")[0] for p in phases.split(",")] == [
        "CR_OBSERVING", "CR_RECON", "CR_UNVALIDATED", "CR_VALIDATING", "CR_RETREAT", "CR_NORMAL"]
    assert len(cr.PHASES) == 6
    triggers = re.search(r"enum cr_trigger \{([^}]*)\}", SOURCE).group(1)
    assert len([t for t in triggers.split(",") if t.strip()]) == len(cr.TRIGGERS)
    assert struct.calcsize(cr.EVENT_FORMAT) == 48 and struct.calcsize(cr.CONFIG_FORMAT) == 24


def test_config_value_packs_lifetime_jump_beta_and_min_save():
    assert struct.unpack(cr.CONFIG_FORMAT, cr.config_value(60.0, 80, 0.7, 4)) == (60_000_000_000, 80, 700, 4, 0)


def test_a_log_decodes_to_the_qlog_fields():
    key = struct.pack(CONN_FORMAT, struct.unpack("<I", socket.inet_aton("10.2.0.1"))[0],
                      struct.unpack("<I", socket.inet_aton("10.1.0.1"))[0], 80, 40000, 3)
    events = [(1_000, 0, 1, 0, 0, 10, 0x7fffffff, 0, 0, 0, 120, 60_000, 61_000, 0xffffffff),
              (2_000, 1, 2, 1, 0, 60, 0x7fffffff, 18, 1_000_001, 0, 120, 60_000, 62_000, 1_401_290)]
    raw = b"".join(struct.pack(cr.EVENT_FORMAT, *e) for e in events)
    value = struct.pack("<II", 2, 1448) + raw + bytes(struct.calcsize(cr.EVENT_FORMAT) * (cr.EVENTS - 2))
    log = cr.decode_log(key, value)
    assert log["local"] == "10.2.0.1:80" and log["remote"] == "10.1.0.1:40000" and log["mss"] == 1448
    assert [(e["old"], e["new"], e["trigger"]) for e in log["events"]] == [
        ("observing", "reconnaissance", None), ("reconnaissance", "unvalidated", "congestion_window_limited")]
    assert log["events"][1]["congestion_window"] == 60 and log["events"][1]["pipesize"] == 18
    assert log["events"][1]["first_unvalidated_packet"] == 1_000_001
    assert (log["events"][1]["srtt_us"], log["events"][1]["pacing_rate_Bps"]) == (62_000, 1_401_290)

