"""The stacks' catalogue and contract, without a network: names, choices, pins, starts."""
from __future__ import annotations

import re

import pytest

from hosts.stacks import STACKS, stack
from hosts.stacks.contract import last_json, pinned
from hosts.stacks.quicgo import GO_MOD, pinned as go_pinned


def test_an_unknown_stack_or_controller_names_the_valid_choices():
    with pytest.raises(ValueError, match=r"unknown QUIC stack 'quiche' \(known: aioquic, cfquiche, ngtcp2, quicgo, s2n\)"):
        stack("quiche")
    with pytest.raises(ValueError, match=r"quicgo has no congestion control 'cubic' \(it has: reno\)"):
        STACKS["quicgo"].start("cubic")


def test_every_stack_offers_its_default_and_starts_within_rfc9002s_bounds():
    for s in STACKS.values():
        assert s.default_cc in s.controllers
        for cc in s.controllers:
            start = s.start(cc)
            # RFC 9002 7.2 allows more than its default; no stack here starts below 2 datagrams.
            assert start.iw_bytes >= 2 * start.datagram_bytes and start.source
        assert s.qlog_serialisation in ("JSON", "JSON-SEQ", "")


def test_every_stack_pins_an_exact_version():
    for s in STACKS.values():
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", s.pin()), (s.name, s.pin())
    assert pinned("aioquic") == STACKS["aioquic"].pin() and go_pinned() in GO_MOD.read_text()


def test_a_client_report_is_its_last_json_line():
    assert last_json('noise\n{"ok": true, "bytes": 5}\n') == {"ok": True, "bytes": 5}
    assert last_json("no report at all") is None
