"""Reading the QUIC server's qlog (hosts/quic/qlog.py): JSON-SEQ records, metrics carried
forward in milliseconds, lost packets matched to their sending per number space."""
from __future__ import annotations

import json

import pytest

from hosts.quic import qlog


def write(path, records, tail: bytes = b"") -> None:
    path.write_bytes(b"".join(qlog.RS + json.dumps(r).encode() + b"\n" for r in records) + tail)


def event(time_ms: float, name: str, data: dict) -> dict:
    return {"time": time_ms, "name": name, "data": data}


def test_states_carry_fields_forward_with_rtts_in_milliseconds(tmp_path):
    f = tmp_path / "c.sqlog"
    write(f, [{"qlog_version": "0.3", "trace": {}},
              event(0.5, qlog.METRICS, {"congestion_window": 47104, "smoothed_rtt": 0.333, "min_rtt": 0.05}),
              event(51.0, qlog.PACKET_SENT, {"header": {"packet_type": "1RTT", "packet_number": 3}}),
              event(52.0, qlog.METRICS, {"congestion_window": 48576, "pacing_rate": 15_000_000}),
              event(60.0, qlog.METRICS, {"ssthresh": 48576, "latest_rtt": 0.0625})],
          tail=qlog.RS + b'{"time": 61.0, "na')          # cut off while being written
    header, events = qlog.read(f)
    assert header["qlog_version"] == "0.3" and len(events) == 4
    states = qlog.recovery_states(events)
    assert [s["time_ms"] for s in states] == [0.5, 52.0, 60.0]
    assert states[1] == {"congestion_window": 48576, "smoothed_rtt": 333.0, "min_rtt": 50.0,
                         "pacing_rate": 15_000_000, "time_ms": 52.0}
    assert states[2]["ssthresh"] == 48576 and states[2]["latest_rtt"] == 62.5
    assert states[2]["smoothed_rtt"] == 333.0


def test_a_lost_packet_is_matched_to_its_sending_in_its_own_number_space(tmp_path):
    f = tmp_path / "c.sqlog"
    sent = lambda t, kind, pn: event(t, qlog.PACKET_SENT, {"header": {"packet_type": kind, "packet_number": pn}})
    write(f, [{"qlog_version": "0.3"}, sent(0.1, "initial", 1), sent(40.0, "1RTT", 1), sent(41.0, "1RTT", 2),
              event(95.0, qlog.PACKET_LOST, {"header": {"packet_type": "1RTT", "packet_number": 1}})])
    _, events = qlog.read(f)
    assert qlog.lost_packets(events) == [{"packet_number": 1, "sent_ms": 40.0, "declared_ms": 95.0}]


def test_a_file_without_header_is_refused(tmp_path):
    f = tmp_path / "empty.sqlog"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="no qlog header"):
        qlog.read(f)
