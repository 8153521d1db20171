"""The htb shaper (links/shapers/htb.py): found by its module alone, named by scenarios
and --shaper, and (root) delivering the profile's rate with its drops counted."""
import time

import pytest

from timing import timing_check
from links import shapers


def test_htb_is_a_shaper_kind_by_its_module_alone():
    assert "htb" in shapers.registry() and "htb" in shapers.cli_choices()
    assert shapers.from_cli("htb").describe() == {"kind": "htb"}


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_htb_delivers_the_configured_rate_and_counts_its_drops(tmp_path):
    from hosts.apps import Iperf3Server
    from hosts.process import NodeProcess
    from topologies.network import Network
    from links.profiles import LinkProfile
    profile = LinkProfile(name="test-htb", down_mbps=20, up_mbps=20, rtt_ms=10, buffer_pkts=100)
    with Network(profile, tmp_path, shaper=shapers.from_cli("htb")) as net:
        n = net.names
        assert net.applied()["shaper"]["kind"] == "htb"
        down = next(q for q in net.queues if q.direction == "down")
        server = Iperf3Server(net.host(n.server(1)), tmp_path, net.instance)
        client = NodeProcess(net.host(n.client(1)), ["iperf3", "-c", n.server_ip(1), "-R", "-u", "-b", "30M",
                                                     "-l", "1400", "-t", "7"], net.instance, "iperf3 udp",
                             log_path=tmp_path / "udp.log")
        try:
            time.sleep(1.0)
            c0, t0 = net.shaper.counters(net, down), time.monotonic()
            time.sleep(4.0)
            c1, t1 = net.shaper.counters(net, down), time.monotonic()
        finally:
            client.stop()
            server.stop()
    assert c1["dropped"] > c0["dropped"], (c0, c1)          # 1.5 × the rate: the FIFO overflows
    rate = (c1["sent_bytes"] - c0["sent_bytes"]) * 8 / (t1 - t0)
    timing_check("htb rate within 1 % at 20 Mbit/s", net.host_flags(), abs(rate / 20e6 - 1) <= 0.01,
                 f"{rate / 1e6:.3f} Mbit/s for 20 configured")
