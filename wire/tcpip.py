"""Header sizes and the option walker of IPv4 and TCP (the same TLV rules, RFC 791/9293)."""
from __future__ import annotations

from typing import Iterator

ETH_HEADER = 14          # Ethernet II; tbf and interface counters include it in a frame's length
IP_HEADER = 20
TCP_HEADER = 20
TCP_TIMESTAMPS = 12      # the timestamp option with its padding, which Linux sends by default
TCPIP_HEADERS = IP_HEADER + TCP_HEADER + TCP_TIMESTAMPS   # 52: H of RFC 4782's Equation 1


def tcp_mss(mtu: int) -> int:
    """Payload of a full TCP segment on a path of `mtu`: IPv4, TCP and its timestamps off."""
    return int(mtu) - TCPIP_HEADERS


def run_mss(meta: dict) -> int:
    """The MSS of a run, from the MTU its meta.json records for its profile (1500 if none)."""
    return tcp_mss(int((meta.get("profile_params") or {}).get("mtu") or 1500))

OPT_END, OPT_NOP = 0, 1


def iter_options(options: bytes) -> Iterator[tuple[int, bytes]]:
    """(kind, whole option including kind and length bytes) for each option of an IPv4 or
    TCP option list, stopping at End of Option List or at the first malformed entry."""
    i = 0
    while i < len(options):
        kind = options[i]
        if kind == OPT_END:
            return
        if kind == OPT_NOP:
            i += 1
            continue
        if i + 1 >= len(options) or options[i + 1] < 2:
            return                                  # no length byte, or a length below 2
        length = options[i + 1]
        body = options[i:i + length]
        if len(body) < length:
            return                                  # truncated
        yield kind, body
        i += length


def find_option(options: bytes, kind: int) -> bytes | None:
    """The first option of `kind` (kind and length bytes included), or None."""
    return next((body for k, body in iter_options(options) if k == kind), None)
