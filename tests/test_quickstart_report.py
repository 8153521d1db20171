"""Root integration tests: the Report of Approved Rate (RFC 4782 §3.1, §4.4) on the wire,
and an Extreme Quick-Start router that reads it (Allman/Floyd/Sarolahti §6.2).

The fetch of test_quickstart.py (cl1 ← sv1 over r2 then r1; captures where the server's
packets enter the path, at r2-eth1). The sender reports after every request's outcome,
on the connection's next packet (the first data packet, or the ACK of the request when
that leaves first): the approved code with the request's nonce when it was
approved, 0 when it was not. r2 is an Extreme router: it keeps the approval per flow,
counts the bytes of the flow's Quick-Start phase (one RTT from its first packet, the RTT
from the handshake r2 saw), and takes back what a lower report returns.
"""
from __future__ import annotations

import pytest

from wire import quickstart as qs
from wire.tcpip import ETH_HEADER
from test_quickstart import fetch, profile, request_and_echo
from timing import timing_check
from wiretrace import ACK, SYN

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

EXTREME = {"algorithm": "extreme"}
# The capture at r2-eth1 and r2's program see a packet within one pass of r2's forwarding,
# except when the host schedules that pass late: the slack between the two clocks.
CLOCKS_SLACK_S = 0.002


def first_after_handshake(run: dict):
    """The server's first packet after its SYN-ACK: where the report belongs (RFC 4782 §3.1:
    the first Quick-Start data packet, or a control packet before it, e.g. the ACK of the
    HTTP request when it leaves before the response)."""
    client_ip, server_ip = run["ips"]
    first = next(p for p in run["server_packets"] if p.src == server_ip and p.dst == client_ip
                 and not p.flags & SYN)
    assert first.ts <= run["server_side"].data[0].ts
    return first


def phase_on_wire(run: dict) -> tuple[int, float]:
    """(frame bytes the server sent in r2's Quick-Start phase as the capture beside r2 saw
    them, r2's handshake RTT): r2 times the phase by its own view of the handshake, the
    client's SYN to its first ACK, from the flow's first packet after it (the report), and
    counts frames as tc does (skb->len, from the Ethernet header). Generous by
    CLOCKS_SLACK_S: an upper bound of what r2 can have counted."""
    client_ip, server_ip = run["ips"]
    pk = run["server_packets"]
    syn = next(p for p in pk if p.src == client_ip and p.flags & SYN and not p.flags & ACK)
    ack = next(p for p in pk if p.src == client_ip and p.ts > syn.ts and p.flags & ACK and not p.flags & SYN)
    rtt = ack.ts - syn.ts
    t0 = first_after_handshake(run).ts
    return sum(ETH_HEADER + len(p.ip_header) + 20 + len(p.tcp_options) + p.payload for p in pk
               if p.src == server_ip and p.dst == client_ip and t0 <= p.ts < t0 + rtt + CLOCKS_SLACK_S), rtt


def reports_of(run: dict) -> list[tuple[float, qs.QsRequest]]:
    """The Reports of Approved Rate the server's packets carried, with their packets."""
    client_ip, server_ip = run["ips"]
    out = []
    for p in run["server_packets"]:
        o = qs.find_request(p.ip_options) if p.src == server_ip and p.dst == client_ip else None
        if o is not None and o.func == qs.FUNC_REPORT:
            out.append((p, o))
    return out


def test_an_approved_request_is_reported_on_the_next_packet_and_tracked_by_an_extreme_router(tmp_path):
    prof = profile(20, 60)
    run = fetch(tmp_path, prof, server={"base_cc": "reno", "request": "link"}, per_router={1: EXTREME, 2: EXTREME})
    sent, arrived, echo = request_and_echo(run)
    assert echo is not None and qs.validate_response(
        qs.SentRequest(sent.rate_code, qs.ttl_diff(run["server_side"].synack.ttl, sent.qs_ttl), sent.nonce),
        echo) == "approved"
    reports = reports_of(run)
    assert [p for p, _ in reports] == [first_after_handshake(run)], "one report, on the first packet after it"
    report = reports[0][1]
    assert report.rate_code == echo.rate_code and report.nonce == sent.nonce
    c = run["counters"]
    assert (c["server"]["reports_sent"], c["server"]["reports_zero"], c["server"]["errors"]) == (1, 0, 0), c
    r2 = c["routers"][2]
    assert (r2["requests"], r2["approved"], r2["tracked"], r2["tracked_used"]) == (1, 1, 1, 1), r2
    assert (r2["reports"], r2["reports_lower"], r2["reports_untracked"], r2["returned_bps"]) == (1, 0, 0, 0), r2
    # The flow's Quick-Start phase at r2: one RTT (r2's view of the handshake) from its first
    # packet. r2 counts only what passed it then, whatever the host's timing.
    wire, r2_rtt = phase_on_wire(run)
    assert 0 < r2["phase_bytes"] <= wire, (r2["phase_bytes"], wire, r2_rtt)
    # On a punctual host r2's RTT is the path's, and the phase holds most of Equation 1's
    # window at the approved rate and little else. A handshake the host made late lengthens
    # r2's phase into the slow start after it (measured: r2's view 64–66 ms of a 60 ms path,
    # 120 554 bytes against 76 800 at the rate).
    expected = qs.code_to_bps(report.rate_code) / 8 * prof.rtt_s
    timing_check("the Quick-Start phase at the router holds most of the approved window and little else",
                 run["delay_flags"], 0.5 * expected <= r2["phase_bytes"] <= 1.3 * expected,
                 f"{r2['phase_bytes']} bytes ({wire} on the wire), {expected:.0f} at the rate, "
                 f"r2's RTT {r2_rtt * 1e3:.1f} ms")


def test_a_request_denied_downstream_is_reported_as_zero_and_the_extreme_router_takes_it_back(tmp_path):
    prof = profile(20, 60)
    # r2 (first on the SYN-ACK's way) is Extreme and approves; r1 may grant nothing (qs_thresh 0)
    run = fetch(tmp_path, prof, server={"base_cc": "reno", "request": "link"}, size=100_000,
                per_router={2: EXTREME, 1: {"qs_thresh": 0.0}})
    sent, arrived, echo = request_and_echo(run)
    assert arrived.rate_code == 0 and echo is not None and echo.rate_code == 0
    reports = reports_of(run)
    assert [p for p, _ in reports] == [first_after_handshake(run)], "one report, on the first packet after it"
    assert reports[0][1].rate_code == 0 and reports[0][1].nonce == sent.nonce
    c = run["counters"]
    assert (c["server"]["rejected"], c["server"]["reports_sent"], c["server"]["reports_zero"]) == (1, 1, 1), c
    r2, r1 = c["routers"][2], c["routers"][1]
    assert (r2["approved"], r1["rejected"]) == (1, 1), c["routers"]
    granted = qs.code_to_bps(sent.rate_code)
    assert r2["granted_bps"] == granted, r2
    # the report returns r2's whole approval to the pool
    assert (r2["reports"], r2["reports_lower"], r2["returned_bps"]) == (1, 1, granted), r2
    assert r1["reports"] == 1 and r1["reports_lower"] == 0, r1      # a Basic router only counts it
    assert len(run["server_side"].flight) == 3                       # slow start from the initial window
