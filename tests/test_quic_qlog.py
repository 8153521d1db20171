"""Reading the QUIC server's qlog (wire/qlog.py): JSON-SEQ records, metrics carried
forward in milliseconds, lost packets matched to their sending per number space; a sender's
trace from it (analysis/quic_sender.py)."""
from __future__ import annotations

import json

import pytest

from analysis import quic_sender
from wire import qlog


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


def test_sender_trace_finds_the_exit_and_the_drops_before_it(tmp_path):
    """analysis/quic_sender.py: times from the origin, the exit's window, and which losses
    were of packets sent before the exit."""
    f = tmp_path / "c.sqlog"
    sent = lambda t, pn: event(t, qlog.PACKET_SENT, {"header": {"packet_type": "1RTT", "packet_number": pn}})
    write(f, [{"qlog_version": "0.3"},
              event(1.0, qlog.METRICS, {"congestion_window": 47104, "min_rtt": 0.05}),
              sent(2.0, 7), sent(3.0, 8),
              event(60.0, qlog.METRICS, {"congestion_window": 94208, "latest_rtt": 0.058}),
              event(70.0, qlog.METRICS, {"ssthresh": 94208}),
              sent(71.0, 9),
              event(90.0, qlog.PACKET_LOST, {"header": {"packet_type": "1RTT", "packet_number": 8}}),
              event(130.0, qlog.PACKET_LOST, {"header": {"packet_type": "1RTT", "packet_number": 9}}),
              event(131.0, qlog.METRICS, {"congestion_window": 80077})])
    trace = quic_sender.sender_trace(f, start_unix_s=1000.5, origin_ts=1000.0, ended_by="delay")
    assert trace["exit"] == {"t_s": 0.57, "cwnd_bytes": 94208, "by": "delay", "latest_rtt_ms": 58.0,
                             "min_rtt_ms": 50.0, "lost_before": 1}
    assert trace["lost_packets"] == 2
    assert trace["cwnd"]["t"] == [0.501, 0.56, 0.57, 0.631]
    assert trace["cwnd"]["bytes"] == [47104, 94208, 94208, 80077]


def test_how_slow_start_ended_is_read_from_the_servers_line():
    assert quic_sender.slow_start_end({"hint_applied": True, "hystart_exit": False}) == "hint"
    assert quic_sender.slow_start_end({"hint_applied": False, "hystart_exit": True}) == "delay"
    assert quic_sender.slow_start_end({"hint_applied": False, "hystart_exit": False}) == "loss"
