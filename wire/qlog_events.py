"""Any QUIC stack's qlog in one event model, checked against the draft its file declares.

The stacks write different qlog generations: aioquic one JSON object with `traces`
(qlog_version 0.3, draft-ietf-quic-qlog-main-schema-01/-02 era), ngtcp2 0.12 JSON-SEQ with
the same 0.3 declaration, quic-go JSON-SEQ with `file_schema` and `event_schemas` (main
schema -10 and later; it names quic-events -14). startlab's own endpoints' qlog is checked
against the -12 CDDL (wire/qlog_validate.py); these generations are not that schema, so
they are read into one model instead, and each file is checked for what its declaration
and every generation require:

- the header carries the declaration's fields (known declarations only);
- every record is a JSON text, but the last one of a JSON-SEQ file, which a stack stopped
  by a signal may leave cut off (`cut_off`: said, not a fault);
- every event has a numeric time, a `category:event` name and an object of data; times
  never go back;
- a congestion window (`congestion_window`, aioquic's `cwnd`) is a positive integer, bytes
  in flight a non-negative one; every sent packet has a packet number and type;
- the file has sent packets and congestion windows at all: a qlog without them checks
  nothing against the wire.

Times become milliseconds from the trace's first event, whatever the file's clock.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

RS = "\x1e"
SEQUENTIAL = "urn:ietf:params:qlog:file:sequential"
JSON_SEQ_MEDIA = "application/qlog+json-seq"
# The sender's metrics: `recovery:metrics_updated` until quic-events -10, then
# `quic:recovery_metrics_updated` (quiche writes the later name, quic-go the earlier one).
METRICS = ("metrics_updated", "recovery_metrics_updated")
PACKET_SENT = "packet_sent"
PACKET_RECEIVED = "packet_received"
STATE_UPDATED = "congestion_state_updated"
# Congestion states that are not a slow-start exit: slow start itself, and the sender
# waiting on the application (quic-go's application_limited, before its first data).
SLOW_START_STATES = ("slow_start", "application_limited")
# A threshold this large is "not set yet" (quiche writes u64::MAX, others 2^62 or similar).
UNSET_SSTHRESH = 2 ** 60
NAME = re.compile(r"^[a-z0-9_]+:[a-z0-9_]+$")
CWND_FIELDS = ("congestion_window", "cwnd")          # the drafts' name; aioquic's


@dataclass
class Event:
    time_ms: float
    name: str                    # as written, category included
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        """The event's name without its category: quic-go writes `recovery:metrics_updated`
        beside `quic:recovery_parameters_set`, later drafts put every event under `quic:`."""
        return self.name.partition(":")[2]


@dataclass
class Trace:
    declared: str                # what the file says it is, in words
    vantage: str                 # server or client
    events: list[Event]
    records: int                 # JSON texts in the file (JSON-SEQ) or events (JSON)
    problems: list[str] = field(default_factory=list)
    cut_off: bool = False        # the file's last record was not whole

    def cwnds(self) -> list[tuple[float, int]]:
        """(time, congestion window) of every metrics update that carries one."""
        out = []
        for e in self.events:
            if e.kind in METRICS:
                w = next((e.data[k] for k in CWND_FIELDS if k in e.data), None)
                if w is not None:
                    out.append((e.time_ms, w))
        return out

    def sent(self) -> list[Event]:
        return [e for e in self.events if e.kind == PACKET_SENT]

    def slow_start_exit_ms(self) -> Optional[float]:
        """When the sender left its first slow start, by its own word: the first congestion
        state it entered other than slow start or application-limited
        (`congestion_state_updated`: congestion avoidance, recovery, HyStart++'s conservative
        slow start), or the first finite slow-start threshold it reported, whichever came
        first (None: never)."""
        for e in self.events:
            if e.kind == STATE_UPDATED and str(e.data.get("new", "")).lower() not in SLOW_START_STATES:
                return e.time_ms
            if e.kind in METRICS and isinstance(e.data.get("ssthresh"), int) and e.data["ssthresh"] < UNSET_SSTHRESH:
                return e.time_ms
        return None

    def fin_received_ms(self) -> Optional[float]:
        """When the first packet carrying a stream's FIN arrived (a client's: its object's last
        byte), where the stack logs the frames of the packets it received (None: not found)."""
        for e in self.events:
            if e.kind == PACKET_RECEIVED and any(isinstance(f, dict) and f.get("frame_type") == "stream" and f.get("fin")
                                                 for f in e.data.get("frames") or []):
                return e.time_ms
        return None


def read(path: Path) -> Trace:
    """The file's (first) trace, with every problem found in it."""
    text = Path(path).read_text(errors="replace")
    if text.lstrip().startswith(RS) or RS in text[:4096]:
        return _read_seq(text)
    return _read_json(text)


