"""Root: the Quick-Start tc programs in the kernel, without a network. Each object is loaded
into a bpffs of the test's own (mounted in its tmp_path, unmounted after), and:

- what the verifier had to walk stays small: every test and campaign that uses Quick-Start
  pays it once per host and router, and a guest on the virtual clock pays it in instructions
  (measured in a guest: 1.5 s per router before the option parser's loop lost its counter);
- the client's receiver, run on crafted frames (BPF_PROG_TEST_RUN through `bpftool prog
  run`), finds the request in an IPv4 option list exactly where the Python codec does
  (wire/quickstart.find_request): after no-ops and other options, not after end-of-list or a
  malformed length, and records its rate, TTL difference and nonce.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import struct
import subprocess
from pathlib import Path

import pytest

import pcapcraft
from hosts.bpf import loader
from wire import quickstart as qs

pytestmark = [pytest.mark.root]

# The verifier's limit is 1,000,000 instructions a program; these programs took 8,293
# (receiver) and 27,715 (router) on 6.18 after the change, 164,865 and 287,589 before.
VERIFIED_MAX = 60_000
CLIENT, SERVER = "10.0.0.1", "10.0.0.2"
IP_TTL = 64                       # what pcapcraft frames carry


@pytest.fixture
def bpffs(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    loader.build()
    where = tmp_path / "bpffs"
    where.mkdir()
    subprocess.run(["mount", "-t", "bpf", "stl-test-bpffs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def load(obj: Path, where: Path) -> dict[str, int]:
    """Load every program of `obj` pinned under `where`; each program's instructions
    verified, from the verifier's log (bpftool -d prints libbpf's and the kernel's)."""
    where.mkdir()
    out = subprocess.run([loader.bpftool_path(), "-d", "prog", "loadall", str(obj), str(where),
                          "type", "classifier", "pinmaps", str(where)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    verified, prog = {}, None
    for line in out.stderr.splitlines():
        if m := re.search(r"prog '(\w+)': -- BEGIN PROG LOAD LOG --", line):
            prog = m.group(1)
        elif (m := re.match(r"processed (\d+) insns", line)) and prog:
            verified[prog] = int(m.group(1))
            prog = None
    return verified


def option_lists() -> list[bytes]:
    """The cases: the request among others, behind up to 32 no-ops, behind end-of-list or a
    length below 2, a Report (function 8) rather than a request, none; then random lists."""
    req = qs.QsRequest(qs.FUNC_REQUEST, 7, 0x30, 0x2AAAAAAA).encode()
    cases = [req, bytes([1] * 32) + req, bytes([1, 1]) + bytes([7, 3, 4]) + req,
             bytes([0]) + req, bytes([130, 1]) + req, bytes([7, 11]) + bytes(9) + req,
             qs.QsRequest(qs.FUNC_REPORT, 3, 0, 0).encode(), bytes([1, 1, 1, 1])]
    rng = random.Random(4782)
    while len(cases) < 40:
        parts: list[bytes] = []
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.5:
                parts.append(bytes([1]) * rng.randint(1, 6))
            else:
                body = rng.randint(0, 6)
                parts.append(bytes([rng.choice([7, 68, 130, 148]), body + 2]) + bytes(rng.randrange(256) for _ in range(body)))
        parts.insert(rng.randint(0, len(parts)),
                     qs.QsRequest(qs.FUNC_REQUEST, rng.randint(1, 15), rng.randrange(256), rng.getrandbits(30)).encode())
        opts = b"".join(parts)
        if len(opts) <= 40:
            cases.append(opts)
    return cases


def test_the_quick_start_programs_stay_cheap_to_verify(bpffs: Path) -> None:
    verified = {**load(loader.QS_HOST_OBJECT, bpffs / "host"), **load(loader.QS_ROUTER_OBJECT, bpffs / "router")}
    assert {"stl_qs_sender", "stl_qs_receiver", "stl_qs_router"} <= set(verified), verified
    assert all(n <= VERIFIED_MAX for n in verified.values()), verified


def test_the_receiver_finds_the_request_where_the_codec_does(bpffs: Path) -> None:
    pins = bpffs / "host"
    load(loader.QS_HOST_OBJECT, pins)
    loader.write_qs_host(pins, CLIENT, 0)
    cases = option_lists()
    expected = {}
    for i, opts in enumerate(cases):
        port = 40000 + i
        data = bpffs.parent / f"frame-{i}"
        # A SYN-ACK from the server to the client with the options.
        data.write_bytes(pcapcraft.frame(pcapcraft.Packet(0.0, SERVER, CLIENT, 80, port, 1, 1,
                                                          pcapcraft.SYN | pcapcraft.ACK, ip_options=opts)))
        loader.bpftool("prog", "run", "pinned", str(pins / "stl_qs_receiver"), "data_in", str(data))
        req = qs.find_request(opts)
        if req is not None and req.func == qs.FUNC_REQUEST:
            expected[port] = (req.rate_code, qs.ttl_diff(IP_TTL, req.qs_ttl), req.nonce)
    recorded = {}
    for row in loader.bpftool("map", "dump", "pinned", str(pins / "stl_qs_recv"), as_json=True) or []:
        key, val = bytes(int(b, 16) for b in row["key"]), bytes(int(b, 16) for b in row["value"])
        port = struct.unpack("!H", key[8:10])[0]
        rate, diff, nonce, _ = struct.unpack("<4I", val)
        recorded[port] = (rate, diff, nonce)
    assert len(expected) >= 25 and len(expected) < len(cases)       # both outcomes are exercised
    assert recorded == expected, {p: (cases[p - 40000].hex(), recorded.get(p), expected.get(p))
                                  for p in set(recorded) | set(expected) if recorded.get(p) != expected.get(p)}
