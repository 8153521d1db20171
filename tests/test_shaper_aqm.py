"""The kernel's AQM shapers (links/shapers/aqm.py): declared by their modules, named by
scenarios and --shaper, refused with the reason where the kernel lacks the qdisc, and (on the
virtual clock, in Debian's stock kernel) CoDel holding a bulk flow's standing queue near its
target where tbf's FIFO fills, dropping or, with ECN, marking; the delay line's own CoDel
beside it on the same path."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from links import shapers
from links.shapers.aqm import marks
from machine.errors import UserError

SMOKE = (Path(__file__).resolve().parent.parent / "scenarios" / "smoke.yaml").read_text()


def test_each_aqm_is_a_shaper_kind_with_its_rfc_defaults():
    for kind in ("codel", "fq_codel", "pie", "cake"):
        assert kind in shapers.registry() and kind in shapers.cli_choices()
    assert shapers.from_cli("codel").describe() == {"kind": "codel", "target_ms": 5.0, "interval_ms": 100.0,
                                                    "ecn": False}
    assert shapers.from_cli("pie").describe() == {"kind": "pie", "target_ms": 15.0, "tupdate_ms": 15.0, "ecn": False}
    assert shapers.from_cli("cake").describe()["ecn"] is True            # CAKE always marks
    fq = shapers.registry()["fq_codel"](ecn=True, target_ms=2)
    assert fq.child_args((100, 151400)) == ("fq_codel", "limit", "100", "target", "2ms", "interval", "100ms", "ecn")
    assert shapers.registry()["cake"]().child_args((100, 151400)) == (
        "cake", "unlimited", "besteffort", "memlimit", "151400", "rtt", "100ms")


def test_a_scenario_names_an_aqm_with_its_fields_and_a_bad_field_names_the_choices(tmp_path):
    from scenarios.spec import load_scenario
    path = tmp_path / "s.yaml"
    path.write_text(SMOKE + "shaper:\n  kind: codel\n  target_ms: 2\n  ecn: true\n")
    assert load_scenario(path).shaper.describe() == {"kind": "codel", "target_ms": 2.0, "interval_ms": 100.0,
                                                     "ecn": True}
    path.write_text(SMOKE + "shaper:\n  kind: codel\n  tupdate_ms: 2\n")
    with pytest.raises(UserError, match="tupdate_ms"):
        load_scenario(path)
    path.write_text(SMOKE + "shaper:\n  kind: red-codel\n")
    with pytest.raises(UserError, match="cake, codel, delayline, fq_codel, htb, pie, tbf"):
        load_scenario(path)


def test_marks_are_read_from_each_qdiscs_own_counters():
    assert marks([{"kind": "codel", "ecn_mark": 7}, {"kind": "pie", "ecn_mark": 2}]) == 9
    assert marks([{"kind": "cake", "tins": [{"ecn_marked_packets": 3}, {"ecn_marked_packets": 1}]}]) == 4
    assert marks([{"kind": "fq_codel"}]) == 0


@pytest.mark.root
@pytest.mark.usefixtures("clean_machine")
def test_a_kernel_without_the_qdisc_refuses_the_run_with_the_reason(tmp_path):
    from machine.capabilities import probe_qdisc
    from links.profiles import LinkProfile
    from topologies.network import Network
    if probe_qdisc("codel"):
        pytest.skip("this kernel has sch_codel (the virtual clock's test below uses it)")
    profile = LinkProfile(name="test-aqm", down_mbps=20, up_mbps=20, rtt_ms=40, buffer_pkts=200)
    with pytest.raises(UserError, match=r"needs the kernel's sch_codel.*--clock virtual"):
        with Network(profile, tmp_path, shaper=shapers.from_cli("codel")):
            pass


def _standing_queue(tmp_path: Path, shaper, ecn: bool) -> tuple[float, dict, dict]:
    """A bulk TCP flow down a 20 Mbit/s, 40 ms path with a 200-packet buffer (121 ms at the
    rate) for 8 s, pinged every 50 ms: the median ping RTT over the flow's last 4 s, the down
    queue's counters over those seconds, and its settings as installed."""
    from hosts.apps import Iperf3Server
    from hosts.ping import ping_rtts
    from hosts.process import NodeProcess
    from links.profiles import LinkProfile
    from topologies.network import Network
    from machine.shell import check_cmd
    profile = LinkProfile(name="test-aqm", down_mbps=20, up_mbps=20, rtt_ms=40, buffer_pkts=200)
    with Network(profile, tmp_path, shaper=shaper) as net:
        n = net.names
        client = net.host(n.client(1))
        if ecn:                 # the client asks for ECN; the server's default (2) accepts it
            check_cmd(client, "sysctl -qw net.ipv4.tcp_ecn=1")
        down = next(q for q in net.queues if q.direction == "down")
        server = Iperf3Server(net.host(n.server(1)), tmp_path, net.instance)
        flow = NodeProcess(client, ["iperf3", "-c", n.server_ip(1), "-R", "-t", "9"], net.instance, "iperf3 bulk",
                           log_path=tmp_path / "bulk.log")
        try:
            time.sleep(4.0)
            c0 = net.shaper.counters(net, down)
            rtts = ping_rtts(client, n.server_ip(1), count=80, interval_s=0.05)
            c1 = net.shaper.counters(net, down)
        finally:
            flow.stop()
            server.stop()
    return statistics.median(rtts), {k: c1[k] - c0[k] for k in c1}, down.settings


