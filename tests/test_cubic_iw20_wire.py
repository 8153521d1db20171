"""Root integration test: CUBIC-IW20, a scheme that is no more than a congestion control of
its own, on the wire. The variant is defined here (no catalogue line); the network, the
fetch and the capture are those of the Jump Start and Blitzstart wire tests."""
from __future__ import annotations

import pytest

from hosts import variants as variants_module
from hosts.variants import RolePart, Variant
from test_bpf_startup import assert_baseline_untouched, fetch_pair, profile
from timing import timing_check
from wire.blitzstart import decode_option

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

IW = 20


def test_cubic_iw20_sends_twenty_segments_before_the_first_ack(tmp_path, monkeypatch):
    impl = variants_module.IMPLEMENTATIONS["cubic-iw20"]
    variant = Variant("cubic-iw20", "CUBIC from 20 segments", {"server": RolePart(impl, impl.resolve({}))})
    monkeypatch.setitem(variants_module.VARIANTS, variant.name, variant)
    run = fetch_pair(tmp_path, variant.name, 200_000, profile(rate_mbps=20, rtt_ms=40))
    assert run["loaded"]
    counters = run["counters"]["server"]
    assert counters["cc_set"] == 1 and counters["errors"] == 0, counters
    test = run["test"]
    assert decode_option(test.syn.tcp_options) is None
    # ~140 segments to send: the first flight is the window, no more than it whatever the host,
    # all of it before the first ACK where the burst reached the capture within the RTT.
    assert len(test.before_ack) <= IW, f"first flight {len(test.before_ack)} segments, window {IW}"
    timing_check("the initial window of 20 all before the first ACK", run["delay_flags"],
                 len(test.before_ack) == IW, f"{len(test.before_ack)} segments before the first ACK")
    assert_baseline_untouched(run)
    assert run["counters"]["after_remove"] is None, "remove left the server's entry in the map"
