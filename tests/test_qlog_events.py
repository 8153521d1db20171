"""wire/qlog_events on crafted files of each qlog generation the stacks write: what each
declares, the one event model, and every fault found (none missed, none invented)."""
from __future__ import annotations

import json
from pathlib import Path

from wire import qlog_events

RS = "\x1e"


def seq(path: Path, header: dict, events: list, tail: str = "") -> Path:
    path.write_text("".join(RS + json.dumps(r) + "\n" for r in [header, *events]) + tail)
    return path


def sent(t, pn, kind="1RTT"):
    return {"time": t, "name": "transport:packet_sent", "data": {"header": {"packet_type": kind, "packet_number": pn}}}


def metrics(t, cwnd, name="congestion_window", cat="recovery"):
    return {"time": t, "name": f"{cat}:metrics_updated", "data": {name: cwnd, "bytes_in_flight": 0}}


NGTCP2_HEADER = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
                 "trace": {"vantage_point": {"name": "ngtcp2", "type": "server"}, "common_fields": {}}}
QUICGO_HEADER = {"file_schema": "urn:ietf:params:qlog:file:sequential",
                 "serialization_format": "application/qlog+json-seq",
                 "trace": {"event_schemas": ["urn:ietf:params:qlog:events:quic-14"], "vantage_point": {"type": "server"}}}


def test_json_seq_03_as_ngtcp2_writes_it(tmp_path):
    t = qlog_events.read(seq(tmp_path / "a.sqlog", NGTCP2_HEADER, [metrics(0, 14520), sent(0, 0, "initial"), sent(3, 1)]))
    assert t.problems == [] and t.declared == "JSON-SEQ, qlog_version 0.3" and t.vantage == "server"
    assert t.cwnds() == [(0.0, 14520)] and [e.data["header"]["packet_number"] for e in t.sent()] == [0, 1]


def test_sequential_file_schema_as_quic_go_writes_it_with_times_from_the_first_event(tmp_path):
    t = qlog_events.read(seq(tmp_path / "b.sqlog", QUICGO_HEADER, [metrics(1.25, 40960), sent(1.5, 0)]))
    assert t.problems == [] and "quic-14" in t.declared
    assert t.cwnds() == [(0.0, 40960)] and t.sent()[0].time_ms == 0.25


def test_quic_events_12_names_the_metrics_recovery_metrics_updated_as_quiche_writes_it(tmp_path):
    t = qlog_events.read(seq(tmp_path / "q.sqlog", QUICGO_HEADER,
                             [{"time": 0.08, "name": "quic:recovery_metrics_updated", "data": {"congestion_window": 12000}},
                              {**sent(0.1, 0), "name": "quic:packet_sent"}]))
    assert t.problems == [] and t.cwnds() == [(0.0, 12000)] and len(t.sent()) == 1


def test_json_03_as_aioquic_writes_it_names_cwnd_its_own_way(tmp_path):
    doc = {"qlog_format": "JSON", "qlog_version": "0.3",
           "traces": [{"vantage_point": {"name": "aioquic", "type": "client"},
                       "events": [metrics(1796115314123.0, 12000, name="cwnd"), sent(1796115314124.5, 0)]}]}
    (tmp_path / "c.qlog").write_text(json.dumps(doc))
    t = qlog_events.read(tmp_path / "c.qlog")
    assert t.problems == [] and t.vantage == "client" and t.cwnds() == [(0.0, 12000)]
    assert t.sent()[0].time_ms == 1.5


def test_a_last_record_cut_off_is_said_but_one_in_the_middle_is_a_fault(tmp_path):
    events = [metrics(0, 14520), sent(1, 0)]
    t = qlog_events.read(seq(tmp_path / "d.sqlog", NGTCP2_HEADER, events, tail=RS + '{"time":39,"name":"transport:pa'))
    assert t.problems == [] and t.cut_off
    body = RS + json.dumps(NGTCP2_HEADER) + "\n" + RS + '{"time":1,"na\n' + "".join(RS + json.dumps(e) + "\n" for e in events)
    (tmp_path / "e.sqlog").write_text(body)
    t = qlog_events.read(tmp_path / "e.sqlog")
    assert not t.cut_off and t.problems == ["1 of 4 records are not JSON (the first is record 1)"]


