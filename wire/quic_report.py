"""The QUIC server's per-connection report (its `--stats` file: one JSON object per line),
read both where a run is observed (hosts/) and where it is analysed (analysis/)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


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
