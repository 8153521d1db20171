"""Root integration: Careful Resume (RFC 9959) on the wire, from captures and the congestion
control's own log of its phase changes.

Two connections in turn fetch from lighttpd on sv1 (curl, one connection each): the first
(2 MB over 20 Mbit/s and 60 ms) is observed and saves the path's capacity; the second
(1 MB, a second later) resumes from it. The capture in front of the bottleneck queue
shows what the sender did; the log says what it decided.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from hosts.apps import curl_fetch
from timing import timing_check
from links.profiles import LinkProfile
from webpath import web_path
from wiretrace import ACK, SYN, read_pcap, test_profile

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

IW = 10


def two_fetches(tmp: Path, sizes=(2_000_000, 1_000_000), pause_s: float = 1.0, prof: LinkProfile | None = None,
                between=None, variant: str = "careful-resume") -> dict:
    """Fetches of `sizes` in turn, one connection each, `pause_s` apart; `between(net)` runs
    in the first pause (the path changing between the first two connections)."""
    prof = prof or test_profile("test-cr", 20, 60)
    with web_path(tmp, prof, variant, sizes) as w:
        w.session.capture_standard()
        w.session.ready()
        for i in range(len(sizes)):
            if i:
                time.sleep(pause_s)
            if i == 1 and between:
                between(w.net)
            got = curl_fetch(w.client, w.url(i), w.work, w.session.instance, 60)
            assert got["http_code"] == 200 and int(got["size_download"]) == sizes[i], got
        drops = w.net.queue_drops()
    counters = next(iter(w.session.record()["server_counters"].values()))
    logs = counters.pop("careful_resume")
    saved = counters.pop("careful_resume_saved")     # what a failure asks first
    return {"packets": read_pcap(w.work / "cap-bneck-in.pcap"), "server_ip": w.server_ip, "client_ip": w.client_ip,
            "logs": logs, "rtt_s": prof.rtt_s, "flags": w.net.host_flags("delay"), "saved": saved,
            "counters": counters, "drops": drops}


def connections(run: dict) -> list[dict]:
    """Each connection's server data and client ACKs, by the client's port, in order."""
    by_port: dict[int, dict] = {}
    for p in run["packets"]:
        if p.src == run["server_ip"] and p.flags & SYN:
            by_port.setdefault(p.dport, {"isn": p.seq, "data": [], "acks": []})
        elif p.src == run["server_ip"] and p.payload > 0 and p.dport in by_port:
            by_port[p.dport]["data"].append(p)
        elif p.src == run["client_ip"] and p.flags & ACK and p.sport in by_port:
            by_port[p.sport]["acks"].append(p)
    return [dict(c, port=port) for port, c in by_port.items()]


def test_a_second_connection_reconnoitres_with_the_iw_then_jumps_to_half_the_saved_window_paced(tmp_path):
    """With a client whose receive window caps no jump (careful-resume-rcv): a default Linux
    receiver's window (~56 segments then) stalls the jump until its ACKs return, and the
    release spacing would measure the receiver, not the pacing (measured: 38 segments at
    the set rate, then 44 ms of nothing)."""
    run = two_fetches(tmp_path, variant="careful-resume-rcv")
    first, second = connections(run)
    assert [log["remote"].split(":")[1] for log in run["logs"]] == [str(second["port"])], \
        ("only the second connection resumed", run["saved"], run["counters"])
    events = run["logs"][0]["events"]
    phases = [(e["old"], e["new"], e["trigger"]) for e in events]
    assert phases[0] == ("observing", "reconnaissance", None), phases
    assert phases[1] == ("reconnaissance", "unvalidated", "congestion_window_limited"), phases
    assert phases[-1][1] == "normal", phases
    jump = events[1]
    saved = jump["saved_congestion_window"]
    assert saved >= 4 * IW, "the first connection saved at least 4 x IW"
    assert jump["congestion_window"] == saved // 2, "jump_cwnd = saved_cwnd / 2 (no max_jump)"
    # Reconnaissance sends only the IW: the data before the first ACK of data
    data, acks = second["data"], second["acks"]
    first_ack = next(a for a in acks if a.ts > data[0].ts and a.ack != data[0].seq)
    assert len([p for p in data if p.ts < first_ack.ts]) == IW
    # The unvalidated segments: from the jump's first sequence number to the phase's end
    start = jump["first_unvalidated_packet"]
    end = next((e["last_unvalidated_packet"] for e in events[2:] if e["last_unvalidated_packet"]), None)
    assert end is not None, phases
    unvalidated = [p for p in data if 0 <= (p.seq - start) % 2 ** 32 < (end - start) % 2 ** 32]
    assert 0 < len(unvalidated) <= jump["congestion_window"], (len(unvalidated), jump["congestion_window"])
    # ... paced at jump_cwnd per smoothed RTT (§4.3.2), not at the kernel's 200 % of it:
    # the rate set at the jump is exactly that, and the wire's mean spacing of the jump's
    # segments is within 10 % of it.
    mss, srtt_us = run["logs"][0]["mss"], jump["srtt_us"]
    assert jump["pacing_rate_Bps"] == jump["congestion_window"] * mss * 1_000_000 // srtt_us, jump
    ideal_gap = srtt_us / 1e6 / jump["congestion_window"]
    sent = sum(p.payload for p in unvalidated[:-1])      # the bytes whose pacing set the span
    gap = (unvalidated[-1].ts - unvalidated[0].ts) / (sent / mss)
    timing_check("the jump paced at jump_cwnd per srtt", run["flags"], abs(gap / ideal_gap - 1) <= 0.10,
                 f"{len(unvalidated)} segments, mean gap {gap * 1e3:.3f} ms against "
                 f"{ideal_gap * 1e3:.3f} ms (jump {jump['congestion_window']}, srtt {srtt_us / 1e3:.1f} ms)")


def test_a_jump_onto_a_path_cut_to_an_eightieth_retreats_deletes_the_state_and_sets_ssthresh_from_pipesize(tmp_path):
    """The state goes stale: between the first two connections the path changes from 40 Mbit/s
    with a 60-packet buffer to 0.5 Mbit/s with a 30-packet one, and the jump overruns it.
    The loss of unvalidated data sends the second connection to Safe Retreat, which deletes
    the saved state (a third connection can resume only from a later observation) and
    leaves with ssthresh = PipeSize x beta (0.5).

    The cut path holds Reconnaissance's flight (15-24 segments measured) but not the jump's:
    the jump is half the saved window, and the client's receive window caps its flight at
    ~56 segments. The saved window, the first fetch's last full round, scales with the first
    path's buffer (slow start overflows it, CUBIC's sawtooth follows): 94-157 segments behind
    40 packets, 138-250 behind 60. With one 40-packet buffer for both paths, a jump to 47
    went through the cut path without a loss (no retreat); behind 60 packets the jump is at
    least 69, its flight ~56, and the cut path's 30 packets and 2.5-segment pipe overflow."""
    prof = LinkProfile(name="test-cr-stale", down_mbps=40, up_mbps=40, rtt_ms=60, buffer_pkts=60)
    run = two_fetches(tmp_path, sizes=(10_000_000, 300_000, 100_000), prof=prof,
                      between=lambda net: net.set_rate("down", 0.5e6, buffer_pkts=30))
    first, second, third = connections(run)
    logs = {int(log["remote"].split(":")[1]): log for log in run["logs"]}
    assert first["port"] not in logs and second["port"] in logs, \
        f"the second connection resumed; saved {run['saved']}, sock_ops {run['counters']}"
    events = logs[second["port"]]["events"]
    phases = [(e["old"], e["new"], e["trigger"]) for e in events]
    assert phases[:2] == [("observing", "reconnaissance", None),
                          ("reconnaissance", "unvalidated", "congestion_window_limited")], phases
    jump = events[1]
    retreat = next((e for e in events if e["new"] == "safe_retreat"), None)
    assert retreat is not None and retreat["old"] in ("unvalidated", "validating"), \
        (f"saved {jump['saved_congestion_window']} segments, jump to {jump['congestion_window']} "
         f"from a flight of {jump['pipesize']}; phase changes (ms after the jump, window):",
         [(*ph, round((e["t_ns"] - jump["t_ns"]) / 1e6, 1), e["congestion_window"]) for ph, e in zip(phases, events)],
         f"queue drops {run['drops']}")
    assert retreat["trigger"] in ("packet_loss", "ECN_CE"), phases
    leave = events[-1]
    assert (leave["old"], leave["new"], leave["trigger"]) == ("safe_retreat", "normal", "exit_recovery"), phases
    assert leave["ssthresh"] == max(2, leave["pipesize"] // 2), leave
    # The window is PipeSize/2 from the retreat on (the kernel's PRR reaches it within the
    # recovery, see docs/careful-resume.md) and does not grow until the retreat ends.
    assert leave["congestion_window"] <= max(2, retreat["pipesize"] // 2), (retreat, leave)
    # The stale state is gone: a third connection resumes, if at all, only from what the
    # second one observed on the slower path afterwards.
    if third["port"] in logs:
        assert logs[third["port"]]["events"][0]["saved_congestion_window"] < events[0]["saved_congestion_window"]


def test_an_rtt_beyond_ten_times_the_saved_one_in_unvalidated_is_a_path_change(tmp_path):
    """The rate drops from 100 to 1 Mbit/s between the connections, into a deep queue (no
    loss): the IW's queueing leaves Reconnaissance's minimum RTT in bounds, but the first
    samples of the Unvalidated phase exceed 10 x saved_rtt (5 ms; the IW alone queues for
    120 ms), so the jump retreats (path_changed), outside any recovery: the window is
    PipeSize/2 and stays there."""
    prof = LinkProfile(name="test-cr-rtt", down_mbps=100, up_mbps=100, rtt_ms=5, buffer_pkts=300)
    run = two_fetches(tmp_path, sizes=(2_000_000, 300_000), prof=prof,
                      between=lambda net: net.set_rate("down", 1e6))
    first, second = connections(run)
    logs = {int(log["remote"].split(":")[1]): log for log in run["logs"]}
    assert first["port"] not in logs and second["port"] in logs, "the second connection resumed"
    events = logs[second["port"]]["events"]
    phases = [(e["old"], e["new"], e["trigger"]) for e in events]
    assert phases[:3] == [("observing", "reconnaissance", None),
                          ("reconnaissance", "unvalidated", "congestion_window_limited"),
                          ("unvalidated", "safe_retreat", "path_changed")], phases
    retreat, leave = events[2], events[-1]
    assert (leave["old"], leave["new"], leave["trigger"]) == ("safe_retreat", "normal", "exit_recovery"), phases
    assert leave["congestion_window"] == max(2, retreat["pipesize"] // 2), (retreat, leave)
    assert leave["ssthresh"] == max(2, leave["pipesize"] // 2), leave
