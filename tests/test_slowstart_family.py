"""Root integration: the slow-start family on the wire, read back from the kernel and from
each congestion control's own log.

One deep-buffered path (50 Mbit/s, 100 ms, a buffer of four BDPs) on which a queue builds
once the window passes the BDP, so the RTT rises well before any loss. Servers in turn
send 20 MB. The kernel shows (sock_diag, hosts/socket_watch.py) where each connection's
first slow start ended: the window, the CA state and the retransmissions when ssthresh
was first set.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hosts.apps import HTTP_PORT, Lighttpd, curl_fetch, make_object
from hosts.session import RunSession
from hosts.implementations import hystartpp
from hosts.variants import get_variant
from links.profiles import LinkProfile
from links.shapers import Shaper
from links.shapers.delayline import DelayLineQueue
from timing import timing_check
from topologies.network import Network

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

SIZE = 20_000_000
OPEN = 0                                         # TCP_CA_Open


def exits(tmp: Path, variants: tuple[str, ...], buffer_pkts: int = 1700, shaper: Shaper | None = None,
          size: int = SIZE) -> dict:
    """Each variant's first slow-start exit (None: it never left slow start), its server's
    counters, and the host's flags. `shaper`: the bottleneck (default: the profile's);
    `size`: the object fetched, which must outlast slow start for the kernel to show its end."""
    prof = LinkProfile(name="test-hystart", down_mbps=50, up_mbps=50, rtt_ms=100, buffer_pkts=buffer_pkts)
    out = {}
    with Network(prof, tmp / "net", shaper=shaper) as net:
        n = net.names
        sv, cl = net.host(n.server(1)), net.host(n.client(1))
        for name in variants:
            work = tmp / name
            work.mkdir()
            with RunSession(net, get_variant(name), work, tmp / f"scratch-{name}", get_variant) as s:
                s.install_under_test(server=[sv], client=[cl])
                url = make_object(s.scratch / "www", size)
                s.adopt("lighttpd", Lighttpd(sv, n.server_ip(1), s.scratch / "www", work, s.instance))
                s.flow("short", sv, cl, HTTP_PORT, size)
                s.ready()
                got = curl_fetch(cl, f"http://{n.server_ip(1)}:{HTTP_PORT}{url}", work, s.instance, 120)
                assert got["http_code"] == 200 and int(got["size_download"]) == size, got
            record = s.record()
            flow = record["flows"][0]
            assert flow["observed_cc"] and flow["connections_seen"] == 1, flow
            out[name] = {"exit": flow["ss_exits"][0], "cc": flow["observed_cc"],
                         "counters": next(iter(record.get("server_counters", {}).values()), {})}
            print(name, out[name])
    out["flags"] = net.host_flags("delay")
    out["frame_time_s"] = prof.frame_bytes * 8 / prof.rate_bps("down")
    return out


def scheme_events(tmp: Path, variant: str, kind: str,
                  shaper: Shaper | None = None) -> tuple[dict, dict, list[dict]]:
    """Run `variant` (a scheme of stl_sslog.h, its log under the variant's name) alone:
    (every variant's exits and the host's flags, its own, its one connection's events),
    its congestion control `kind` read back from the kernel."""
    res = exits(tmp, (variant,), shaper=shaper)
    got = res[variant]
    assert got["cc"][0].endswith(f"_{kind}"), got["cc"]
    logs = got["counters"][variant]
    assert len(logs) == 1, logs
    return res, got, logs[0]["events"]


@pytest.mark.virtual_clock
def test_the_bpf_base_leaves_slow_start_as_the_kernels_cubic_and_hystart_off_never_on_delay(tmp_path):
    got = exits(tmp_path, ("cubic-iw10", "cubic-bpf", "cubic-hystart-off"))
    kernel, base, off = got["cubic-iw10"]["exit"], got["cubic-bpf"]["exit"], got["cubic-hystart-off"]["exit"]
    assert got["cubic-iw10"]["cc"] == ["cubic"] and got["cubic-bpf"]["cc"][0].endswith("_cubic"), got
    # The kernel's CUBIC: HyStart ends slow start here, in the Open state, before any loss.
    assert kernel and kernel["ca_state"] == OPEN and kernel["total_retrans"] == 0, kernel
    # The BPF base is the kernel's code: it leaves the same way ...
    assert base and base["ca_state"] == OPEN and base["total_retrans"] == 0, base
    # ... in the same round as the kernel's or the next. HyStart's ACK-train and delay samples
    # depend on when ACKs arrive, to the microsecond, and two connections (or two kernels'
    # instruction streams) differ there: one exit fell in the round from 320 to 640 segments
    # and the other at the end of the next, both ways round (on the host's real clock the
    # kernel's at 532 and the base's at 1283; in a 6.12 guest 1287 and 533). Slow start at
    # most doubles the window in a round, so exits one round apart are within 4 x.
    timing_check("the BPF base's HyStart exit within a round of the kernel's (0.25-4 x its window)",
                 got["flags"], 0.25 <= base["cwnd"] / kernel["cwnd"] <= 4,
                 f"{base['cwnd']} against {kernel['cwnd']} segments")
    # HyStart off: slow start never ends on delay: only a loss ends it (or the transfer does).
    assert off is None or off["total_retrans"] > 0 or off["ca_state"] != OPEN, off
    if off is not None:       # the loss came far past where HyStart stopped the kernel's CUBIC
        assert off["ssthresh"] > kernel["ssthresh"], (off, kernel)


@pytest.mark.virtual_clock
def test_hystartpp_enters_css_on_the_rtt_increase_and_leaves_it_after_css_rounds(tmp_path):
    """RFC 9406 on the wire: once a round's least RTT (of at least N_RTT_SAMPLE samples)
    has risen by the threshold, Conservative Slow Start; a CSS round whose least RTT falls
    below the one that started it returns to slow start (measured here: the first entries
    are spurious, the rest of the round brings lower samples); after CSS_ROUNDS (5) rounds
    of CSS, congestion avoidance with ssthresh = cwnd, before any loss. A buffer of 8000
    packets holds what CSS adds (with 1700, a loss came in the fourth CSS round). The queue
    it allows stretches CSS's rounds (RTTs of 0.2-0.8 s) and CSS sends up to ~26 MB: a 20 MB
    object once ended just as CSS did, before the kernel's socket could show the exit, so
    this test fetches 60 MB."""
    got = exits(tmp_path, ("cubic-hystartpp",), buffer_pkts=8000, size=60_000_000)["cubic-hystartpp"]
    logs = got["counters"]["hystartpp"]
    assert len(logs) == 1, logs
    events = logs[0]["events"]
    phases = [(e["old"], e["new"]) for e in events]
    # Every phase change is logged up to the log's size. RFC 9406 checks on every ACK, so a
    # round whose RTT samples fall slowly back towards the baseline flips between CSS and
    # slow start per ACK (measured: 12 changes in one round, which filled a log of 16).
    assert len(events) < hystartpp.EVENTS, f"the log is full: the last phase changes are missing ({phases})"
    assert phases and phases[0] == ("slow_start", "css"), phases
    for e in events:
        if (e["old"], e["new"]) == ("slow_start", "css"):
            last, now = e["last_round_min_rtt_us"], e["current_round_min_rtt_us"]
            assert e["rtt_samples"] >= 8 and now >= last + max(4000, min(last // 8, 16000)), e
        elif (e["old"], e["new"]) == ("css", "slow_start"):
            assert e["rtt_samples"] >= 8 and e["current_round_min_rtt_us"] < e["last_css_baseline_us"], e
    leave = events[-1]
    assert (leave["old"], leave["new"], leave["css_rounds"], leave["by_loss"]) == \
        ("css", "congestion_avoidance", 5, False), phases
    assert leave["ssthresh"] == leave["cwnd"], leave
    # CSS grows a quarter as fast as slow start: ~1.25 x per round, so 5 rounds ~3 x (not 32 x).
    entry = next(e for e in reversed(events) if e["new"] == "css")
    assert 1.5 <= leave["cwnd"] / entry["cwnd"] <= 4.5, (entry["cwnd"], leave["cwnd"])
    # The kernel saw slow start end there, in the Open state, with no retransmission.
    assert got["exit"] and got["exit"]["total_retrans"] == 0 and got["exit"]["ca_state"] == OPEN, got["exit"]


@pytest.mark.virtual_clock
def test_rapidstart_triples_while_the_rtt_floor_holds_and_ends_its_first_recovery_at_beta_times_delivered(tmp_path):
    """draft-kazuho-ccwg-rapid-start-02 on the wire. While the path's queue is empty a round's
    least RTT stays within min(min_rtt + 4 ms, 1.1 x min_rtt) and every acknowledged segment
    adds two: the window triples per round. Once the queue builds, growth is slow start's
    2x. HyStart is off, so a loss ends the rapid phase: the first recovery ends at
    beta x (pre-loss window - losses), not below pre x beta / 3 (§3.3.1, Appendix A)."""
    _, got, events = scheme_events(tmp_path, "rapidstart", "rs")
    rounds = [e for e in events if e["event"] == "round"]
    print([(e["round"], e["cwnd"], e["rtt_floor_us"], e["threshold_us"], e["acked_3x"], e["acked_2x"])
           for e in rounds])
    # The early rounds, before the window passes the BDP (~413 segments here): all 3x, each
    # acknowledged segment adding two. (A round is the ACKs of the last round's flight: the
    # first round holds the IW's ACKs only, so the second ends at 70 from 30, the third at
    # 210, three times the last from there.)
    early = [e for e in rounds if e["cwnd"] < 413]
    assert len(early) >= 3, rounds
    for e in early:
        assert e["rtt_floor_us"] <= e["threshold_us"] and e["acked_2x"] == 0 and e["acked_3x"] > 0, e
    for a, b in zip(early, early[1:]):
        assert abs(b["cwnd"] - a["cwnd"] - 2 * b["acked_3x"]) <= 2, (a, b)
    for a, b in zip(early[1:], early[2:]):
        assert 2.5 <= b["cwnd"] / a["cwnd"] <= 3.5, (a, b)
    # A round whose RTT floor rose past the threshold, if any did, grew at 2x.
    queued = [e for e in rounds if e["rtt_floor_us"] > e["threshold_us"]]
    assert all(e["acked_2x"] > 0 for e in queued), queued
    # The first loss, and where its recovery ended: the draft's end point.
    loss = next(e for e in events if e["event"] == "loss")
    end = next(e for e in events if e["event"] == "exit")
    assert end["by_timeout"] == 0 and end["pre_cwnd"] == loss["pre_cwnd"], end
    pre, lost = end["pre_cwnd"], end["lost"]
    want = max(int((pre - lost) * 0.7), int(pre * 0.7 / 3), 2)
    assert abs(end["ssthresh_set"] - want) <= 1 and end["ssthresh"] == end["ssthresh_set"], (end, want)
    assert 0 < lost < pre, end
    # The kernel saw slow start end with a loss (Recovery, retransmissions), not on delay.
    assert got["exit"] and got["exit"]["total_retrans"] > 0, got["exit"]


@pytest.mark.virtual_clock
def test_search_exits_when_delivered_falls_short_of_sent_one_rtt_earlier(tmp_path):
    """draft-chung-ccwg-search (-09's sent/delivered form) on the wire: every check before
    the exit found the shortfall of delivered bytes (last 3.5 initial RTTs) against the bytes
    sent over the window one RTT earlier below THRESH (0.26), the exit's at or above it, and
    the exit set ssthresh = cwnd. On this deep buffer it comes once the window has passed the
    path's BDP (the delivery rate has stopped growing), before a retransmission. (Measured
    here: at ~2357 segments, past what the path holds, 413 + 1700, so losses follow; the
    RTT samples had grown from 100 to ~285 ms by then, and "one RTT earlier" is read with
    the latest sample: a suspect for the late exit, not a measured cause.)"""
    res, got, events = scheme_events(tmp_path, "search", "search")
    checks = [e for e in events if e["event"] == "check"]
    print([(e["round"], e["cwnd"], e["norm_milli"], e["prev_sent"], e["curr_delv"], e["rtt_us"]) for e in checks])
    print("kernel", got["exit"])
    at = next(i for i, e in enumerate(events) if e["event"] == "exit")
    end = events[at]
    assert events[at - 1]["event"] == "check" and events[at - 1]["norm_milli"] == end["norm_milli"], events[at - 1]
    before = [e for e in events[:at - 1] if e["event"] == "check"]
    assert before and all(e["norm_milli"] < 260 for e in before), before
    assert end["norm_milli"] >= 260 and end["ssthresh"] == end["cwnd"], end
    # norm is the logged shortfall's share of prev_sent (bytes), in thousandths
    for e in (*before, end):
        assert e["norm_milli"] == max(0, e["prev_sent"] - e["curr_delv"]) * 1000 // e["prev_sent"], e
    # The kernel saw slow start end there (ssthresh first set to that window).
    assert got["exit"] and got["exit"]["ssthresh"] == end["cwnd"], (got["exit"], end)
    timing_check("SEARCH exits after the window passed the BDP (413 segments), before a retransmission", res["flags"],
                 end["cwnd"] > 413 and got["exit"]["total_retrans"] == 0,
                 f"exit at cwnd {end['cwnd']}, retransmissions {got['exit']['total_retrans']}")


def test_suss_grows_4x_in_its_early_rounds_then_2x(tmp_path):
    """SUSS on the wire: at each early round's blue tail the ACK train is short against the
    100 ms minimum RTT, so rounds 2 to 4 (suss_max 3) choose G = 4: the window is raised
    to what ends the round at four times its start, the extra segments paced; from round 5
    slow start's 2x, until HyStart's detectors (or SUSS's cap) end it."""
    # SUSS decides on the spacing of its ACK trains, which the bottleneck sets: the delay
    # line's queue sends frames at the link's rate, as a link does. tbf passes up to its
    # bucket at once (7 frames at 50 Mbit/s where the host calibration sized it for late
    # wake-ups), which compressed the IW's train to 50-120 µs against the link's ~2 ms,
    # and SUSS's projection from that train then rightly chose 2x in round 3.
    res, got, events = scheme_events(tmp_path, "suss", "suss", shaper=DelayLineQueue())
    for e in events:
        print({k: v for k, v in e.items() if k != "t_ns"})
    starts = {e["round"]: e["cwnd"] for e in events if e["event"] == "round"}
    tails = [e for e in events if e["event"] == "tail"]
    # The decision at each tail is the ACK train's length against the minimum RTT: a timing
    # figure. Here the IW's train is ~2 ms against 100 ms, the next ~4 ms.
    early = [t["growth"] for t in tails if t["round"] in (2, 3)]
    # Round 3's choice projects from round 2's train, which the bottleneck spaces at one frame
    # per frame time. A train much shorter reached the sender compressed on the way (a late
    # wake-up releasing the held frames at once, or the client's ACKs sent in a batch):
    # measured on a host the monitor qualified, round 2's train 274 µs against 2422 µs at
    # the link's rate, from which SUSS rightly chose 2x in round 3. That is the host's timing.
    link_us = starts[2] * res["frame_time_s"] * 1e6
    train = next(t["dt_bat_us"] for t in tails if t["round"] == 2)
    compressed = [f"round 2's ACK train reached the sender compressed: {train} µs against the {link_us:.0f} µs "
                  "the bottleneck spaces it by"] if train < link_us / 2 else []
    timing_check("SUSS grows 4x in rounds 2 and 3 (short ACK trains on a 100 ms path)", res["flags"] + compressed,
                 early == [4, 4], f"G in rounds 2, 3: {early}; trains {[t['dt_bat_us'] for t in tails]} µs")
    for t in tails:
        start, following = starts[t["round"]], starts.get(t["round"] + 1)
        if t["growth"] == 4:
            # the window raised at the tail to four times the round's start; the red ACKs
            # that follow add nothing, so the next round starts there
            assert abs(t["limit"] - 4 * start) <= 2 and t["cwnd"] == t["limit"], (start, t)
            assert following is None or abs(following - t["limit"]) <= 2, (t, following)
        else:
            assert t["growth"] in (0, 2) and t["limit"] == 0, t
            assert following is None or following <= 2 * start + 2, (t, following)   # slow start's 2x
    assert all(t["round"] < 3 + 2 for t in tails if t["growth"] == 4), tails         # suss_max 3
    # Slow start ended by HyStart's detectors or SUSS's cap, before any loss, ssthresh = cwnd,
    # which the kernel saw too.
    end = next(e for e in events if e["event"] == "exit")
    assert end["why"] in ("delay", "ack_train", "cap") and end["ssthresh"] == end["cwnd"], end
    assert got["exit"] and got["exit"]["ssthresh"] == end["cwnd"] and got["exit"]["total_retrans"] == 0, got["exit"]
