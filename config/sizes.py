"""Transfer sizes as the papers write them (70KB, 2MB): parsing and labels, in one place.

Run ids, file names, tables and plot titles all use `size_label`, and `parse_size` reads
every label back to the same number of bytes.
"""
from __future__ import annotations

import re

MAX_SIZE = 10 ** 10
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9,
          "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30}


def parse_size(text) -> int:
    """'70KB' → 70000, '2MB' → 2000000 (SI units as the papers write them; KiB/MiB binary)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise ValueError(f"'{text}' is not a size (e.g. 70KB, 2MB, 1.5MiB, 4096)")
        value = int(round(float(match.group(1)) * _UNITS[match.group(2)]))
    if not 1 <= value <= MAX_SIZE:
        raise ValueError(f"size {value} bytes is outside 1 B … 10 GB")
    return value


def size_label(n: int) -> str:
    """The shortest exact SI label: 70000 → '70KB', 1500000 → '1.5MB', 1048576 →
    '1048.576KB', 512 → '512B'. parse_size(size_label(n)) == n for every n."""
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("KB", 10 ** 3)):
        if n >= scale and (n * 1000) % scale == 0:
            whole, frac = divmod(n, scale)
            text = str(whole) if frac == 0 else f"{whole}.{frac * 1000 // scale:03d}".rstrip("0")
            return f"{text}{unit}"
    return f"{n}B"
