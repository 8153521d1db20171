"""The QUIC server's qlog (`startlab-quic-server --qlog-dir`), read back.

quinn writes it as JSON-SEQ (RFC 7464: every record starts with the RS byte): a header
record, then one event per record, `time` in ms from the connection's start (the server's
`start_unix_s`). `recovery:metrics_updated` carries only the fields that changed since the
previous one; `recovery_states` carries the others forward, so that each state is the
whole picture the sender had at that time.

quinn 0.11 writes the RTT fields in seconds where the qlog drafts say milliseconds; the
states here give them in milliseconds.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RS = b"\x1e"
METRICS = "recovery:metrics_updated"
PACKET_LOST = "recovery:packet_lost"
PACKET_SENT = "transport:packet_sent"
RTT_FIELDS = ("min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance")
QUINN_RTT_TO_MS = 1e3


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header record and the events, in file order; a record cut off at the end (the
    server was killed while writing) is left out."""
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    for chunk in Path(path).read_bytes().split(RS):
        if not chunk.strip():
            continue
        try:
            record = json.loads(chunk)
        except json.JSONDecodeError:
            continue
        if header is None:
            header = record
        else:
            events.append(record)
    if header is None:
        raise ValueError(f"{path}: no qlog header record")
    return header, events


def recovery_states(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every metrics update with the fields of earlier ones carried forward, RTTs in ms,
    and `time_ms`."""
    state: dict[str, Any] = {}
    states = []
    for e in events:
        if e.get("name") == METRICS:
            data = {k: v * QUINN_RTT_TO_MS if k in RTT_FIELDS else v for k, v in e.get("data", {}).items()}
            state = {**state, **data, "time_ms": e["time"]}
            states.append(state)
    return states


def lost_packets(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each packet the sender declared lost: its number, when it was sent and when it was
    declared lost (ms). Packet numbers count per number space, so the type is part of the key."""
    key = lambda header: (header.get("packet_type"), header.get("packet_number"))
    sent = {key(e["data"]["header"]): e["time"] for e in events if e.get("name") == PACKET_SENT}
    lost = []
    for e in events:
        if e.get("name") == PACKET_LOST:
            header = e["data"].get("header", {})
            lost.append({"packet_number": header.get("packet_number"), "sent_ms": sent.get(key(header)),
                         "declared_ms": e["time"]})
    return lost
