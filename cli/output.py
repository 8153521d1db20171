"""Printing for people (aligned tables) and for machines (JSON)."""
from __future__ import annotations

import json
import sys


def emit_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(rows: list[list], header: list[str]) -> str:
    cells = [[str(c) for c in header]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
