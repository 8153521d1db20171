"""The Quick-Start codec (analysis/quickstart.py) against RFC 4782's definitions."""
from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from analysis import quickstart as qs_capture
from wire import quickstart as qs

# RFC 4782 §3.1: the rate table, code → bit/s.
RFC_TABLE = {0: 0, 1: 80_000, 2: 160_000, 3: 320_000, 4: 640_000, 5: 1_280_000, 6: 2_560_000,
             7: 5_120_000, 8: 10_240_000, 9: 20_480_000, 10: 40_960_000, 11: 81_920_000,
             12: 163_840_000, 13: 327_680_000, 14: 655_360_000, 15: 1_310_720_000}


@pytest.mark.parametrize("code,bps", sorted(RFC_TABLE.items()))
def test_every_rate_code(code, bps):
    assert qs.code_to_bps(code) == bps
    assert qs.RATE_TABLE[code] == bps
    if code:
        assert qs.bps_to_code(bps) == code            # exact rate → its code
        assert qs.bps_to_code(bps * 2 - 1) == code    # the largest code not above
        assert qs.bps_to_code(bps - 1) == code - 1


def test_rate_code_bounds():
    with pytest.raises(ValueError):
        qs.code_to_bps(16)
    assert qs.bps_to_code(79_999) == 0
    assert qs.bps_to_code(10e12) == 15
    assert qs.bps_to_code(10e6) == 7          # the Linux paper's q = 5.12 Mbit/s on 10 Mbit/s


def test_request_option_bytes():
    req = qs.QsRequest(func=qs.FUNC_REQUEST, rate_code=7, qs_ttl=0xAB, nonce=0x2AAAAAAA)
    raw = req.encode()
    assert raw == bytes([25, 8, 0x07, 0xAB]) + (0x2AAAAAAA << 2).to_bytes(4, "big")
    assert qs.QsRequest.decode(raw) == req
    report = qs.QsRequest(func=qs.FUNC_REPORT, rate_code=3, qs_ttl=0, nonce=0)
    assert report.encode()[2] == 0x83


def test_response_option_bytes():
    resp = qs.QsResponse(rate_code=9, ttl_diff=200, nonce=(1 << 30) - 1)
    raw = resp.encode()
    assert raw == bytes([27, 8, 9, 200, 0xFF, 0xFF, 0xFF, 0xFC])
    assert qs.QsResponse.decode(raw) == resp


def test_find_options_among_others():
    req = qs.QsRequest(0, 5, 17, 12345).encode()
    assert qs.find_request(bytes([1, 1]) + bytes([7, 3, 4]) + req) == qs.QsRequest(0, 5, 17, 12345)
    assert qs.find_request(bytes([0]) + req) is None                  # after end-of-list
    tcp = bytes([2, 4, 5, 0xB4, 1, 1, 8, 10]) + bytes(8) + qs.QsResponse(4, 3, 99).encode()
    assert qs.find_response(tcp) == qs.QsResponse(4, 3, 99)
    assert qs.find_response(bytes([2, 4, 5, 0xB4])) is None


def test_nonce_field_positions():
    """Bits 0-1 (most significant of 30) are the step 15 → 14, bits 28-29 the step 1 → 0."""
    assert qs.step_shift(15) == 28
    assert qs.step_shift(1) == 0
    with pytest.raises(ValueError):
        qs.step_shift(0)


@pytest.mark.parametrize("old,new", [(15, 14), (15, 0), (7, 3), (9, 8), (1, 0), (5, 5)])
def test_reduction_rerandomises_only_the_skipped_steps(old, new):
    rng = random.Random(4782)
    nonce = rng.getrandbits(30)
    changed_mask = 0
    for _ in range(200):                                  # over many draws, every skipped field moves
        out = qs.reduce_nonce(nonce, old, new, rng)
        changed_mask |= out ^ nonce
        kept = qs.nonce_check_mask(new) | ~((1 << (2 * old)) - 1) & qs.NONCE_MASK
        assert (out ^ nonce) & kept == 0                  # steps ≤ new and > old untouched
        assert qs.nonce_matches(nonce, out, new)          # so the sender still accepts `new`
    skipped = ((1 << (2 * old)) - 1) & ~qs.nonce_check_mask(new)
    assert changed_mask == skipped


def test_reduction_must_lower():
    with pytest.raises(ValueError):
        qs.reduce_nonce(0, 3, 4)


