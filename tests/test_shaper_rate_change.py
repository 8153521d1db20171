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
        registry()["delayline"]().set_rate(None, None, 1e6, 3028, 20)


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


def queue_frames_shown(net: Network, queue) -> float:
    """The queue's limit in full-size frames as the kernel shows it: htb's pfifo its packets,
    tbf its latency (limit minus bucket, at the rate; tc rounds it to the millisecond)."""
    shown = net.host(queue.node).cmd(f"tc qdisc show dev {queue.intf}")
    fifo = re.search(r"pfifo 10: .*limit (\d+)p", shown)
    if fifo:
        return int(fifo.group(1))
    tbf = re.search(r"rate (\d+)([KMG]?)bit burst (\d+)b.* lat ([\d.]+)(ms|us|s)", shown)
    assert tbf, shown
    rate = int(tbf.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[tbf.group(2)]
    lat = float(tbf.group(4)) * {"s": 1, "ms": 1e-3, "us": 1e-6}[tbf.group(5)]
    return (lat * rate / 8 + int(tbf.group(3))) / net.profile.frame_bytes


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
@pytest.mark.parametrize("shaper", ["tbf", "htb"])
def test_a_path_change_may_give_the_new_path_its_own_buffer_and_restoring_brings_the_profiles_back(tmp_path, shaper):
    """A move to another access network changes the buffer with the rate: the queue's limit,
    as the kernel shows it, is the new path's; restore_rates() puts the profile's back."""
    prof = test_profile("test-rebuffer", 20, 10)
    with Network(prof, tmp_path / "net", shaper=registry()[shaper]()) as net:
        queue = next(q for q in net.queues if q.direction == "down")
        assert abs(queue_frames_shown(net, queue) - prof.buffer_packets("down")) <= 1
        net.set_rate("down", 2e6, buffer_pkts=25)
        assert abs(queue_frames_shown(net, queue) - 25) <= 1, net.rate_changes
        assert net.rate_changes[-1]["buffer_packets"] == 25
        net.set_rate("down", 1e6)                  # the buffer is kept where none is given
        assert abs(queue_frames_shown(net, queue) - 25) <= 1, net.rate_changes
        net.restore_rates()
        assert abs(queue_frames_shown(net, queue) - prof.buffer_packets("down")) <= 1, net.rate_changes
        assert net.rate_changes[-1] == {**net.rate_changes[-1], "rate_bps": prof.rate_bps("down"),
                                        "buffer_packets": prof.buffer_packets("down"), "restored": True}
