"""What startlab's QUIC endpoints put on the wire and in their reports, read both where a
run is observed (hosts/) and where it is analysed (analysis/): the datagram size of a path,
the client's JSON report, the server's per-connection lines (`--stats`, one JSON per line)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


IPV4_UDP_HEADERS = 28


def udp_payload(mtu: int) -> int:
    """The datagram size that fills one IP packet of the path (1472 on 1500 bytes)."""
    return mtu - IPV4_UDP_HEADERS


def last_json_object(text: str) -> Optional[dict]:
    """The client's report: the last JSON line of its log (stderr lines may surround it)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def established_connections(path: Path) -> Optional[list[dict]]:
    """The established connections a server reported, in order; None if there is no report."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue                     # a line cut short by the server's stop
        if doc.get("event") == "connection" and doc.get("established"):
            out.append(doc)
    return out
