"""Root integration test: Quick-Start after idle (Scharf's Linux implementation) on the wire.

One persistent HTTP/1.1 connection cl1 ← sv1 (hosts/phttp_client.py) fetches an object,
sits idle for 2 s (several RTOs: the kernel restarts it from a smaller window), and
fetches it again. Quick-Start on sv1, cl1 and both routers. On the wire:
- the first data segment after the idle period carries a Quick-Start Request, and it is
  the only data segment of the second response that does; it leaves the server at most
  1500 bytes, since the server's route MTU left 8 bytes for it;
- both routers approve it (QS TTL two less, rate and nonce kept);
- the client's next ACK echoes it in option 27;
- once the echo is back, the server releases Equation 1's window paced at window / RTT
  (the RTT its estimate held at the echo) until the first of them is acknowledged, and
  the first of them carries the Report of Approved Rate: the approved code, the nonce.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wire import quickstart as qs
from hosts.apps import HTTP_PORT, Lighttpd, make_object
from hosts.capture import start_captures
from hosts.implementations.base import InstallContext
from hosts.implementations.quickstart import QuickStart
from hosts.process import NodeProcess, wait_until
from test_quickstart import qs_counters, stop_all
from timing import timing_check
from topologies.network import Network
from topologies.names import CLIENT_NET, GATEWAY_HOST, SERVER_NET
from wiretrace import Packet, read_pcap, test_profile

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

CLIENT = Path(__file__).resolve().parent.parent / "hosts" / "phttp_client.py"
SIZE = 300_000
IDLE_S = 2.0
HEADERS = 20 + 32                 # IPv4 and TCP with timestamps


def ip_len(p: Packet) -> int:
    return len(p.ip_header) + HEADERS - 20 + p.payload


def run_idle_fetch(tmp_path: Path, router: dict | None = None, server: dict | None = None) -> dict:
    prof = test_profile("test-qs", 20, 60)
    impl = QuickStart()
    with Network(prof, tmp_path / "net") as net:
        n, inst = net.names, net.instance
        cl1, sv1 = net.host(n.client(1)), net.host(n.server(1))
        ctx = {cl1.name: InstallContext(gateway=f"{CLIENT_NET}.{GATEWAY_HOST}", rate_bps=prof.rate_bps("down"),
                                        rtt_s=prof.rtt_s, instance=inst, defaults=net.defaults),
               sv1.name: InstallContext(gateway=f"{SERVER_NET}.{GATEWAY_HOST}", rate_bps=prof.rate_bps("down"),
                                        rtt_s=prof.rtt_s, instance=inst, defaults=net.defaults)}
        parts = [(sv1, "server", impl.resolve({"base_cc": "reno", "request": "link", **(server or {})})),
                 (cl1, "client", impl.resolve({}))]
        for k in (1, 2):
            node = net.host(n.router(k))
            ctx[node.name] = InstallContext(rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s, instance=inst)
            parts.append((node, "router", impl.resolve(router or {})))
        docroot = tmp_path / "www"
        url = make_object(docroot, SIZE)
        server_pcap, client_pcap, out = tmp_path / "server-side.pcap", tmp_path / "client-side.pcap", tmp_path / "c.json"
        installed, procs, captures = [], [], []
        try:
            for node, role, params in parts:
                impl.install(node, role, params, ctx[node.name])
                installed.append((node, role, params))
            route = sv1.cmd("ip route show default")
            procs.append(Lighttpd(sv1, n.server_ip(1), docroot, tmp_path, inst))
            captures = start_captures([(net.host(n.router(2)), f"{n.router(2)}-eth1", server_pcap),
                                       (net.host(n.router(1)), f"{n.router(1)}-eth0", client_pcap)], inst)
            client = NodeProcess(cl1, [sys.executable, str(CLIENT), "--server", n.server_ip(1), "--port",
                                       str(HTTP_PORT), "--path", url, "--path", url, "--pause", "0",
                                       "--pause", str(IDLE_S), "--out", str(out)], inst, "phttp client",
                                 log_path=tmp_path / "client.log")
            procs.append(client)
            assert wait_until(lambda: not client.running(), 90), "the client did not finish"
            result = json.loads(out.read_text())
            assert result["error"] is None and [r["length"] for r in result["requests"]] == [SIZE, SIZE], result
            counters = qs_counters(net, ctx, (1, 2))
        finally:
            stop_all(captures, procs, impl, installed, ctx)
        ips = (n.client_ip(1), n.server_ip(1))
        run = {"server": [p for p in read_pcap(server_pcap) if {p.src, p.dst} == set(ips)],
               "client": [p for p in read_pcap(client_pcap) if {p.src, p.dst} == set(ips)],
               "ips": ips, "counters": counters, "requests": result["requests"], "route": route}
    run["delay_flags"] = net.host_flags("delay")
    return run


def test_a_request_after_idle_is_approved_echoed_and_its_window_paced(tmp_path):
    check_request_after_idle(run_idle_fetch(tmp_path))


def test_a_request_after_idle_leaves_on_the_first_segment_when_the_window_restarts_large(tmp_path):
    """A restart window of 10 segments (the server's `iw`, the route's initcwnd): the kernel
    may put two segments in each packet of the first flight after idle (it does once half
    the window exceeds one segment and 1 ms at the pacing rate from before the idle period
    exceeds one segment), where the tc sender has no room for a request. The congestion
    control asks for packets of one segment in that flight; before it did, the request
    waited for the response's last, short segment. With the default `iw` of 3 the window
    restarts at 3, and the kernel sends one segment at a time anyway, unless an RTO
    inflated on a busy host took fewer halvings off the window during the idle period."""
    check_request_after_idle(run_idle_fetch(tmp_path, server={"iw": 10}))


def check_request_after_idle(run: dict) -> None:
    client_ip, server_ip = run["ips"]
    assert "mtu lock 1492" in run["route"], run["route"]
    second_sent = run["requests"][1]["sent"]
    # The server's data of the second response, as it left the server (before the routers)
    data = [p for p in run["server"] if p.src == server_ip and p.payload > 0]
    after = [p for p in data if p.ts > second_sent]
    assert after, "no data after the idle period"
    options = [(p, qs.find_request(p.ip_options)) for p in after]
    with_request = [p for p, o in options if o is not None and o.func == qs.FUNC_REQUEST]
    assert with_request == [after[0]], ("the request rides on the first data segment after idle, and only there",
                                        [(p.seq - after[0].seq, p.payload) for p in with_request], run["counters"])
    sent = qs.find_request(after[0].ip_options)
    assert sent.func == qs.FUNC_REQUEST and sent.rate_code == qs.bps_to_code(20e6)
    # Room for it: every segment 8 bytes short of the MTU, those with the option (this request,
    # the reports) at most the MTU
    assert max(ip_len(p) for p in data if qs.find_request(p.ip_options) is None) <= 1492
    assert max(ip_len(p) for p in data if qs.find_request(p.ip_options) is not None) <= 1500
    # Both routers approved it on its way to the client
    arrived_pkt = next(p for p in run["client"] if p.src == server_ip and p.seq == after[0].seq and p.payload)
    arrived = qs.find_request(arrived_pkt.ip_options)
    assert arrived is not None and arrived.rate_code == sent.rate_code and arrived.nonce == sent.nonce
    assert arrived.qs_ttl == (sent.qs_ttl - 2) % 256
    # The client's next ACK echoes it
    echo_pkt = next((p for p in run["client"] if p.src == client_ip and p.ts >= arrived_pkt.ts
                     and qs.find_response(p.tcp_options) is not None), None)
    assert echo_pkt is not None, "no ACK after the request carries option 27"
    echo = qs.find_response(echo_pkt.tcp_options)
    remembered = qs.SentRequest(sent.rate_code, qs.ttl_diff(after[0].ttl, sent.qs_ttl), sent.nonce)
    assert qs.validate_response(remembered, echo) == "approved"
    c = run["counters"]
    assert c["server"]["restart_requests"] == 1 and c["server"]["restart_approved"] == 1, c
    assert c["server"]["errors"] == 0 and c["client"]["errors"] == 0, c
    assert c["client"]["requests_seen"] == 2 and c["client"]["echoes_sent"] == 2, c   # handshake, after idle
    # The approved window once the echo is back at the server: Equation 1 over its RTT, paced
    echo_at_server = next(p for p in run["server"] if p.src == client_ip and p.ts > second_sent
                          and qs.find_response(p.tcp_options) is not None)
    rtt = c["server"]["last_rtt_us"] / 1e6
    window = c["server"]["last_cwnd"]
    mss = max(p.payload for p in data)                              # the route MTU's, 8 bytes short
    assert abs(window - qs.qs_window_segments(qs.code_to_bps(echo.rate_code), rtt, mss, 52)) <= 1
    # The paced round: from the echo until the first segment sent after it is acknowledged
    first_new = next(p for p in after if p.ts > echo_at_server.ts)
    round_end = next(p.ts for p in run["server"] if p.src == client_ip and p.ts > first_new.ts
                     and 0 < (p.ack - first_new.seq) % 2 ** 32 < 2 ** 31)
    released = [p for p in after if echo_at_server.ts < p.ts < round_end]
    # The window's bound, plus what the base algorithm's slow start adds for the ACKs of data
    # sent before the round that arrive in it (the echo's own among them): cwnd = max(cwnd, Q)
    # is applied on the echo, and the ACKs behind it grow it as any ACK does. How many there
    # are is the host's timing (measured on a real-clock run: 3 such ACKs, 68 released for Q = 65).
    def acked_by(lo: float, hi: float) -> int:
        """How far into the response after idle the client's ACKs in [lo, hi) reached."""
        return max((r for p in run["server"] if p.src == client_ip and lo <= p.ts < hi
                    for r in [(p.ack - after[0].seq) % 2 ** 32] if r < 2 ** 31), default=0)
    pre_round = (first_new.seq - after[0].seq) % 2 ** 32
    grown = -(-(min(acked_by(echo_at_server.ts, round_end), pre_round)
                - min(acked_by(second_sent, echo_at_server.ts), pre_round)) // mss)
    assert len(released) <= window + max(0, grown), (len(released), window, grown)
    # The first of them carries the Report of Approved Rate, and no other does
    reports = [(p, o) for p, o in options if o is not None and o.func == qs.FUNC_REPORT]
    assert [p for p, _ in reports] == [first_new], "the report rides on the first packet after the echo"
    assert reports[0][1].rate_code == echo.rate_code and reports[0][1].nonce == sent.nonce
    assert c["server"]["reports_sent"] == 2 and c["server"]["reports_zero"] == 0, c   # handshake, after idle
    flags = run["delay_flags"]
    gap, ideal = (released[-1].ts - released[0].ts) / (len(released) - 1), rtt / window
    # What the connection restarted from (sent before the echo): a window already as large as
    # Q leaves nothing to apply and the connection unpaced (the test below), which on the real
    # clock turns on how many halvings an RTO took off the window during the idle period.
    restarted = sum(1 for p in after if p.ts < echo_at_server.ts)
    timing_check("the approved window after idle paced at its rate, window / RTT", flags,
                 len(released) >= 10 and 0.65 * ideal <= gap <= 1.5 * ideal,
                 f"{len(released)} segments, {gap * 1e3:.2f} ms apart on average, ideal {ideal * 1e3:.2f} ms; "
                 f"{restarted} sent after idle before the echo, Q = {window}")


def test_an_approval_after_idle_below_the_window_leaves_the_connection_unpaced(tmp_path):
    """Routers that let Quick-Start fill 2.5 % of the link approve the request after idle at
    320 kbit/s: Equation 1 gives a window of one or two segments, no more than the window
    the connection restarts from, so nothing is applied. The pacing cap the approval came
    with must not stay behind: it once held persistent Web connections at the approved rate
    for minutes (160 kbit/s on a 10 Mbit/s link, until the client timed out)."""
    run = run_idle_fetch(tmp_path, router={"qs_thresh": 0.025})
    client_ip, server_ip = run["ips"]
    c = run["counters"]
    assert c["server"]["restart_requests"] == 1 and c["server"]["restart_approved"] == 1, c
    second = run["requests"][1]
    echo_at_server = next(p for p in run["server"] if p.src == client_ip and p.ts > second["sent"]
                          and qs.find_response(p.tcp_options) is not None)
    approved_bps = qs.code_to_bps(qs.find_response(echo_at_server.tcp_options).rate_code)
    # The window the connection restarted from: what it sent before the echo came back.
    restarted = [p for p in run["server"] if p.src == server_ip and p.payload > 0
                 and second["sent"] < p.ts < echo_at_server.ts]
    assert 0 < c["server"]["last_cwnd"] <= len(restarted), (c["server"], len(restarted))
    # At the approved rate the second response would take SIZE * 8 / approved_bps (7.5 s);
    # unpaced it slow-starts from its restart window over the 20 Mbit/s path (about 0.5 s).
    took = second["done"] - second["sent"]
    held = SIZE * 8 / approved_bps
    assert took < held / 3, f"the second response took {took:.2f} s; at the approved rate {held:.2f} s"
