"""Printing for machines (JSON) and small words for people; tables are analysis/tables.py."""
from __future__ import annotations

import json
import sys


def emit_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
