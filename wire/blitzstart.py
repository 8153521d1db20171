"""Blitzstart over TCP: the client's bandwidth hint as an RFC 6994 experimental option.

    | kind=253 | len=10 | ExID 0x5354 (16) | hint kbit/s (32) | technology (8) | reserved (8) |

Written by the client's sock_ops program (hosts/bpf/stl_sockops.bpf.c, see stl_common.h),
read by the server's, and decoded from captures by the tests and the analysis.
"""
from __future__ import annotations

import struct

from wire.tcpip import iter_options

OPTION_KIND = 253
OPTION_EXID = 0x5354          # "ST": not in the IANA ExID registry
OPTION_LEN = 10
# Access-technology codes carried in the option (the paper names these kinds).
TECHNOLOGIES = {"unknown": 0, "ethernet": 1, "dsl": 2, "cable": 3, "wifi": 4, "3g": 5, "lte": 6,
                "5g": 7, "satellite": 8}



def hint_kbps(rate_bps: float, factor: float) -> int:
    """The hint a client sends: factor × the true rate, in kbit/s (at least 1)."""
    if rate_bps <= 0:
        raise ValueError("the profile's bottleneck rate is unknown: cannot derive a hint")
    return max(1, round(factor * rate_bps / 1000))


def encode_option(kbps: int, tech: int) -> bytes:
    """The option as the client writes it."""
    return struct.pack("!BBHIBB", OPTION_KIND, OPTION_LEN, OPTION_EXID, kbps, tech, 0)


def decode_option(tcp_options: bytes) -> tuple[int, int] | None:
    """(hint kbit/s, technology code) from a TCP header's option bytes, or None. Other
    experiments may share kind 253: only our ExID with our length counts."""
    for kind, body in iter_options(tcp_options):
        if kind == OPTION_KIND and len(body) == OPTION_LEN and struct.unpack("!H", body[2:4])[0] == OPTION_EXID:
            _, _, _, kbps, tech, _ = struct.unpack("!BBHIBB", body)
            return kbps, tech
    return None


def initial_cwnd(kbps: int, rtt_us: int, mss: int) -> int:
    """Segments the server starts with: the hinted bandwidth-delay product, as the BPF
    program computes it (bdp_segments in stl_sockops.bpf.c)."""
    nbytes = kbps * rtt_us // 8000
    return min(65535, max(2, -(-nbytes // mss)))
