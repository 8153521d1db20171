"""Reading and writing result files: atomically, so no reader ever sees half a file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Union

from machine.errors import UserError


def write_atomically(path: Path, data: Union[str, bytes]) -> None:
    """Write via a temporary file in the same directory and rename it into place.

    A reader (or a campaign interrupted mid-write) then sees the old file or the complete
    new one, never a half-written result.
    """
    payload = data.encode() if isinstance(data, str) else data
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomically(path, json.dumps(data, indent=1, default=str) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; a missing, unreadable or non-object file is a UserError."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {path}: {err}") from err
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return data


def read_json_or_none(path: Path) -> dict[str, Any] | None:
    """Like read_json, but None where the file is absent or unreadable (resume checks)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
