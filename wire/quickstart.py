"""Quick-Start (RFC 4782) wire formats: the reference codec.

The BPF programs of hosts/bpf/ write and rewrite these options; the analysis decodes
captures with this module, the server part computes its request code with it, and the
tests use it as the oracle for what is on the wire.

IPv4 Quick-Start option (type 25, length 8), RFC 4782 §3.1:
    | type=25 | len=8 | func(4) rate(4) | QS TTL | QS nonce (30 bits) | R (2 bits) |
    func 0 = Quick-Start Request, 8 = Report of Approved Rate.
TCP Quick-Start Response option (kind 27, length 8), RFC 4782 §4.2:
    | kind=27 | len=8 | resv(4) rate(4) | TTL diff | QS nonce (30 bits) | R (2 bits) |

Rate codes: code 0 is 0 bit/s, code N ≥ 1 is 40 kbit/s × 2^N (80 kbit/s … 1.31 Gbit/s).

The nonce (RFC 4782 §3.4) is 15 two-bit fields; bits 0-1 (the most significant) belong
to the step "rate 15 → rate 14", bits 28-29 (the least significant) to "rate 1 → rate 0".
As an integer, the field of the step k → k−1 is (nonce >> 2(k−1)) & 3. A router that
lowers the rate from code a to code b re-randomises the fields of the steps a → … → b;
the fields of steps at or below the approved rate are never touched, so the sender
checks exactly those: a receiver that claims a higher rate than it was given must guess
two random bits per step it skips.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from wire.tcpip import find_option

IP_OPTION_TYPE = 25
TCP_OPTION_KIND = 27
OPTION_LEN = 8
FUNC_REQUEST = 0
FUNC_REPORT = 8
RATE_UNIT_BPS = 40_000
MAX_CODE = 15
NONCE_BITS = 30
NONCE_MASK = (1 << NONCE_BITS) - 1


def code_to_bps(code: int) -> int:
    """The rate of a rate-request code in bit/s (code 0 = 0)."""
    if not 0 <= code <= MAX_CODE:
        raise ValueError(f"rate code {code} outside 0..{MAX_CODE}")
    return 0 if code == 0 else RATE_UNIT_BPS << code


RATE_TABLE: dict[int, int] = {code: code_to_bps(code) for code in range(MAX_CODE + 1)}


def bps_to_code(bps: float) -> int:
    """The largest code whose rate is not above `bps` (0 below 80 kbit/s)."""
    best = 0
    for code, rate in RATE_TABLE.items():
        if 0 < rate <= bps:
            best = code
    return best


# -- the nonce rules ---------------------------------------------------------------------
def step_shift(k: int) -> int:
    """Bit position (in the 30-bit integer) of the nonce field of the step k → k−1."""
    if not 1 <= k <= MAX_CODE:
        raise ValueError(f"no nonce field for the step from rate {k}")
    return 2 * (k - 1)


def reduce_nonce(nonce: int, old_code: int, new_code: int, rng: random.Random | None = None) -> int:
    """The nonce after a router lowers the rate from old_code to new_code: the fields of
    the steps old_code → … → new_code get fresh random bits, all others are kept."""
    if new_code > old_code:
        raise ValueError("a router may only lower the rate")
    rng = rng or random.Random()
    for k in range(new_code + 1, old_code + 1):
        shift = step_shift(k)
        nonce = (nonce & ~(3 << shift)) | (rng.getrandbits(2) << shift)
    return nonce & NONCE_MASK


def nonce_check_mask(code: int) -> int:
    """Bits of the nonce the sender compares for an approved code: the steps at or below it."""
    return (1 << (2 * code)) - 1 if code > 0 else 0


def nonce_matches(sent: int, echoed: int, code: int) -> bool:
    """Does an echo of `code` carry the nonce bits the sender chose for the steps below it?"""
    return ((sent ^ echoed) & nonce_check_mask(code)) == 0


def ttl_diff(ip_ttl: int, qs_ttl: int) -> int:
    """(IP TTL − QS TTL) mod 256: what the receiver echoes and the sender remembers."""
    return (ip_ttl - qs_ttl) & 0xFF


# -- the two options -------------------------------------------------------------------------
@dataclass(frozen=True)
class QsRequest:
    """The IPv4 option (type 25)."""
    func: int
    rate_code: int
    qs_ttl: int
    nonce: int
    reserved: int = 0

    @property
    def rate_bps(self) -> int:
        return code_to_bps(self.rate_code)

    def encode(self) -> bytes:
        return struct.pack("!BBBBI", IP_OPTION_TYPE, OPTION_LEN, (self.func << 4) | self.rate_code,
                           self.qs_ttl, ((self.nonce & NONCE_MASK) << 2) | (self.reserved & 3))

    @classmethod
    def decode(cls, body: bytes) -> "QsRequest":
        kind, length, fr, ttl, word = struct.unpack("!BBBBI", body[:OPTION_LEN])
        if kind != IP_OPTION_TYPE or length != OPTION_LEN:
            raise ValueError(f"not a Quick-Start IP option: type {kind}, length {length}")
        return cls(func=fr >> 4, rate_code=fr & 0x0F, qs_ttl=ttl, nonce=word >> 2, reserved=word & 3)


@dataclass(frozen=True)
class QsResponse:
    """The TCP option (kind 27)."""
    rate_code: int
    ttl_diff: int
    nonce: int
    reserved: int = 0

    @property
    def rate_bps(self) -> int:
        return code_to_bps(self.rate_code)

    def encode(self) -> bytes:
        return struct.pack("!BBBBI", TCP_OPTION_KIND, OPTION_LEN, self.rate_code & 0x0F, self.ttl_diff,
                           ((self.nonce & NONCE_MASK) << 2) | (self.reserved & 3))

    @classmethod
    def decode(cls, body: bytes) -> "QsResponse":
        kind, length, rate, diff, word = struct.unpack("!BBBBI", body[:OPTION_LEN])
        if kind != TCP_OPTION_KIND or length != OPTION_LEN:
            raise ValueError(f"not a Quick-Start response option: kind {kind}, length {length}")
        return cls(rate_code=rate & 0x0F, ttl_diff=diff, nonce=word >> 2, reserved=word & 3)


def find_request(ip_options: bytes) -> QsRequest | None:
    body = find_option(ip_options, IP_OPTION_TYPE)
    return QsRequest.decode(body) if body is not None and len(body) == OPTION_LEN else None


def find_response(tcp_options: bytes) -> QsResponse | None:
    body = find_option(tcp_options, TCP_OPTION_KIND)
    return QsResponse.decode(body) if body is not None and len(body) == OPTION_LEN else None


# -- sender's decision and Equation 1 ---------------------------------------------------------
@dataclass(frozen=True)
class SentRequest:
    """What a sender remembers of its request."""
    rate_code: int
    ttl_diff: int
    nonce: int


def validate_response(sent: SentRequest, echo: QsResponse) -> str:
    """The sender's verdict: 'approved', 'rejected', 'ttl-mismatch', 'nonce-mismatch' or
    'rate-above-request' (RFC 4782 §4.3)."""
    if echo.rate_code == 0:
        return "rejected"
    if echo.rate_code > sent.rate_code:
        return "rate-above-request"
    if echo.ttl_diff != sent.ttl_diff:
        return "ttl-mismatch"
    if not nonce_matches(sent.nonce, echo.nonce, echo.rate_code):
        return "nonce-mismatch"
    return "approved"


def qs_window_segments(rate_bps: float, rtt_s: float, mss: int, header_bytes: int) -> float:
    """Equation 1 of RFC 4782 §4.6.1: cwnd = rate × RTT × MSS / (MSS + H), in segments."""
    return rate_bps / 8 * rtt_s * mss / (mss + header_bytes) / mss


def router_decision(rate_code: int, approved_bps: float) -> tuple[str, int]:
    """('approve' | 'reduce' | 'reject', new code) for a request and the rate a router grants."""
    code = min(rate_code, bps_to_code(approved_bps))
    if code == 0:
        return "reject", 0
    return ("approve", code) if code == rate_code else ("reduce", code)
