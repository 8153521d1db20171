"""Root integration tests: Quick-Start on the wire, decoded from captures with the codec.

A dumbbell (routers r1, r2 with the delay core between them) carries one HTTP fetch
cl1 ← sv1. Captures: at r2-eth1, where the server's SYN-ACK enters the path untouched;
at r1-eth0, after both routers' Quick-Start programs (the client's view, and its ACK).
The clean_machine fixture proves that nothing — struct_ops, pins, cgroup attachments,
namespaces, links, processes — is left afterwards.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from wire import quickstart as qs
from hosts.apps import HTTP_PORT, Iperf3Server, Lighttpd, curl_fetch, make_object
from hosts.bpf import loader
from hosts.capture import start_captures
from hosts.implementations.base import InstallContext
from hosts.implementations.quickstart import QuickStart, router_counters
from hosts.process import NodeProcess
from timing import timing_check
from topologies.network import Network
from topologies.names import CLIENT_NET, GATEWAY_HOST, SERVER_NET
from links.profiles import LinkProfile
import wiretrace
from wiretrace import ACK, MSS, SYN, Packet, paced_flight, pacing_span_ok, read_pcap, test_profile

pytestmark = [pytest.mark.root, pytest.mark.virtual_clock, pytest.mark.usefixtures("clean_machine")]

def profile(rate_mbps: float = 20, rtt_ms: float = 60) -> LinkProfile:
    return test_profile("test-qs", rate_mbps, rtt_ms)


def ip_checksum_ok(path: Path) -> bool:
    """Every IPv4 header in the capture has a valid checksum (options included)."""
    return all(wiretrace.ip_checksum_ok(p.ip_header) for p in read_pcap(path))


@dataclass
class Handshake:
    synack: Packet
    ack: Packet
    flight: list[Packet]          # server data sent before the first ACK of data returned
    data: list[Packet]            # all server data, in time order
    first_ack_ts: float           # when the first ACK of data came back


def handshake(packets: list[Packet], client_ip: str, server_ip: str) -> Handshake:
    conn = [p for p in packets if {p.src, p.dst} == {client_ip, server_ip}]
    synack = next(p for p in conn if p.src == server_ip and p.flags & SYN and p.flags & ACK)
    ack = next(p for p in conn if p.src == client_ip and p.ts >= synack.ts and not p.flags & SYN)
    data_acked = next((p for p in conn if p.src == client_ip and p.ts > synack.ts and p.flags & ACK
                       and (p.ack - synack.seq) % 2 ** 32 > 1), None)
    end = data_acked.ts if data_acked else float("inf")
    data = [p for p in conn if p.src == server_ip and p.payload > 0]
    return Handshake(synack, ack, [p for p in data if p.ts < end], data, end)


def fetch(tmp_path: Path, prof: LinkProfile, *, server: dict, qs_routers: tuple[int, ...] = (1, 2),
          router: dict | None = None, size: int = 400_000, udp_load_mbps: float = 0,
          per_router: dict[int, dict] | None = None) -> dict:
    """One fetch cl1 ← sv1 with Quick-Start on sv1, cl1 and the routers `qs_routers`, each
    with `router`'s parameters or its own from `per_router`."""
    impl = QuickStart()
    with Network(prof, tmp_path / "net") as net:
        n, inst = net.names, net.instance
        cl1, sv1 = net.host(n.client(1)), net.host(n.server(1))
        r1, r2 = net.host(n.router(1)), net.host(n.router(2))
        ctx = {cl1.name: InstallContext(gateway=f"{CLIENT_NET}.{GATEWAY_HOST}", rate_bps=prof.rate_bps("down"),
                                        rtt_s=prof.rtt_s, instance=inst),
               sv1.name: InstallContext(gateway=f"{SERVER_NET}.{GATEWAY_HOST}", rate_bps=prof.rate_bps("down"),
                                        rtt_s=prof.rtt_s, instance=inst)}
        parts = [(sv1, "server", impl.resolve(server)), (cl1, "client", impl.resolve({}))]
        for k in qs_routers:
            node = net.host(n.router(k))
            ctx[node.name] = InstallContext(rate_bps=prof.rate_bps("down"), rtt_s=prof.rtt_s, instance=inst)
            parts.append((node, "router", impl.resolve((per_router or {}).get(k, router or {}))))
        docroot = tmp_path / "www"
        url = make_object(docroot, size)
        server_pcap, client_pcap = tmp_path / "server-side.pcap", tmp_path / "client-side.pcap"
        installed, procs, captures = [], [], []
        try:
            for node, role, params in parts:
                impl.install(node, role, params, ctx[node.name])
                installed.append((node, role, params))
            procs.append(Lighttpd(sv1, n.server_ip(1), docroot, tmp_path, inst))
            captures = start_captures([(r2, f"{n.router(2)}-eth1", server_pcap),
                                       (r1, f"{n.router(1)}-eth0", client_pcap)], inst)
            if udp_load_mbps:
                (tmp_path / "udp").mkdir()
                procs.append(Iperf3Server(net.host(n.server(2)), tmp_path / "udp", inst))
                procs.append(NodeProcess(net.host(n.client(2)), [
                    "iperf3", "-c", n.server_ip(2), "-R", "-u", "-b", f"{udp_load_mbps:g}M", "-l", "1400",
                    "-t", "6"], inst, "iperf3 udp", log_path=tmp_path / "udp" / "udp.log"))
                time.sleep(1.5)
            got = curl_fetch(cl1, f"http://{n.server_ip(1)}:{HTTP_PORT}{url}", tmp_path, inst, 60)
            assert got["http_code"] == 200 and int(got["size_download"]) == size, got
            counters = qs_counters(net, ctx, qs_routers)
        finally:
            stop_all(captures, procs, impl, installed, ctx)
        assert loader.qs_host_counters(inst, n.server_ip(1)) is None, "remove left the server's entry"
        run = {"server_packets": read_pcap(server_pcap), "ips": (n.client_ip(1), n.server_ip(1)),
               "server_side": handshake(read_pcap(server_pcap), n.client_ip(1), n.server_ip(1)),
               "client_side": handshake(read_pcap(client_pcap), n.client_ip(1), n.server_ip(1)),
               "checksums_ok": ip_checksum_ok(server_pcap) and ip_checksum_ok(client_pcap),
               "counters": counters, "rtt_s": prof.rtt_s}
    # The host flags are final only after teardown (the monitor stops there): the first
    # flight and its pacing are release times and RTTs, the delay flags' business.
    run["delay_flags"] = net.host_flags("delay")
    return run