def test_receiver_claiming_more_than_approved_is_caught():
    """A lying receiver that reports the original code after a reduction fails the check
    unless it guessed every re-randomised field (probability 4^-steps)."""
    rng = random.Random(1)
    caught = 0
    for _ in range(400):
        sent = rng.getrandbits(30)
        reduced = qs.reduce_nonce(sent, 9, 6, rng)
        if not qs.nonce_matches(sent, reduced, 9):
            caught += 1
    assert caught >= 400 * (1 - 4 ** -3) - 20


def test_sender_validation():
    sent = qs.SentRequest(rate_code=7, ttl_diff=qs.ttl_diff(64, 180), nonce=0x1234567)
    ok = qs.QsResponse(7, qs.ttl_diff(64 - 3, 180 - 3), 0x1234567)      # 3 QS routers
    assert qs.validate_response(sent, ok) == "approved"
    reduced = qs.QsResponse(5, sent.ttl_diff, qs.reduce_nonce(sent.nonce, 7, 5))
    assert qs.validate_response(sent, reduced) == "approved"
    non_qs = qs.QsResponse(7, qs.ttl_diff(64 - 3, 180 - 2), 0x1234567)  # one router ignored it
    assert qs.validate_response(sent, non_qs) == "ttl-mismatch"
    assert qs.validate_response(sent, qs.QsResponse(0, sent.ttl_diff, 0)) == "rejected"
    assert qs.validate_response(sent, qs.QsResponse(8, sent.ttl_diff, sent.nonce)) == "rate-above-request"
    lied = qs.QsResponse(5, sent.ttl_diff, sent.nonce ^ 0b01)
    assert qs.validate_response(sent, lied) == "nonce-mismatch"


def test_ttl_diff_wraps():
    assert qs.ttl_diff(10, 250) == 16


def test_equation_1():
    # 5.12 Mbit/s over 200 ms with MSS 1448 and 52 bytes of headers: 85.3 segments
    assert qs.qs_window_segments(5.12e6, 0.2, 1448, 52) == pytest.approx(128_000 / 1500)


def test_router_decision():
    assert qs.router_decision(7, 6e6) == ("approve", 7)
    assert qs.router_decision(7, 3e6) == ("reduce", 6)
    assert qs.router_decision(7, 50e3) == ("reject", 0)


def test_c_header_and_loader_agree_on_the_quick_start_layouts():
    import re
    import struct as st
    from hosts.bpf import loader
    header = (Path(__file__).resolve().parent.parent / "hosts" / "bpf" / "stl_common.h").read_text()
    assert f"#define STL_QS_IPOPT {qs.IP_OPTION_TYPE}" in header
    assert f"#define STL_QS_TCPOPT {qs.TCP_OPTION_KIND}" in header
    assert "#define STL_CLIENT_QS (1u << 3)" in header and loader.CLIENT_QS == 1 << 3
    assert "#define STL_SERVER_QS (1u << 4)" in header and loader.SERVER_QS == 1 << 4
    start = header.index("struct stl_qs_host {")
    fields = re.findall(r"^\s*__u32 (\w+);", header[start:header.index("};", start)], re.M)
    assert fields[:2] == ["rate_code", "after_idle"] and tuple(fields[2:]) == loader.QS_HOST_COUNTERS
    assert st.calcsize(loader.QS_HOST_FORMAT) == 4 * len(fields)
    start = header.index("struct stl_qs_router {")
    body = header[start:header.index("};", start)]
    n = len(loader.QS_ROUTER_COUNTERS)
    assert tuple(re.findall(r"^\s*__u64 (\w+);", body, re.M)[-n:]) == loader.QS_ROUTER_COUNTERS
    assert f"#define STL_QS_BUCKETS {loader.QS_ROUTER_BUCKETS} " in header


def test_router_config_packs_the_c_layout():
    from hosts.bpf import loader
    packed = loader.QsRouterConfig(capacity_bps=10_000_000, qs_thresh=0.9).pack()
    assert len(packed) == 1368                      # sizeof(struct stl_qs_router), as its BTF says
    assert struct.unpack("<IIQQIIIIQII", packed[:56]) == (0, 0, 10_000_000, 150_000_000, 5, 2, 900, 500,
                                                          150_000_000, 0, 0)
    packed = loader.QsRouterConfig(capacity_bps=1, approval_interval_ms=1500, extreme=True).pack()
    assert struct.unpack("<QI", packed[40:52]) == (1_500_000_000, 1)
    with pytest.raises(ValueError):
        loader.QsRouterConfig(capacity_bps=1, n_intervals=8).pack()