@pytest.mark.root
@pytest.mark.virtual_clock
@pytest.mark.usefixtures("clean_machine")
def test_codel_holds_the_standing_queue_near_its_target_where_the_fifo_fills(tmp_path):
    fifo_rtt, fifo, _ = _standing_queue(tmp_path / "fifo", shapers.from_cli("tbf"), ecn=False)
    codel_rtt, codel, settings = _standing_queue(tmp_path / "codel", shapers.from_cli("codel"), ecn=False)
    marked_rtt, marked, _ = _standing_queue(tmp_path / "ecn", shapers.registry()["codel"](ecn=True), ecn=True)
    # The delay line's CoDel (RFC 8289 written here) on the same path and flow.
    line_rtt, line, line_settings = _standing_queue(tmp_path / "line", shapers.from_cli("delayline:codel"), ecn=False)
    print(f"median ping RTT under a bulk flow: FIFO {fifo_rtt:.1f} ms, CoDel {codel_rtt:.1f} ms, "
          f"CoDel with ECN {marked_rtt:.1f} ms, the delay line's CoDel {line_rtt:.1f} ms; drops/marks over 4 s: "
          f"FIFO {fifo}, CoDel {codel}, ECN {marked}, the delay line's CoDel {line}")
    # As the kernel reports it, not as asked: CoDel under tbf with the profile's buffer.
    assert settings["qdisc"] == "codel" and settings["qdisc_options"]["limit"] == 200
    # The FIFO: CUBIC fills the 200-packet buffer (121 ms at 20 Mbit/s) and loses at its end.
    assert fifo_rtt > 40 + 60 and fifo["dropped"] > 0
    # CoDel: the sojourn time held at its 5 ms target (plus a packet and the interval's
    # overshoot), by drops; with ECN, by marks and (nearly) no drops.
    assert codel_rtt < 40 + 20 and codel["dropped"] > 0 and codel["marked"] == 0
    assert marked_rtt < 40 + 20 and marked["marked"] > 0 and marked["dropped"] <= marked["marked"] // 10
    # The delay line's CoDel holds the queue as the kernel's does, by drops.
    assert line_settings["policy"] == "codel" and line_settings["aqm"] == {"target_ms": 5.0, "interval_ms": 100.0,
                                                                             "ecn": False}
    assert line_rtt < 40 + 20 and line["dropped"] > 0 and line["marked"] == 0
