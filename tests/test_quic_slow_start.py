"""Google QUIC's slow start on a real path (root): paced at 2 × cwnd ÷ SRTT after the first
RTT, and left by HybridSlowStart on the queue's delay before the queue overflows.

Path: server — delay line (50 ms RTT) — tbf 50 Mbit/s — client (tests/quicpath.py). The
server's interface shows when each datagram left, before any queue; its qlog
(`--qlog-dir`) shows what the sender computed: cwnd, SRTT and pacing rate after every
acknowledgement, ssthresh from the exit on, and every packet sent and declared lost.

HybridSlowStart decides once per round, on the first 8 RTT samples of the round, so it
sees a queue up to a round late: measured here on the usual one-BDP buffer (208 frames), it
left slow start at a window of 537 datagrams, 2.5 BDP, with packets already dropped. The
exit test therefore runs on a buffer of 4 BDP, where it should exit before any loss.
"""
from __future__ import annotations

import json
import math
import statistics

import pytest

from wire import qlog
from hosts.quic.quic_net import SERVER_IP, Datagram, QuicNet
from quicpath import RATE_BPS, RTT_MS, fetch_captured, quic_path

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

DATAGRAM = 1472
FRAME = 1514
GQUIC = ["--cc", "cubic-iw32", "--sender", "gquic", "--datagram-pacing"]
# Datagrams leaving less than this apart left together (one release of the pacer).
TOGETHER_S = 100e-6
BDP_FRAMES = RATE_BPS / 8 * RTT_MS / 1e3 / FRAME
DEEP_BUFFER_FRAMES = round(4 * BDP_FRAMES)


@pytest.fixture
def path():
    yield from quic_path()


@pytest.fixture
def deep_path():
    yield from quic_path(limit_bytes=DEEP_BUFFER_FRAMES * FRAME)


@pytest.fixture
def deeper_path():
    """20 BDP: room for CSS's five rounds after spurious entries (on 4 BDP a loss came first)."""
    yield from quic_path(limit_bytes=5 * DEEP_BUFFER_FRAMES * FRAME)


def run(net: QuicNet, name: str, size: str, server_args: list[str] = GQUIC
        ) -> tuple[dict, list[dict], list[dict], list[Datagram]]:
    """One fetch with the qlog on: the server's line, the sender's recovery states and lost
    packets (unix seconds in `time_s`, `sent_s`), and the server's 1-RTT datagrams."""
    qlog_dir = net.workdir / f"{name}-qlog"
    qlog_dir.mkdir()
    result, line, datagrams = fetch_captured(net, name, [*server_args, "--qlog-dir", str(qlog_dir)], [], size)
    assert result["ok"] and line["qlog"], line
    _, events = qlog.read(line["qlog"])
    unix = lambda ms: line["start_unix_s"] + ms / 1e3
    states = [{**s, "time_s": unix(s["time_ms"])} for s in qlog.recovery_states(events)]
    lost = [{**p, "sent_s": unix(p["sent_ms"]), "declared_s": unix(p["declared_ms"])}
            for p in qlog.lost_packets(events)]
    sent = [d for d in datagrams if d.src == SERVER_IP and not d.long_header]
    return line, states, lost, sent


def releases(sent: list[Datagram]) -> list[list[Datagram]]:
    """Datagrams grouped into the pacer's releases."""
    groups: list[list[Datagram]] = []
    for d in sent:
        if groups and d.ts - groups[-1][-1].ts < TOGETHER_S:
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def state_at(states: list[dict], t: float) -> dict:
    """The sender's last state at or before `t`."""
    return [s for s in states if s["time_s"] <= t][-1]


