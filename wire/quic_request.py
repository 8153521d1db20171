"""The request startlab's QUIC client writes at the start of its stream, read back from a
decrypted capture: the Blitzstart hint travels in it (hosts/quic/src/request.rs holds the
writer and the reasons; this is its reader for the wire tests, kept to the same layout).

    0      4         5       6      7          8                   16                  20
    | STLQ | version | flags | tech | reserved | object size (u64) | hint kbit/s (u32) |

Big-endian; flag bit 0: a hint is present (hint kbit/s and the access-technology code,
wire.blitzstart.TECHNOLOGIES).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

MAGIC = b"STLQ"
VERSION = 1
LEN = 20
FLAG_HINT = 0x01


@dataclass(frozen=True)
class QuicRequest:
    size: int
    hint_kbps: Optional[int]     # None: the client sent no hint
    tech: Optional[int]          # the access-technology code sent with the hint


def decode_request(data: bytes) -> QuicRequest:
    """The request at the start of `data` (a stream's first bytes); ValueError if it is not one."""
    if len(data) < LEN:
        raise ValueError(f"{len(data)} bytes: a request is {LEN}")
    magic, version, flags, tech, _, size, kbps = struct.unpack("!4sBBBBQI", data[:LEN])
    if magic != MAGIC:
        raise ValueError(f"not a startlab request (magic {magic!r})")
    if version != VERSION:
        raise ValueError(f"unsupported request version {version}")
    if not flags & FLAG_HINT:
        return QuicRequest(size, None, None)
    if kbps == 0:
        raise ValueError("hint flag set with a hint of 0 kbit/s")
    return QuicRequest(size, kbps, tech)
