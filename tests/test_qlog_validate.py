"""The qlog validator (wire/qlog_validate.py) on files made here: it runs the real cddl tool
that provisioning installs, against the transcribed schemas, so these say what it accepts and
what it refuses. A server run's own file is validated in tests/test_careful_resume_quic.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wire import qlog_validate

HEADER = {"file_schema": qlog_validate.FILE_SCHEMA, "serialization_format": qlog_validate.SERIALIZATION_FORMAT,
          "title": "t", "trace": {"vantage_point": {"type": "server"},
                                  "event_schemas": ["urn:ietf:params:qlog:events:quic-12"],
                                  "common_fields": {"time_format": "relative_to_epoch",
                                                    "reference_time": {"clock_type": "system",
                                                                       "epoch": "2026-11-25T00:00:00.000000Z"}}}}


def event(**data) -> dict:
    body = {"new": "unvalidated", "old": "reconnaissance", "trigger": "congestion_window_limited",
            "state_data": {"pipesize": 14720, "first_unvalidated_packet": 12, "last_unvalidated_packet": 0,
                           "congestion_window": 147200}}
    body.update(data)
    return {"time": 61.5, "name": qlog_validate.CR_EVENT_NAME, "data": body}


def write(tmp_path: Path, *records: dict) -> Path:
    path = tmp_path / "t.sqlog"
    path.write_bytes(b"".join(b"\x1e" + json.dumps(r).encode() + b"\n" for r in records))
    return path


@pytest.fixture(autouse=True)
def tool():
    if qlog_validate.cddl_tool() is None:
        pytest.fail("the cddl tool is not installed: provisioning (playbooks/site.yml) installs it")


def test_a_well_formed_file_validates(tmp_path):
    first = event(restored_data={"saved_congestion_window": 294400, "saved_rtt": 60.0}, trigger="congestion_window_limited")
    del first["data"]["old"]
    assert qlog_validate.validate(write(tmp_path, HEADER, first, event())) == []


@pytest.mark.parametrize("bad, where", [
    ({"new": "jumping"}, "record 1"),                                           # not a phase
    ({"trigger": "timeout"}, "record 1"),                                       # not a trigger
    ({"restored_data": {"saved_congestion_window": 1, "saved_rtt": 60}}, "record 1"),   # float32 as an integer
    ({"state_data": {"pipesize": 1, "first_unvalidated_packet": 1}}, "record 1"),       # a field missing
    ({"state_data": {"pipesize": 1, "first_unvalidated_packet": 1, "last_unvalidated_packet": 1,
                     "cwnd": 1}}, "record 1"),                                  # a closed map's stranger
])
def test_an_event_off_the_schema_is_refused_with_its_record(tmp_path, bad, where):
    problems = qlog_validate.validate(write(tmp_path, HEADER, event(**bad)))
    assert problems and problems[0].startswith(where), problems


def test_a_header_off_the_schema_or_the_json_seq_values_is_refused(tmp_path):
    no_trace = {k: v for k, v in HEADER.items() if k != "trace"}
    assert qlog_validate.validate(write(tmp_path, no_trace, event()))[0].startswith("record 0")
    contained = dict(HEADER, file_schema="urn:ietf:params:qlog:file:contained")
    assert "file_schema" in qlog_validate.validate(write(tmp_path, contained, event()))[0]


def test_a_careful_resume_event_must_carry_its_name(tmp_path):
    renamed = dict(event(), name="recovery:careful_resume_phase_updated")
    assert any("named" in p for p in qlog_validate.validate(write(tmp_path, HEADER, renamed)))


def test_a_file_that_is_not_json_seq_says_so(tmp_path):
    path = tmp_path / "x.sqlog"
    path.write_text(json.dumps(HEADER))
    with pytest.raises(ValueError, match="not JSON-SEQ"):
        qlog_validate.records(path)