def qs_counters(net: Network, ctx: dict[str, InstallContext], routers: tuple[int, ...]) -> dict:
    """What the Quick-Start parts counted: cl1's and sv1's host entries, the routers'."""
    n, inst = net.names, net.instance
    return {"server": loader.qs_host_counters(inst, n.server_ip(1)),
            "client": loader.qs_host_counters(inst, n.client_ip(1)),
            "routers": {k: router_counters(ctx[net.host(n.router(k)).name], net.host(n.router(k)))
                        for k in routers}}


def stop_all(captures: list, procs: list, impl: QuickStart, installed: list, ctx: dict[str, InstallContext]) -> None:
    """Captures, then processes, then the installed parts, last first."""
    for c in captures:
        c.stop()
    for p in reversed(procs):
        p.stop()
    for node, role, params in reversed(installed):
        impl.remove(node, role, params, ctx[node.name])


def request_and_echo(run: dict) -> tuple[qs.QsRequest, qs.QsRequest, qs.QsResponse | None]:
    sent = qs.find_request(run["server_side"].synack.ip_options)
    arrived = qs.find_request(run["client_side"].synack.ip_options)
    assert sent is not None, "the SYN-ACK left the server without the Quick-Start option"
    assert arrived is not None, "the option did not survive the path"
    assert run["checksums_ok"], "an IPv4 header checksum is wrong after inserting/rewriting the option"
    return sent, arrived, qs.find_response(run["client_side"].ack.tcp_options)


