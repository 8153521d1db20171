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
from hosts.variants import get_variant
from links.profiles import LinkProfile
from timing import timing_check
from topologies.network import Network

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

SIZE = 20_000_000
OPEN = 0                                         # TCP_CA_Open


def exits(tmp: Path, variants: tuple[str, ...], buffer_pkts: int = 1700) -> dict:
    """Each variant's first slow-start exit (None: it never left slow start), its server's
    counters, and the host's flags."""
    prof = LinkProfile(name="test-hystart", down_mbps=50, up_mbps=50, rtt_ms=100, buffer_pkts=buffer_pkts)
    out = {}
    with Network(prof, tmp / "net") as net:
        n = net.names
        sv, cl = net.host(n.server(1)), net.host(n.client(1))
        for name in variants:
            work = tmp / name
            work.mkdir()
            with RunSession(net, get_variant(name), work, tmp / f"scratch-{name}", get_variant) as s:
                s.install_under_test(server=[sv], client=[cl])
                url = make_object(s.scratch / "www", SIZE)
                s.adopt("lighttpd", Lighttpd(sv, n.server_ip(1), s.scratch / "www", work, s.instance))
                s.flow("short", sv, cl, HTTP_PORT, SIZE)
                s.ready()
                got = curl_fetch(cl, f"http://{n.server_ip(1)}:{HTTP_PORT}{url}", work, s.instance, 120)
                assert got["http_code"] == 200 and int(got["size_download"]) == SIZE, got
            record = s.record()
            flow = record["flows"][0]
            assert flow["observed_cc"] and flow["connections_seen"] == 1, flow
            out[name] = {"exit": flow["ss_exits"][0], "cc": flow["observed_cc"],
                         "counters": next(iter(record.get("server_counters", {}).values()), {})}
            print(name, out[name])
    out["flags"] = net.host_flags("delay")
    return out


def test_the_bpf_base_leaves_slow_start_as_the_kernels_cubic_and_hystart_off_never_on_delay(tmp_path):
    got = exits(tmp_path, ("cubic-iw10", "cubic-bpf", "cubic-hystart-off"))
    kernel, base, off = got["cubic-iw10"]["exit"], got["cubic-bpf"]["exit"], got["cubic-hystart-off"]["exit"]
    assert got["cubic-iw10"]["cc"] == ["cubic"] and got["cubic-bpf"]["cc"][0].endswith("_cubic"), got
    # The kernel's CUBIC: HyStart ends slow start here, in the Open state, before any loss.
    assert kernel and kernel["ca_state"] == OPEN and kernel["total_retrans"] == 0, kernel
    # The BPF base is the kernel's code: it leaves the same way ...
    assert base and base["ca_state"] == OPEN and base["total_retrans"] == 0, base
    # ... at a window like the kernel's (HyStart's ACK-train and delay samples depend on when
    # ACKs arrive, so the window is a timing figure).
    timing_check("the BPF base's HyStart exit within 0.5-2 x the kernel's", got["flags"],
                 0.5 <= base["cwnd"] / kernel["cwnd"] <= 2, f"{base['cwnd']} against {kernel['cwnd']} segments")
    # HyStart off: slow start never ends on delay: only a loss ends it (or the transfer does).
    assert off is None or off["total_retrans"] > 0 or off["ca_state"] != OPEN, off
    if off is not None:       # the loss came far past where HyStart stopped the kernel's CUBIC
        assert off["ssthresh"] > kernel["ssthresh"], (off, kernel)


def test_hystartpp_enters_css_on_the_rtt_increase_and_leaves_it_after_css_rounds(tmp_path):
    """RFC 9406 on the wire: once a round's least RTT (of at least N_RTT_SAMPLE samples)
    has risen by the threshold, Conservative Slow Start; a CSS round whose least RTT falls
    below the one that started it returns to slow start (measured here: the first entries
    are spurious, the rest of the round brings lower samples); after CSS_ROUNDS (5) rounds
    of CSS, congestion avoidance with ssthresh = cwnd, before any loss. A buffer of 8000
    packets holds what CSS adds (with 1700, a loss came in the fourth CSS round)."""
    got = exits(tmp_path, ("cubic-hystartpp",), buffer_pkts=8000)["cubic-hystartpp"]
    logs = got["counters"]["hystartpp"]
    assert len(logs) == 1, logs
    events = logs[0]["events"]
    phases = [(e["old"], e["new"]) for e in events]
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
