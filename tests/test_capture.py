"""Root integration: a capture's counters say exactly what its file misses.

tcpdump counts as "received by filter" the packets that reached its socket before libpcap
attached the kernel filter; libpcap then filters those in user space, so one of another
protocol stays counted and is never written. Read as "unwritten", it made a capture that
had written everything look behind for the whole drain.
"""
from __future__ import annotations

from hosts.apps import HTTP_PORT, Lighttpd, curl_fetch, make_object
from hosts.capture import drain, not_exact, start_captures
from hosts.process import NodeProcess, wait_until
from links.profiles import LinkProfile
from topologies.network import Network
from wiretrace import read_pcap

import pytest

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]


def test_packets_before_the_filter_are_not_counted_as_unwritten(tmp_path):
    prof = LinkProfile(name="cap-test", down_mbps=200, up_mbps=200, rtt_ms=10, buffer_pkts=100)
    with Network(prof, tmp_path / "net") as net:
        n = net.names
        sv, cl = net.host(n.server(1)), net.host(n.client(1))
        router, intf = net.host(n.router(1)), f"{n.router(1)}-eth1"
        inst = net.instance
        url = make_object(tmp_path / "www", 200_000)
        (tmp_path / "sv").mkdir()
        server = Lighttpd(sv, n.server_ip(1), tmp_path / "www", tmp_path / "sv", inst)
        # ICMP through the capture point while tcpdump starts: some of it reaches the
        # socket before its "tcp" filter does.
        flood = NodeProcess(cl, ["ping", "-n", "-q", "-f", "-l", "1000", n.server_ip(1)], inst, "ping flood",
                            log_path=tmp_path / "ping.log")
        captures = []

        def sent() -> int:
            return int(router.cmd(f"cat /sys/class/net/{intf}/statistics/tx_packets"))
        try:
            flowing = sent() + 500
            assert wait_until(lambda: sent() > flowing, 10), "the ping flood did not start"
            # The window before the filter is short: start captures until one of them saw it.
            while len(captures) < 10 and not any(c.before_filter for c in captures):
                captures += start_captures([(router, intf, tmp_path / f"cap{len(captures)}.pcap")], inst)
            flood.stop()
            got = curl_fetch(cl, f"http://{n.server_ip(1)}:{HTTP_PORT}{url}", tmp_path, inst, 30)
            assert got["http_code"] == 200, got
            waited = drain(captures, max_s=20)
            stats = [c.stop() for c in captures]
        finally:
            flood.stop()
            server.stop()
            for c in captures:
                c.proc.stop()
    print(f"capture counters {stats}, drained in {waited:.2f} s")
    assert any(s["before_filter"] for s in stats), "the flood put no packet before a filter: not exercised"
    assert not not_exact(stats) and all(s["unwritten"] == 0 for s in stats), stats
    assert waited < 20, "the drain waited for packets that were never to be written"
    for s in stats:
        written = read_pcap(tmp_path / s["file"])
        assert s["captured"] == len(written) and all(HTTP_PORT in (p.sport, p.dport) for p in written)
        assert sum(p.payload for p in written if p.sport == HTTP_PORT) >= 200_000