def test_approved_request_is_echoed_and_the_first_flight_follows_equation_1(tmp_path):
    prof = profile(20, 60)
    run = fetch(tmp_path, prof, server={"base_cc": "reno", "request": "link"})
    sent, arrived, echo = request_and_echo(run)
    assert sent.func == qs.FUNC_REQUEST and sent.rate_code == qs.bps_to_code(20e6) == 8
    # two Quick-Start routers approved: QS TTL and IP TTL both lower by two, rate and nonce kept
    assert arrived.rate_code == sent.rate_code and arrived.nonce == sent.nonce
    assert arrived.qs_ttl == (sent.qs_ttl - 2) % 256
    assert run["client_side"].synack.ttl == run["server_side"].synack.ttl - 2
    # the client's ACK echoes rate, TTL diff and nonce in option 27
    assert echo is not None, "the client's ACK carries no option 27"
    remembered = qs.SentRequest(sent.rate_code, qs.ttl_diff(run["server_side"].synack.ttl, sent.qs_ttl), sent.nonce)
    assert echo.rate_code == arrived.rate_code
    assert echo.ttl_diff == qs.ttl_diff(run["client_side"].synack.ttl, arrived.qs_ttl) == remembered.ttl_diff
    assert qs.validate_response(remembered, echo) == "approved"
    c = run["counters"]
    assert c["server"]["approved"] == 1 and c["server"]["errors"] == 0, c
    assert c["client"]["requests_seen"] == 1 and c["client"]["echoes_sent"] == 1, c
    assert all(r["requests"] == 1 and r["approved"] == 1 for r in c["routers"].values()), c
    # Equation 1 over the server's handshake RTT sample, and the flight on the wire
    expected = qs.qs_window_segments(qs.code_to_bps(echo.rate_code), c["server"]["last_rtt_us"] / 1e6, MSS, 52)
    assert abs(c["server"]["last_cwnd"] - expected) <= 1
    server_side, rtt = run["server_side"], c["server"]["last_rtt_us"] / 1e6
    flight = paced_flight(server_side.data, server_side.first_ack_ts, round(expected), rtt)
    flags = run["delay_flags"]
    timing_check("paced first flight within 3 segments of Equation 1", flags, abs(len(flight) - expected) <= 3,
                 f"{len(flight)} paced, {expected:.1f} expected")
    # An upper bound the window keeps whatever the host: no more than cwnd leaves before an ACK.
    assert len(server_side.flight) <= expected + 3, (len(server_side.flight), expected)
    ok, span, ideal = pacing_span_ok(flight, rtt, rtt)
    timing_check("first flight paced over about one RTT", flags, ok,
                 f"span {span * 1e3:.1f} ms, ideal {ideal * 1e3:.1f} ms")


def test_router_short_of_capacity_reduces_the_rate_and_rerandomises_the_nonce(tmp_path):
    prof = profile(20, 60)
    # the routers believe they have 3 Mbit/s: 0.9 x 3 = 2.7 Mbit/s → r2 (first on the
    # SYN-ACK's way) reduces code 8 to 6 (2.56 Mbit/s), r1 approves 6
    run = fetch(tmp_path, prof, server={"base_cc": "cubic", "request": "link"},
                router={"capacity_mbps": 3.0}, size=200_000)
    sent, arrived, echo = request_and_echo(run)
    assert sent.rate_code == 8 and arrived.rate_code == 6
    assert arrived.qs_ttl == (sent.qs_ttl - 2) % 256
    assert qs.nonce_matches(sent.nonce, arrived.nonce, 6)       # the steps 6 → 0 are untouched
    routers = run["counters"]["routers"]
    assert routers[2]["reduced"] == 1 and routers[1]["approved"] == 1, routers
    assert routers[2]["granted_bps"] == routers[1]["granted_bps"] == qs.code_to_bps(6)
    assert echo is not None and echo.rate_code == 6
    server = run["counters"]["server"]
    assert server["approved"] == 1 and server["last_rate_code"] == 6, server
    rtt = server["last_rtt_us"] / 1e6
    expected = qs.qs_window_segments(qs.code_to_bps(6), rtt, MSS, 52)
    server_side = run["server_side"]
    flight = paced_flight(server_side.data, server_side.first_ack_ts, round(expected), rtt)
    flags = run["delay_flags"]
    timing_check("paced first flight within 3 segments of the reduced rate's window", flags,
                 abs(len(flight) - expected) <= 3, f"{len(flight)} paced, {expected:.1f} expected")
    assert len(server_side.flight) <= expected + 3, (len(server_side.flight), expected)   # cwnd's bound


