"""The kernel's AQM shapers (links/shapers/aqm.py): declared by their modules, named by
scenarios and --shaper, refused with the reason where the kernel lacks the qdisc, and (on the
virtual clock, in Debian's stock kernel) CoDel holding a bulk flow's standing queue near its
target where tbf's FIFO fills, dropping or, with ECN, marking; the delay line's own CoDel
beside it on the same path."""
from __future__ import annotations

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


def test_drops_of_a_full_buffer_are_told_from_the_control_laws():
    """Each AQM's own counter of the drops its buffer's limit made (`tc -s -j`'s keys), and a
    queue's counts between two readings: None where the queue does not tell them apart."""
    from hosts.workloads.competing import queue_counts
    from links.shapers.aqm import overflows
    assert overflows([{"kind": "codel", "drops": 9, "drop_overlimit": 4},
                      {"kind": "fq_codel", "drop_overlimit": 1, "drop_overmemory": 2},
                      {"kind": "pie", "overlimit": 3, "dropped": 5}, {"kind": "cake", "drops": 8}]) == 10
    before = {"down": {"sent_bytes": 100, "sent_pkts": 1, "dropped": 2, "overflowed": 1, "marked": 0}}
    after = {"down": {"sent_bytes": 400, "sent_pkts": 3, "dropped": 7, "overflowed": 4, "marked": 6}}
    assert queue_counts(before, after) == {"sent_bytes": 300, "sent_pkts": 2, "dropped_pkts": 5,
                                           "overflowed_pkts": 3, "marked_pkts": 6}
    fifo = {"down": {"sent_bytes": 400, "sent_pkts": 3, "dropped": 7}}
    assert queue_counts({"down": {"sent_bytes": 0, "sent_pkts": 0, "dropped": 0}}, fifo)["overflowed_pkts"] is None


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


def _standing_queue(tmp_path: Path, shaper, ecn: bool):
    """A bulk TCP flow down a 20 Mbit/s, 40 ms path with a 200-packet buffer (121 ms at the
    rate), pinged every 50 ms over its last 4 s (scenarios/standing_queue.py)."""
    from links.profiles import LinkProfile
    from scenarios.standing_queue import standing_queue
    profile = LinkProfile(name="test-aqm", down_mbps=20, up_mbps=20, rtt_ms=40, buffer_pkts=200)
    return standing_queue(tmp_path, profile, shaper, ecn)


@pytest.mark.root
@pytest.mark.virtual_clock
@pytest.mark.usefixtures("clean_machine")
def test_codel_holds_the_standing_queue_near_its_target_where_the_fifo_fills(tmp_path):
    fifo = _standing_queue(tmp_path / "fifo", shapers.from_cli("tbf"), ecn=False)
    codel = _standing_queue(tmp_path / "codel", shapers.from_cli("codel"), ecn=False)
    marked = _standing_queue(tmp_path / "ecn", shapers.registry()["codel"](ecn=True), ecn=True)
    # The delay line's CoDel (RFC 8289 written here) on the same path and flow.
    line = _standing_queue(tmp_path / "line", shapers.from_cli("delayline:codel"), ecn=False)
    print(f"median ping RTT under a bulk flow: FIFO {fifo.rtt_ms['p50']:.1f} ms, CoDel {codel.rtt_ms['p50']:.1f} ms, "
          f"CoDel with ECN {marked.rtt_ms['p50']:.1f} ms, the delay line's CoDel {line.rtt_ms['p50']:.1f} ms; "
          f"drops/marks over 4 s: FIFO {fifo.counters}, CoDel {codel.counters}, ECN {marked.counters} "
          f"({marked.pings_lost} pings lost), the delay line's CoDel {line.counters}")
    # As the kernel reports it, not as asked: CoDel under tbf with the profile's buffer.
    assert codel.settings["qdisc"] == "codel" and codel.settings["qdisc_options"]["limit"] == 200
    # The FIFO: CUBIC fills the 200-packet buffer (121 ms at 20 Mbit/s) and loses at its end.
    assert fifo.rtt_ms["p50"] > 40 + 60 and fifo.counters["dropped"] > 0
    # CoDel: the sojourn time held at its 5 ms target (plus a packet and the interval's
    # overshoot), by drops; with ECN, by marking the flow's segments. A signal due when the
    # head is a ping's reply (not ECN-capable) still drops it: with 2-3 signals in the window,
    # a drop or two may be pings'. So every drop must be a lost ping, never a segment of the flow.
    assert codel.rtt_ms["p50"] < 40 + 20 and codel.counters["dropped"] > 0 and codel.counters["marked"] == 0
    assert marked.rtt_ms["p50"] < 40 + 20 and marked.counters["marked"] > 0
    assert marked.counters["dropped"] <= marked.pings_lost
    # The delay line's CoDel holds the queue as the kernel's does, by drops.
    assert line.settings["policy"] == "codel" and line.settings["aqm"] == {"target_ms": 5.0, "interval_ms": 100.0,
                                                                           "ecn": False}
    assert line.rtt_ms["p50"] < 40 + 20 and line.counters["dropped"] > 0 and line.counters["marked"] == 0
