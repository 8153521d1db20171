"""Changing a bottleneck's rate during a run (Network.set_rate): which shapers can. The
change itself is exercised on the wire by tests/test_careful_resume.py's stale state."""
from __future__ import annotations

import re

import pytest

from links.shapers import Shaper, registry
from machine.errors import UserError
from topologies.network import Network
from wiretrace import test_profile


def test_tbf_and_htb_can_change_their_rate():
    assert {k for k, c in registry().items() if c.set_rate is not Shaper.set_rate} >= {"tbf", "htb"}


def test_a_shaper_that_cannot_says_which_can():
    with pytest.raises(UserError, match="cannot change its rate during a run; choose one that can: .*tbf"):
        registry()["delayline"]().set_rate(None, None, 1e6, 3028)


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_a_rate_cut_resizes_the_burst_for_the_new_rate_read_back_from_the_kernel(tmp_path):
    """A bucket sized for 1 Gbit/s (frames that absorb a host stall at that rate) would pass
    them at line rate after an idle spell on a path cut to 1 Mbit/s: the change sizes it as
    for a path built at 1 Mbit/s."""
    with Network(test_profile("test-rate-cut", 1000, 10), tmp_path / "net") as net:
        queue = next(q for q in net.queues if q.direction == "down")
        before = queue.settings["burst_bytes"]
        net.set_rate("down", 1e6)
        shown = net.host(queue.node).cmd(f"tc qdisc show dev {queue.intf}")
        change = net.rate_changes[-1]
        assert change["burst_bytes"] < before, (change, before)
        rate = re.search(r"rate (\S+) burst (\d+)b", shown)
        assert rate and rate.group(1) == "1Mbit", shown
        # tc shows the bucket in bytes as the kernel keeps it (ticks rounded back to bytes)
        assert abs(int(rate.group(2)) - change["burst_bytes"]) <= 8, (shown, change)