def test_path_with_a_router_without_quick_start_falls_back_to_slow_start(tmp_path):
    prof = profile(20, 60)
    run = fetch(tmp_path, prof, server={"base_cc": "reno", "request": "link"}, qs_routers=(2,))
    sent, arrived, echo = request_and_echo(run)
    assert arrived.qs_ttl == (sent.qs_ttl - 1) % 256          # r2 approved, r1 ignored the option
    assert run["client_side"].synack.ttl == run["server_side"].synack.ttl - 2
    assert echo is not None
    c = run["counters"]["server"]
    assert c["ttl_mismatch"] == 1 and c["approved"] == 0, c
    assert len(run["server_side"].flight) == 3                # the initial window: slow start


def test_loaded_link_makes_the_router_reject(tmp_path):
    prof = profile(20, 60)
    run = fetch(tmp_path, prof, server={"base_cc": "reno", "request": "link"}, udp_load_mbps=19, size=100_000)
    sent, arrived, echo = request_and_echo(run)
    assert arrived.rate_code == 0
    assert run["counters"]["routers"][2]["rejected"] == 1, run["counters"]
    assert echo is not None and echo.rate_code == 0
    assert run["counters"]["server"]["rejected"] == 1 and run["counters"]["server"]["approved"] == 0
    assert len(run["server_side"].flight) == 3


def test_workload_records_the_router_counters_and_the_offered_loads_link_use(tmp_path):
    """The competing workload with an offered load (two bulk flows shaped to 30 % of 20
    Mbit/s) and a Quick-Start fetch: both routers' and the server's counters reach meta.json, the shaper
    leaves nothing behind, and the queue's counters give utilisation and drop rate."""
    from analysis.workloads.competing import run_metrics
    from hosts.session import RunSession
    from hosts.variants import get_variant
    from hosts.workloads.competing import WORKLOAD

    prof = profile(20, 60)
    workdir = tmp_path / "run"
    workdir.mkdir()
    params = {**{k: p.default for k, p in WORKLOAD.params.items()}, "long_load": 0.3, "long_streams": 2,
              "settle_s": 2}
    with Network(prof, tmp_path / "net") as net:
        with RunSession(net, get_variant("qs-reno"), workdir, tmp_path / "scratch", get_variant) as session:
            result = WORKLOAD.run(session, params, 100_000)
        app = {**result.extra, **session.record(), "spec": result.spec}
        sv2 = net.host(net.names.server(2))
        assert "tbf" not in sv2.cmd(f"tc qdisc show dev {app['load_shaper']['intf']}")
        routers = [net.host(r).name for r in net.names.routers_list()]
        sv1 = net.host(net.names.server(1)).name
    # 0.9 × 20 Mbit/s − 6 Mbit/s of load leaves 12: the request of 10.24 Mbit/s is approved
    assert sorted(app["router_counters"]) == sorted(routers)
    for c in app["router_counters"].values():
        assert (c["requests"], c["approved"], c["reduced"], c["rejected"]) == (1, 1, 0, 0), c
        assert c["granted_bps"] == qs.code_to_bps(8)
    server = app["server_counters"][sv1]
    assert (server["requests_sent"], server["echoes"], server["approved"], server["restart_requests"]) == (1, 1, 1, 0)
    assert app["load_shaper"]["rate_bps"] == 0.3 * prof.rate_bps("down")
    use = app["link_use"]
    assert use["dropped_pkts"] == 0 and use["drop_rate"] == 0.0, use
    assert use["utilisation"] == pytest.approx(use["sent_bytes"] * 8 / use["seconds"] / prof.rate_bps("down"))
    # The load alone is 0.3 of the link: a delivered rate, tbf's to meet on a punctual host.
    timing_check("link utilisation between 0.2 and 1.0", net.host_flags("rate"), 0.2 <= use["utilisation"] <= 1.0,
                 f"utilisation {use['utilisation']:.3f}")
    block = run_metrics(workdir, app["spec"], MSS)["quickstart"]
    assert block["approved"] and block["approved_bps"] == qs.code_to_bps(8) and not block["qs_failure"]