def test_every_kind_of_fault_is_named_with_its_count(tmp_path):
    events = [metrics(5, 14520), metrics(4, 0), sent(6, -1), {"time": "7", "name": "transport:packet_sent", "data": {}},
              {"time": 8, "name": "PacketSent", "data": {}}, {"time": 9, "name": "transport:x", "data": []},
              {"time": 10, "name": "transport:packet_sent", "data": {"header": {"packet_number": 3}}}]
    t = qlog_events.read(seq(tmp_path / "f.sqlog", NGTCP2_HEADER, events))
    assert sorted(t.problems) == sorted([
        "1 × an event earlier than the one before it", "1 × a congestion_window that is not a positive integer",
        "2 × a packet_sent without a packet number and type", "1 × an event without a numeric time",
        "1 × an event whose name is not category:event", "1 × an event whose data is not an object"])


def test_a_qlog_with_nothing_to_hold_against_the_wire_fails(tmp_path):
    t = qlog_events.read(seq(tmp_path / "g.sqlog", NGTCP2_HEADER, [{"time": 0, "name": "transport:parameters_set",
                                                                     "data": {}}]))
    assert t.problems == ["no packet_sent event: nothing to check against the wire",
                          "no congestion window in any metrics_updated event"]


def test_declarations_it_does_not_know_and_broken_headers_are_faults(tmp_path):
    t = qlog_events.read(seq(tmp_path / "h.sqlog", {"qlog_format": "JSON-SEQ", "qlog_version": "0.4", "trace": {}},
                             [metrics(0, 1), sent(0, 0)]))
    assert t.problems == ["an unknown declaration: unknown ('JSON-SEQ' '0.4')"]
    bad = {**QUICGO_HEADER, "serialization_format": "application/json",
           "trace": {"event_schemas": ["quic"], "vantage_point": {"type": "server"}}}
    t = qlog_events.read(seq(tmp_path / "i.sqlog", bad, [metrics(0, 1), sent(0, 0)]))
    assert len(t.problems) == 2 and "serialization_format" in t.problems[0] and "event_schemas" in t.problems[1]


def state(t, new):
    return {"time": t, "name": "recovery:congestion_state_updated", "data": {"new": new}}


def test_slow_start_ends_at_the_first_state_past_it_or_the_first_finite_threshold(tmp_path):
    # quic-go: application-limited before its first data is not an exit; congestion avoidance is.
    go = [metrics(0, 40960), sent(0, 0), state(0, "slow_start"), state(78, "application_limited"),
          state(155, "slow_start"), state(341, "congestion_avoidance"), state(382, "recovery")]
    assert qlog_events.read(seq(tmp_path / "go.sqlog", QUICGO_HEADER, go)).slow_start_exit_ms() == 341
    # quiche: HyStart++'s conservative slow start leaves slow start.
    quiche = [metrics(0, 12000), sent(0, 0), state(0, "slow_start"), state(386, "conservative_slow_start")]
    assert qlog_events.read(seq(tmp_path / "q.sqlog", QUICGO_HEADER, quiche)).slow_start_exit_ms() == 386
    # ngtcp2 logs no states: its first finite threshold; quiche's u64::MAX is not one.
    unset = {"time": 1, "name": "recovery:metrics_updated", "data": {"congestion_window": 14520, "ssthresh": 2 ** 64 - 1}}
    set_ = {"time": 335, "name": "recovery:metrics_updated", "data": {"congestion_window": 90000, "ssthresh": 90000}}
    ng = [metrics(0, 14520), sent(0, 0), unset, set_]
    assert qlog_events.read(seq(tmp_path / "n.sqlog", NGTCP2_HEADER, ng)).slow_start_exit_ms() == 335
    assert qlog_events.read(seq(tmp_path / "s.sqlog", NGTCP2_HEADER, [metrics(0, 14520), sent(0, 0)])) \
        .slow_start_exit_ms() is None


def test_a_clients_last_byte_is_the_first_packet_carrying_a_fin(tmp_path):
    def received(t, frames):
        return {"time": t, "name": "transport:packet_received", "data": {"header": {}, "frames": frames}}
    client = {**NGTCP2_HEADER, "trace": {**NGTCP2_HEADER["trace"], "vantage_point": {"type": "client"}}}
    events = [metrics(0, 14520), sent(0, 0), received(100, [{"frame_type": "ack"}]),
              received(600, [{"frame_type": "stream", "stream_id": 0, "offset": 0, "length": 1000}]),
              received(654, [{"frame_type": "stream", "stream_id": 0, "offset": 1000, "length": 43, "fin": True}])]
    t = qlog_events.read(seq(tmp_path / "c.sqlog", client, events))
    assert t.fin_received_ms() == 654
    assert qlog_events.read(seq(tmp_path / "d.sqlog", client, events[:-1])).fin_received_ms() is None