def _read_seq(text: str) -> Trace:
    chunks = [c for c in text.split(RS) if c.strip()]
    records, broken = [], []
    for i, chunk in enumerate(chunks):
        try:
            records.append(json.loads(chunk))
        except json.JSONDecodeError:
            broken.append(i)
    if not records or not isinstance(records[0], dict) or "name" in records[0]:
        return Trace("unknown", "", [], len(chunks), ["no header record"])
    header, problems = records[0], []
    trace = header.get("trace") or {}
    if header.get("file_schema") == SEQUENTIAL:
        declared = f"JSON-SEQ, {SEQUENTIAL}, events {', '.join(trace.get('event_schemas') or []) or '?'}"
        if header.get("serialization_format") != JSON_SEQ_MEDIA:
            problems.append(f"serialization_format is {header.get('serialization_format')!r}, not {JSON_SEQ_MEDIA}")
        schemas = trace.get("event_schemas")
        if not (isinstance(schemas, list) and schemas and all(str(s).startswith("urn:ietf:params:qlog:events:")
                                                              for s in schemas)):
            problems.append(f"trace.event_schemas is {schemas!r}, not a list of event schema URNs")
    elif header.get("qlog_format") == "JSON-SEQ" and header.get("qlog_version") == "0.3":
        declared = "JSON-SEQ, qlog_version 0.3"
        if not isinstance(trace, dict) or not trace:
            problems.append("the header has no trace")
    else:
        declared = f"unknown ({header.get('qlog_format')!r} {header.get('qlog_version')!r})"
        problems.append(f"an unknown declaration: {declared}")
    cut_off = bool(broken) and broken[-1] == len(chunks) - 1
    broken = broken[:-1] if cut_off else broken
    if broken:
        problems.append(f"{len(broken)} of {len(chunks)} records are not JSON (the first is record {broken[0]})")
    vantage = str((trace.get("vantage_point") or {}).get("type", ""))
    events = _events(records[1:], problems)
    return Trace(declared, vantage, events, len(chunks), problems, cut_off)


def _read_json(text: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return Trace("unknown", "", [], 0, [f"not JSON: {e}"])
    problems = []
    if not (doc.get("qlog_format", "JSON") == "JSON" and doc.get("qlog_version") == "0.3"):
        problems.append(f"an unknown declaration: {doc.get('qlog_format')!r} {doc.get('qlog_version')!r}")
    traces = doc.get("traces")
    if not (isinstance(traces, list) and traces and isinstance(traces[0], dict)):
        return Trace("JSON, qlog_version 0.3", "", [], 0, problems + ["no traces"])
    trace = traces[0]
    raw = trace.get("events")
    if not isinstance(raw, list):
        return Trace("JSON, qlog_version 0.3", "", [], 0, problems + ["the trace has no events list"])
    vantage = str((trace.get("vantage_point") or {}).get("type", ""))
    return Trace("JSON, qlog_version 0.3", vantage, _events(raw, problems), len(raw), problems)


def _events(raw: list, problems: list[str]) -> list[Event]:
    """Events in the model, each malformed one named once by kind of fault."""
    events: list[Event] = []
    faults: dict[str, int] = {}

    def fault(what: str) -> None:
        faults[what] = faults.get(what, 0) + 1
    t0: Optional[float] = None
    last = float("-inf")
    for r in raw:
        if not isinstance(r, dict):
            fault("an event that is not an object")
            continue
        t, name, data = r.get("time"), r.get("name"), r.get("data", {})
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            fault("an event without a numeric time")
            continue
        if not (isinstance(name, str) and NAME.match(name)):
            fault("an event whose name is not category:event")
            continue
        if not isinstance(data, dict):
            fault("an event whose data is not an object")
            continue
        if t < last:
            fault("an event earlier than the one before it")
        last = max(last, t)
        t0 = t if t0 is None else t0
        e = Event(float(t - t0), name, data)
        _check(e, fault)
        events.append(e)
    problems.extend(f"{n} × {what}" for what, n in faults.items())
    if not any(e.kind == PACKET_SENT for e in events):
        problems.append("no packet_sent event: nothing to check against the wire")
    if not any(e.kind in METRICS and any(k in e.data for k in CWND_FIELDS) for e in events):
        problems.append("no congestion window in any metrics_updated event")
    return events


def _check(e: Event, fault) -> None:
    if e.kind in METRICS:
        for k in CWND_FIELDS:
            if k in e.data and not (_int(e.data[k]) and e.data[k] > 0):
                fault(f"a {k} that is not a positive integer")
        if "bytes_in_flight" in e.data and not (_int(e.data["bytes_in_flight"]) and e.data["bytes_in_flight"] >= 0):
            fault("bytes_in_flight that is not a non-negative integer")
    elif e.kind == PACKET_SENT:
        header = e.data.get("header")
        if not (isinstance(header, dict) and _int(header.get("packet_number")) and header["packet_number"] >= 0
                and isinstance(header.get("packet_type"), str)):
            fault("a packet_sent without a packet number and type")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
