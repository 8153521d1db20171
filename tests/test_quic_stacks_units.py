"""The stacks' catalogue and contract, without a network: names, choices, pins, starts."""
from __future__ import annotations

import re

import pytest

from hosts.stacks import STACKS, stack
from hosts.stacks.contract import Fetched, pinned
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


def test_a_fetch_is_judged_by_the_clients_last_json_line_its_exit_and_the_size(tmp_path):
    s = STACKS["cfquiche"]
    line = '{"ok": true, "bytes": 5, "fct_s": 0.25}'
    assert s.fetched(f"noise\n{line}\n", 0, 5, tmp_path) == Fetched(True, 5, 0.25, "")
    assert not s.fetched(f"{line}\n", 0, 6, tmp_path).ok          # short of the size asked
    assert not s.fetched(f"{line}\n", 1, 5, tmp_path).ok          # the client failed
    gone = s.fetched("no report at all", 2, 5, tmp_path)
    assert not gone.ok and gone.error.startswith("no report (exit 2)")


def _datagrams(times_ms: list[float], server: str = "10.0.0.2") -> list:
    from hosts.quic.quic_net import Datagram
    return [Datagram(t / 1e3, server, "10.0.0.1", 4433, 5000, 1200, False) for t in times_ms]


def test_rounds_are_cut_at_the_path_rtt_and_their_bursts_counted():
    from hosts.quic.quic_net import bursts, first_rounds
    assert bursts([0.0, 50e-6, 99e-6, 300e-6, 1e-3, 1.05e-3]) == [3, 1, 2]
    # Ten at once; then twenty, one every 2 ms; then forty in two bursts of twenty.
    times = [i * 0.01 for i in range(10)] + [50 + 2 * i for i in range(20)] + \
            [100 + i * 0.01 for i in range(20)] + [130 + i * 0.01 for i in range(20)]
    r = first_rounds(_datagrams(times), "10.0.0.2", 1200, 0.05)
    assert [x["datagrams"] for x in r] == [10, 20, 40]
    assert [x["largest_burst"] for x in r] == [10, 1, 20] and [x["bursts"] for x in r] == [1, 20, 2]
    assert r[1]["span_ms"] == 38.0 and r[1]["median_gap_ms"] == 2.0 and r[2]["median_gap_ms"] == 29.81


def test_a_round_is_paced_when_spread_over_a_quarter_rtt_in_bursts_of_at_most_a_quarter():
    from hosts.quic.quic_net import rounds_paced
    def rnd(n, span, largest):
        return {"datagrams": n, "span_ms": span, "largest_burst": largest}
    first = rnd(10, 0.3, 10)                  # the first flight is not judged
    assert rounds_paced([first, rnd(20, 40, 3), rnd(40, 45, 10)], 0.05)
    assert not rounds_paced([first, rnd(20, 2.7, 3), rnd(40, 45, 10)], 0.05)      # ack-clocked, at once
    assert not rounds_paced([first, rnd(20, 40, 3), rnd(40, 45, 11)], 0.05)       # a burst too large
    assert not rounds_paced([first], 0.05)


def test_a_stack_variant_declares_its_controller_and_needs_transport_stack():
    from hosts.implementations.stack import IMPLEMENTATION, controller, stack_choice
    from hosts.implementations.base import InstallContext
    from hosts.variants import load_catalogue
    from hosts.workloads import competing
    from topologies.endhosts import EndHostDefaults
    variants = load_catalogue()
    stacks = {n: v for n, v in variants.items() if v.declared("server", EndHostDefaults()).transport == "stack"}
    # One variant per stack, in its default controller, named <stack>-<controller>.
    assert sorted(stacks) == sorted(f"{s.name}-{s.default_cc}" for s in STACKS.values())
    go = variants["quicgo-reno"]
    assert go.declared("server", EndHostDefaults()).cc == ("reno",)
    args = go.endpoint_args("client", InstallContext())
    assert stack_choice(args) == ("quicgo", "reno")
    with pytest.raises(ValueError, match=r"quicgo has no congestion control 'cubic' \(it has: reno\)"):
        controller({"stack": "quicgo", "cc": "cubic"})
    assert "quicgo has no congestion control" in IMPLEMENTATION.unavailable("server", {"stack": "quicgo", "cc": "bbr"})
    w = competing.WORKLOAD
    params = {**{k: p.default for k, p in w.params.items()}, "transport": "stack"}
    assert w.check_variant(params, go) is None
    assert w.check_variant(params, variants["cubic-iw10"], "long_variant") is None
    assert "not a QUIC stack's variant" in w.check_variant(params, variants["quic-cubic-iw32"])
    assert "long flow is kernel TCP's" in w.check_variant(params, go, "long_variant")
    assert "a QUIC stack's variant: it needs the workload's transport: stack" in \
        w.check_variant({**params, "transport": "tcp"}, go)
    assert w.check({**params, "prior_bytes": 1000})[0] == "prior_bytes"