def test_slow_start_is_paced_at_twice_the_window_rate(path):
    line, states, lost, sent = run(path, "slow-start-pacing", "2MB")
    assert line["sender"] == "gquic" and line["datagram_pacer"], line
    # From the second RTT (the first flight has its own test) to the end of slow start (the
    # first state with ssthresh, or the first loss).
    begin = next(d.ts for d in sent if d.length >= DATAGRAM) + RTT_MS / 1e3
    end = min([s["time_s"] for s in states if s.get("ssthresh") is not None]
              + [p["declared_s"] for p in lost] + [sent[-1].ts])
    slow = [s for s in states if begin <= s["time_s"] < end]
    assert len(slow) > 50, f"{len(slow)} slow-start states in the qlog"
    # What the sender computed: 2 × cwnd ÷ SRTT, read back from its qlog (bit/s, ms). The
    # controller takes the SRTT with the acknowledgements it is given; quinn's estimate in
    # the same event may have moved on (measured: 0.0 % typically, once 2.3 %).
    deviations = sorted(abs(s["pacing_rate"] / (2 * s["congestion_window"] * 8 / (s["smoothed_rtt"] / 1e3)) - 1)
                        for s in slow)
    deviation = {"median": deviations[len(deviations) // 2], "max": deviations[-1]}
    assert deviation["median"] <= 0.005 and deviation["max"] <= 0.05, f"pacing rate off 2 × cwnd ÷ SRTT: {deviation}"
    # What left in that time, each release with the sender's state when it left.
    groups = [(g, state_at(states, g[0].ts)) for g in releases(sent) if begin <= g[0].ts < end]
    assert len(groups) > 20, f"{len(groups)} releases in slow start after the first RTT"
    # Below half the BDP the pacing rate is below the bottleneck's, no queue forms, and
    # acknowledgements return as fast as the last round left: the pacer, not the window,
    # sets the gaps, but for the wait at each round's end. Each gap is the release's bytes
    # at the rate the sender had (ratio 1); the median is the pacer's.
    half_bdp = BDP_FRAMES / 2 * DATAGRAM
    ratios = [(b[0].ts - a[0].ts) / (sum(d.length for d in a) / (st["pacing_rate"] / 8))
              for (a, st), (b, _) in zip(groups, groups[1:]) if st["congestion_window"] <= half_bdp]
    # quiche's lumpy pacing releases pairs, and its 1 ms alarm granularity lets go at once
    # whatever is due within 1 ms; a release late by L also lets go what fell due in L. So
    # at most 2 + (1 ms + the pacer's latest release) of the rate.
    window_s = 1e-3 + line["datagram_pacer"]["late_us"]["max"] / 1e6
    over = [(len(g), bound) for g, st in groups
            if len(g) > (bound := 2 + math.ceil(st["pacing_rate"] / 8 * window_s / DATAGRAM))]
    median = statistics.median(ratios)
    print("slow start", json.dumps({"rate_deviation": deviation, "releases": len(groups),
                                    "sizes": [len(g) for g, _ in groups], "ratio_median": median,
                                    "ratios": [round(r, 2) for r in ratios]}))
    claim = path.timing.add
    claim("gaps of bytes ÷ (2 × cwnd ÷ SRTT) below half the BDP, median within 10 %", 0.9 <= median <= 1.1,
          f"median ratio {median:.3f} over {len(ratios)} gaps")
    claim("releases of at most a pair and 1 ms of the rate", not over,
          f"(size, bound) over: {over}; pacer {line['datagram_pacer']}")


def test_hybrid_slow_start_exits_on_the_queue_delay_before_any_loss(deep_path):
    line, states, lost, _ = run(deep_path, "hystart-exit", "10MB")
    assert line["hystart_exit"], "HybridSlowStart did not end slow start"
    exit_state = next(s for s in states if s.get("ssthresh") is not None)
    cwnd = exit_state["congestion_window"] / DATAGRAM
    min_rtt = exit_state["min_rtt"]
    threshold = min(max(min_rtt / 8, 4.0), 16.0)
    first_lost = min((p["sent_s"] for p in lost), default=None)
    print("exit", json.dumps({"cwnd": cwnd, "bdp": BDP_FRAMES, "buffer": DEEP_BUFFER_FRAMES,
                              "state": exit_state, "lost": len(lost), "first_lost_sent_s": first_lost}))
    # An exit from slow start with ssthresh = cwnd, as quiche's HybridSlowStart leaves it.
    assert exit_state["ssthresh"] == exit_state["congestion_window"], exit_state
    claim = deep_path.timing.add
    # Before any loss: every packet declared lost left after the exit.
    claim("no packet lost that was sent before the exit", first_lost is None or first_lost > exit_state["time_s"],
          f"exit at {exit_state['time_s']:.4f}, first lost packet sent at {first_lost}")
    # The delay increase against the minimum RTT: the RTT that ended slow start is at
    # least min_rtt + min_rtt/8 (clamped to 4-16 ms) — the bottleneck's queue.
    claim(f"RTT at the exit ≥ min RTT + {threshold:.2f} ms", exit_state["latest_rtt"] >= min_rtt + threshold,
          f"latest {exit_state['latest_rtt']:.2f} ms, min {min_rtt:.2f} ms")
    # Paced at 2 × cwnd ÷ SRTT the queue grows from a window of half the BDP, and doubling on,
    # slow start would overflow the BDP and the buffer.
    claim("the exit between BDP/2 and BDP + buffer", BDP_FRAMES / 2 <= cwnd <= BDP_FRAMES + DEEP_BUFFER_FRAMES,
          f"cwnd {cwnd:.0f} datagrams, BDP {BDP_FRAMES:.0f}, buffer {DEEP_BUFFER_FRAMES}")


def test_hystartpp_goes_on_conservatively_after_the_delay_increase(deeper_path):
    """startlab's RFC 9438 sender with RFC 9406 whole (--hystart-pp): the delay increase that
    ends HyStart's slow start starts Conservative Slow Start instead, which grows a quarter
    as fast for 5 rounds (~1.25^5 = 3 x) before congestion avoidance. Against the same
    sender with HyStart alone, on the same deep buffer: CSS entered, slow start left by
    CSS's end (ssthresh = cwnd), at a larger window. (On a 4-BDP buffer, measured: three
    entries, two undone by a lower RTT, and a loss at 905 datagrams before CSS could end.)"""
    rfc9438 = ["--cc", "cubic-iw32", "--sender", "rfc9438"]
    plain, plain_states, _, _ = run(deeper_path, "hystart", "20MB", rfc9438)
    line, states, lost, _ = run(deeper_path, "hystartpp", "20MB", [*rfc9438, "--hystart-pp"])
    print("lines", json.dumps({k: (plain.get(k), line.get(k)) for k in ("css_entries", "hystart_exit", "cc_reductions",
                                                                           "cwnd_end_bytes", "ssthresh_end_bytes")}))
    assert plain["css_entries"] == 0 and line["css_entries"] >= 1, (plain["css_entries"], line["css_entries"])
    assert line["hystart_exit"], "CSS did not end slow start"
    exit_state = next(s for s in states if s.get("ssthresh") is not None)
    plain_exit = next(s for s in plain_states if s.get("ssthresh") is not None)
    assert exit_state["ssthresh"] == exit_state["congestion_window"], exit_state
    cwnd, plain_cwnd = exit_state["congestion_window"] / DATAGRAM, plain_exit["congestion_window"] / DATAGRAM
    first_lost = min((p["sent_s"] for p in lost), default=None)
    print("exits", json.dumps({"hystart": plain_cwnd, "hystartpp": cwnd, "css_entries": line["css_entries"],
                               "bdp": BDP_FRAMES, "buffer": DEEP_BUFFER_FRAMES}))
    claim = deeper_path.timing.add
    claim("HyStart++ leaves slow start at a larger window than HyStart (CSS grows on)", cwnd > plain_cwnd,
          f"{cwnd:.0f} against {plain_cwnd:.0f} datagrams")
    claim("no packet lost that was sent before the exit", first_lost is None or first_lost > exit_state["time_s"],
          f"exit at {exit_state['time_s']:.4f}, first lost packet sent at {first_lost}")


def test_rapid_start_triples_then_ends_its_first_recovery_at_beta_times_delivered(path):
    """startlab's RFC 9438 sender with Rapid Start (draft-kazuho-ccwg-rapid-start-02): slow
    start grows 3x while the RTT floor holds (two bytes per byte acknowledged) and only a loss
    ends it; its first recovery takes the window to silence x the window at once, then
    ack x every byte acknowledged and loss x every byte declared lost, not below pre x β / 3,
    ending at β x (pre - lost) when every byte of the flight is acknowledged or lost."""
    line, states, _, _ = run(path, "rapid", "10MB", ["--cc", "cubic-iw32", "--sender", "rfc9438", "--rapid-start"])
    r = line["rapid_start"]
    print("rapid start", json.dumps(r))
    assert r["acked_3x_bytes"] > 0 and r["pre_cwnd_bytes"] > 0 and r["end_cwnd_bytes"], r
    assert not line["hystart_exit"], "Rapid Start leaves slow start only on a loss"
    beta, k = 0.7, 2 / 3
    silence, ack = beta + k * (1 - beta), k * (1 - beta)
    pre = r["pre_cwnd_bytes"]
    want = max(pre * silence - ack * r["recovery_acked_bytes"] - silence * r["recovery_lost_bytes"], pre * beta / 3)
    assert abs(r["end_cwnd_bytes"] - want) <= 2 * DATAGRAM, (r, want)
    # The sender's own record agrees: the first state with ssthresh is the loss's.
    first = next(s for s in states if s.get("ssthresh") is not None)
    assert first["congestion_window"] <= pre, (first, pre)
