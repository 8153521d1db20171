"""The competing workload over QUIC without root: the QUIC implementation's endpoint
arguments and declarations, the quic-* variants and scenario, the endpoints' reports,
and the analysis of crafted QUIC captures (first flight, losses by datagram hash,
fairness, the endpoint/wire cross-checks and the run's checks built on them)."""
from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis import flow_checks, packets, quic_flows
from analysis.workloads import competing as competing_analysis
from analysis.workloads import competing_quic
from hosts import quic_endpoints
from hosts.implementations.base import InstallContext
from hosts.implementations.quic import Quic, udp_payload
from hosts.session import RunSession
from hosts.variants import VARIANTS
from hosts.workloads import competing
from hosts.workloads.base import WorkloadError
from pcapcraft import Datagram, DumbbellCaptures
from config.yamlfile import FieldError
from machine.errors import UserError
from scenarios.spec import apply_overrides, load_scenario
from topologies.endhosts import EndHostDefaults
from links.profiles import get_profile

ROOT = Path(__file__).resolve().parent.parent
FULL = 1472
RTT = 0.050


def ctx(profile: str = "dsl-fast", rate_bps: float = 50e6, mtu: int = 1500) -> InstallContext:
    return InstallContext(rate_bps=rate_bps, rtt_s=RTT, profile=profile, access=get_profile(profile).access, mtu=mtu)


# ------------------------------------------------------------------ implementation, variants

def test_server_arguments_and_declaration() -> None:
    impl = Quic()
    base = impl.resolve({"cc": "cubic-iw32"})
    assert impl.endpoint_args("server", base, ctx()) == [
        "--udp-payload", "1472", "--cc", "cubic-iw32", "--sender", "rfc9438", "--pacing", "paper",
        "--ss-pacing-rtt", "0.5", "--ca-pacing-rtt", "0.75", "--hystart", "on"]
    d = impl.declares("server", base, EndHostDefaults())
    assert (d.cc, d.iw, d.transport) == (("cubic-iw32",), 32, "quic")
    blitz = impl.declares("server", impl.resolve({"cc": "blitz"}), EndHostDefaults())
    assert (blitz.cc, blitz.iw, blitz.transport) == (("blitz",), None, "quic")
    assert impl.declares("client", base, EndHostDefaults()) is None
    gquic = impl.resolve({"cc": "blitz", "sender": "gquic"})
    assert impl.declares("server", gquic, EndHostDefaults()).cc == ("gquic-blitz",)
    with pytest.raises(ValueError, match="rfc9438 sender"):
        impl.endpoint_args("server", {**gquic, "hystart": False}, ctx())


@pytest.mark.parametrize("factor,profile,rate,kbps,tech", [
    (1.0, "dsl-fast", 50e6, 50_000, "dsl"),
    (0.5, "dsl-slow", 25e6, 12_500, "dsl"),
    (3.0, "lte", 32e6, 96_000, "lte"),
    (4.0, "3g", 8e6, 32_000, "3g"),
    (1.5, "lab-1g", 1e9, 1_500_000, "unknown"),
])
def test_client_hints_factor_times_the_bottleneck_rate(factor, profile, rate, kbps, tech) -> None:
    impl = Quic()
    args = impl.endpoint_args("client", impl.resolve({"factor": factor}), ctx(profile, rate))
    assert args == ["--udp-payload", "1472", "--hint-kbps", str(kbps), "--tech", tech]


def test_client_without_factor_sends_no_hint_and_outright_hint_wins() -> None:
    impl = Quic()
    assert impl.endpoint_args("client", impl.resolve({}), ctx()) == ["--udp-payload", "1472"]
    args = impl.endpoint_args("client", impl.resolve({"factor": 2.0, "hint_kbps": 1234, "tech": "wifi"}), ctx())
    assert args[2:] == ["--hint-kbps", "1234", "--tech", "wifi"]


def test_datagram_size_follows_the_path_mtu_and_refuses_sub_quic_sizes() -> None:
    assert udp_payload(1500) == FULL
    impl = Quic()
    assert impl.endpoint_args("server", impl.resolve({}), ctx(mtu=1400))[:2] == ["--udp-payload", "1372"]
    with pytest.raises(RuntimeError, match="1200"):
        impl.endpoint_args("server", impl.resolve({}), ctx(mtu=1052))


def test_access_technology_of_profiles() -> None:
    assert [get_profile(p).access for p in ("dsl-slow", "dsl-fast", "3g", "lte", "geo-sat", "gprs", "lab-1g")] == \
        ["dsl", "dsl", "3g", "lte", "satellite", "unknown", "unknown"]


def test_quic_variants_mirror_the_tcp_blitz_ones() -> None:
    factors = {"0.5": 0.5, "1.0": 1.0, "1.5": 1.5, "2.0": 2.0, "3.0": 3.0, "4.0": 4.0}
    for label, factor in factors.items():
        v = VARIANTS[f"quic-blitz-{label}x"]
        assert v.parts["server"].params["cc"] == "blitz"
        assert v.parts["client"].params["factor"] == factor
        assert v.declared("server", EndHostDefaults()).transport == "quic"
    base = VARIANTS["quic-cubic-iw32"]
    assert base.declared("server", EndHostDefaults()).iw == 32
    assert base.endpoint_args("client", ctx()) == ["--udp-payload", "1472"]
    assert VARIANTS["cubic-iw32"].endpoint_args("server", ctx()) is None


def test_gquic_variants_are_the_quic_ones_on_google_quics_sender() -> None:
    for name, v in VARIANTS.items():
        if not name.startswith("gquic-"):
            continue
        twin = VARIANTS[name.removeprefix("g")]
        server = v.parts["server"].params
        assert server["sender"] == "gquic" and server["cc"] == twin.parts["server"].params["cc"]
        assert v.parts["client"].params == twin.parts["client"].params
        declared, theirs = v.declared("server", EndHostDefaults()), twin.declared("server", EndHostDefaults())
        assert declared.cc == (f"gquic-{theirs.cc[0]}",) and declared.iw == theirs.iw
        args = v.endpoint_args("server", ctx())
        assert args[args.index("--sender") + 1] == "gquic" and "--hystart" not in args
        assert "--datagram-pacing" in args
    # Careful Resume, HyStart++ and Rapid Start run over startlab's CUBIC only (they set
    # that sender's window; Google QUIC's has HybridSlowStart).
    def startlab_cubic_only(params: dict) -> bool:
        return params["cc"] == "careful-resume" or params["hystartpp"] or params["rapid_start"]

    assert sorted(n for n in VARIANTS if n.startswith("gquic-")) == \
        sorted(f"g{n}" for n in VARIANTS
               if n.startswith("quic-") and not startlab_cubic_only(VARIANTS[n].parts["server"].params))
    args = VARIANTS["quic-cubic-iw32"].endpoint_args("server", ctx())
    assert args[args.index("--sender") + 1] == "rfc9438" and "--hystart" in args
    assert "--datagram-pacing" not in args


def test_quic_scenario_mirrors_the_tcp_table1() -> None:
    quic = load_scenario(ROOT / "scenarios" / "blitzstart-table1-quic.yaml")
    tcp = load_scenario(ROOT / "scenarios" / "blitzstart-table1.yaml")
    assert [p.name for p in quic.profiles] == [p.name for p in tcp.profiles]
    assert quic.sizes == tcp.sizes and quic.reps == tcp.reps
    assert quic.baseline == "quic-cubic-iw32"
    assert list(quic.variants) == ["quic-cubic-iw32"] + [f"quic-blitz-{f}x" for f in
                                                          ("0.5", "1.0", "1.5", "2.0", "3.0", "4.0")]
    assert quic.workload_params["transport"] == "quic"
    assert quic.workload_params["long_variant"] == "quic-cubic-iw32"
    gquic = load_scenario(ROOT / "scenarios" / "blitzstart-table1-gquic.yaml")
    assert [p.name for p in gquic.profiles] == [p.name for p in quic.profiles]
    assert (gquic.sizes, gquic.reps, gquic.workload_params) == \
        (quic.sizes, quic.reps, {**quic.workload_params, "long_variant": "gquic-cubic-iw32"})
    assert list(gquic.variants) == [f"g{v}" for v in quic.variants] and gquic.baseline == "gquic-cubic-iw32"


def test_workload_refuses_a_tcp_long_flow_or_parallel_streams_over_quic() -> None:
    w = competing.WORKLOAD
    params = {k: p.default for k, p in w.params.items()}
    assert w.check(params) is None                                       # tcp, cubic-iw10: as before
    assert w.check_variant(params, VARIANTS["cubic-iw10"], "long_variant") is None
    assert "transport: quic" in w.check_variant(params, VARIANTS["quic-blitz-1.0x"])
    params["transport"] = "quic"
    assert "not a QUIC variant" in w.check_variant(params, VARIANTS["cubic-iw10"], "long_variant")
    assert w.check_variant(params, VARIANTS["quic-cubic-iw32"], "long_variant") is None
    assert w.check_variant({**params, "long_flow": False}, VARIANTS["cubic-iw10"], "long_variant") is None
    assert w.check(params) is None
    assert w.check({**params, "long_streams": 2})[0] == "long_streams"


def test_scenario_and_overrides_refuse_variants_of_the_other_transport(tmp_path: Path) -> None:
    text = (ROOT / "scenarios" / "blitzstart-table1-quic.yaml").read_text()
    bad = tmp_path / "s.yaml"
    bad.write_text(text.replace("  - quic-blitz-0.5x ", "  - cubic-iw32 "))
    with pytest.raises(FieldError, match=r"s\.yaml:\d+: variants: cubic-iw32: not a QUIC variant"):
        load_scenario(bad)
    bad.write_text(text.replace("long_variant: quic-cubic-iw32", "long_variant: cubic-iw10"))
    with pytest.raises(FieldError, match=r"workload\.long_variant: cubic-iw10: not a QUIC variant"):
        load_scenario(bad)
    sc = load_scenario(ROOT / "scenarios" / "blitzstart-table1-quic.yaml")
    with pytest.raises(UserError, match="--variants: blitz-1.0x: not a QUIC variant"):
        apply_overrides(sc, None, None, "quic-cubic-iw32,blitz-1.0x", None)
    tcp = load_scenario(ROOT / "scenarios" / "blitzstart-table1.yaml")
    with pytest.raises(UserError, match="--variants: quic-blitz-1.0x: a QUIC variant"):
        apply_overrides(tcp, None, None, "quic-blitz-1.0x", None)


# ------------------------------------------------------------------ the session's QUIC flows

class _Node:
    def __init__(self, name: str):
        self.name = name


class _Net:
    defaults = EndHostDefaults()


def _session(tmp_path: Path, variant: str) -> tuple[RunSession, _Node, _Node]:
    s = RunSession(_Net(), VARIANTS[variant], tmp_path, tmp_path)
    server, client = _Node("sv1"), _Node("cl1")
    s._on_node = {"sv1": (VARIANTS[variant], "server"), "cl1": (VARIANTS[variant], "client")}
    return s, server, client


def test_a_quic_flow_is_observed_through_its_servers_report(tmp_path: Path) -> None:
    s, server, client = _session(tmp_path, "quic-blitz-1.0x")
    with pytest.raises(WorkloadError, match="no QUIC application"):
        s.flow("short", server, client, 4433, 70_000)
    flow = s.flow("short", server, client, 4433, 70_000, report=tmp_path / "quic-server-sv1.jsonl")
    assert (flow.transport, flow.observed_by, flow.declared_cc, flow.declared_iw) == \
        ("quic", "endpoint", ["blitz"], None)
    lines = [{"event": "connection", "established": True, "cc": "blitz", "hint_applied": True},
             {"event": "connection", "established": False, "cc": "blitz"}]
    (tmp_path / "quic-server-sv1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    s._observed()
    assert (flow.observed_cc, flow.connections_seen) == (["blitz"], 1)


def test_a_blitz_server_without_the_hint_is_observed_as_the_baseline(tmp_path: Path) -> None:
    s, server, client = _session(tmp_path, "quic-blitz-1.0x")
    flow = s.flow("short", server, client, 4433, 70_000, report=tmp_path / "r.jsonl")
    (tmp_path / "r.jsonl").write_text(json.dumps({"event": "connection", "established": True, "cc": "blitz",
                                                  "hint_applied": False}) + "\n")
    s._observed()
    assert flow.observed_cc == ["cubic-iw32"]
    check = flow_checks.flow_checks({"flows": [flow.as_dict()]}, {"flows": {}})[0]
    assert not check["cc_ok"]
    assert flow_checks.problems([check]) == [
        "flow short: congestion control cubic-iw32 as its endpoint reports, declared blitz",
        "flow short: no start window reported by its endpoint or no first flight on the wire: its start "
        "cannot be checked"]


def test_a_tcp_variant_has_no_quic_endpoint(tmp_path: Path) -> None:
    s, server, client = _session(tmp_path, "cubic-iw32")
    s.context = lambda node: ctx()                                   # no network behind this session
    with pytest.raises(WorkloadError, match="no QUIC endpoint part"):
        s.endpoint_args(server, "server")
    with pytest.raises(WorkloadError, match="declares the kernel's TCP"):
        s.flow("short", server, client, 4433, 70_000, report=tmp_path / "r.jsonl")


def test_endpoint_reports_are_read_as_the_programs_write_them(tmp_path: Path) -> None:
    text = "startlab-quic-client: error: something\n" + json.dumps({"ok": True, "fct_s": 0.3}) + "\n"
    assert quic_endpoints.client_report(text) == {"ok": True, "fct_s": 0.3}
    assert quic_endpoints.client_report("no json here") is None
    (tmp_path / "s.jsonl").write_text('{"event": "connection", "established": true, "cc": "cubic-iw32"}\nnot json\n')
    assert [quic_endpoints.controller_kind(c) for c in quic_endpoints.server_connections(tmp_path / "s.jsonl")] \
        == ["cubic-iw32"]
    assert quic_endpoints.server_connections(tmp_path / "missing.jsonl") == []
    # The sender prefixes Google QUIC's controller; a Blitzstart server without a hint is the baseline.
    lines = [{"cc": "blitz", "hint_applied": True, "sender": "gquic"}, {"cc": "blitz", "sender": "gquic"},
             {"cc": "cubic-iw32", "sender": "rfc9438"}]
    assert [quic_endpoints.controller_kind(c) for c in lines] == ["gquic-blitz", "gquic-cubic-iw32", "cubic-iw32"]


# ------------------------------------------------------------------ analysis on crafted captures

SV1, CL1, SV2, CL2 = "10.0.2.1", "10.0.1.1", "10.0.2.2", "10.0.1.2"
SIZE = 70_000


def _ip(a: str) -> int:
    return int(ipaddress.IPv4Address(a))


class _Quic:
    """Datagrams of one QUIC connection, each with a unique packet number (so a unique hash)."""

    def __init__(self, server: str, sport: int, client: str, cport: int):
        self.server, self.sport, self.client, self.cport, self.pn = server, sport, client, cport, 0

    def _d(self, ts, src, dst, sp, dp, length, long_header) -> Datagram:
        self.pn += 1
        first = 0xC3 if long_header else 0x43
        return Datagram(ts, src, dst, sp, dp, length, bytes([first]) + bytes(8) + self.pn.to_bytes(4, "big"))

    def down(self, ts: float, length: int = FULL, long_header: bool = False) -> Datagram:
        return self._d(ts, self.server, self.client, self.sport, self.cport, length, long_header)

    def up(self, ts: float, length: int = 40, long_header: bool = False) -> Datagram:
        return self._d(ts, self.client, self.server, self.cport, self.sport, length, long_header)


def _connection(caps: DumbbellCaptures, q: _Quic, t0: float, flight: int, rest: int, drop: set[int]) -> dict:
    """A handshake, a 0.5-RTT datagram, the first flight (HANDSHAKE_DONE + `flight` − 1 full
    datagrams over half an RTT), the first acknowledgement one RTT later, `rest` more full
    datagrams (those numbered in `drop` lost at the queue). Times at the bottleneck input."""
    up_s = caps.up_s
    caps.upstream(q.up(t0 - up_s, 1200, long_header=True))                    # Initial
    caps.downstream(q.down(t0 + 0.0001, 1200, long_header=True))              # Initial + Handshake
    caps.downstream(q.down(t0 + 0.0002, 1200, long_header=True))
    caps.downstream(q.down(t0 + 0.0003, 60))                                  # 0.5-RTT: before the request
    start = t0 + RTT
    caps.upstream(q.up(start - up_s - 0.0001, 300, long_header=True))         # Finished + request
    caps.downstream(q.down(start, 40))                                        # HANDSHAKE_DONE
    for i in range(flight - 1):
        caps.downstream(q.down(start + 0.0001 + i * 0.0008))
    caps.upstream(q.up(start + 0.020 - up_s))                                 # ack of the handshake
    caps.upstream(q.up(start + RTT + 0.002 - up_s))                           # first ack of data
    for i in range(rest):
        caps.downstream(q.down(start + RTT + 0.003 + i * 0.0003), dropped=i in drop)
    return {"start": start, "sent": 3 + flight + rest, "wire_bytes": 2 * 1200 + 60 + 40 + (flight - 1 + rest) * FULL}


def _write_run(tmp_path: Path, server_cc: str = "cubic-iw32", hint_received=None, hint_sent=None,
               sent_offset: int = 0, flight: int = 32, rest: int = 17, cwnd_start: int = 32 * FULL,
               lost_bytes: int = 4_000, start_flight: dict | None = None) -> tuple[Path, dict, dict]:
    caps = DumbbellCaptures(queue_s=0.001, down_s=0.010, up_s=0.010)
    long_q = _Quic(SV2, 4434, CL2, 50001)
    long_info = _connection(caps, long_q, 0.2, 32, 3000, drop={100, 101, 300})
    short_q = _Quic(SV1, 4433, CL1, 50000)
    t0 = 0.8
    short_info = _connection(caps, short_q, t0, flight, rest, drop={3, 9})
    run_dir = tmp_path / "run"
    caps.write(run_dir)
    fct = 0.190
    (run_dir / "quic-client.json").write_text("startlab-quic-client: note\n" + json.dumps(
        {"ok": True, "fct_s": fct, "bytes": SIZE, "complete": True, "hint_kbps": hint_sent}) + "\n")
    (run_dir / "quic-long-client.json").write_text(json.dumps(
        {"ok": True, "fct_s": None, "bytes": 600_000, "complete": False, "stopped": "signal", "hint_kbps": None}))
    server = {"event": "connection", "established": True, "cc": server_cc,
              "hint_applied": hint_received is not None, "hint_kbps": hint_received, "handshake_rtt_ms": RTT * 1e3,
              "sent_datagrams": short_info["sent"] + sent_offset, "sent_bytes": short_info["wire_bytes"],
              "lost_bytes": lost_bytes, "lost_packets": 3, "retransmitted_packets": 3, "cwnd_start_bytes": cwnd_start,
              "start_flight": start_flight}
    (run_dir / "quic-server-sv1.jsonl").write_text(json.dumps(server) + "\n")
    lserver = {"event": "connection", "established": True, "cc": "cubic-iw32", "hint_kbps": None,
               "handshake_rtt_ms": RTT * 1e3, "sent_datagrams": long_info["sent"],
               "sent_bytes": long_info["wire_bytes"],
               "lost_bytes": 0, "lost_packets": 3, "retransmitted_packets": 3, "cwnd_start_bytes": 32 * FULL}
    (run_dir / "quic-server-sv2.jsonl").write_text(json.dumps(lserver) + "\n")
    spec = {"transport": "quic", "rtt_s": RTT, "rate_bps": 50e6,
            "short": {"server_port": 4433, "size_bytes": SIZE, "server_log": "quic-server-sv1.jsonl",
                      "client_log": "quic-client.json"},
            "long": {"server_port": 4434, "server_log": "quic-server-sv2.jsonl",
                     "client_log": "quic-long-client.json"}}
    return run_dir, spec, {"caps": caps, "short": short_info, "long": long_info, "fct": fct,
                           "short_syn": t0 - caps.up_s}


@pytest.fixture(autouse=True)
def _extractor_built() -> None:
    if not packets.EXTRACTOR.is_file():
        pytest.fail(f"{packets.EXTRACTOR} missing: build it with `cargo build --release -p startlab-pcapcols`")


def test_first_flight_starts_at_the_request_and_ends_at_the_first_ack(tmp_path: Path) -> None:
    run_dir, _, _ = _write_run(tmp_path)
    dg = packets.load(run_dir / "cap-bneck-in.pcap").datagrams
    t = (_ip(SV1), _ip(CL1), 4433, 50000)
    f = quic_flows.first_flight(dg, t, RTT, FULL)
    # HANDSHAKE_DONE and 31 full datagrams: the 0.5-RTT datagram before the request and the
    # handshake's own acknowledgement inside the flight change nothing.
    assert (f["datagrams"], f["bytes"], f["segments"]) == (32, 40 + 31 * FULL, 32)
    assert f["total_segments"] == -(-(40 + 48 * FULL) // FULL)
    assert quic_flows.from_port(dg, 4433) == t


def test_quic_run_metrics(tmp_path: Path) -> None:
    run_dir, spec, truth = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    short = m["short"]
    assert short["fct_s"] == truth["fct"] and short["bytes"] == SIZE and short["complete"]
    assert short["syn_ts"] == pytest.approx(truth["short_syn"], abs=1e-6)
    assert short["lost_pkts"] == 2                               # dropped at the queue, matched by hash
    assert short["retx_pkts"] == 3                               # the server's count
    sent = truth["short"]["wire_bytes"]
    assert short["inflation"] == pytest.approx(sent / (sent - 4_000))
    assert (short["wire_sent_datagrams"], short["wire_sent_bytes"]) == (truth["short"]["sent"],
                                                                        truth["short"]["wire_bytes"])
    assert m["long"]["lost_pkts"] == 3 and m["long"]["bytes"] == 600_000
    # Fairness: UDP payload of each flow arriving at the clients' switch while the short one runs.
    caps = truth["caps"]
    t0, t1 = short["syn_ts"], short["end_ts"]

    def arrived(server: str) -> int:
        return sum(d.length for d in caps.client if d.src == server and t0 <= d.ts <= t1)
    assert m["fairness_ratio"] == pytest.approx(arrived(SV1) / arrived(SV2))
    assert m["flows"]["short"]["first_flight"]["segments"] == 32 and m["flows"]["short"]["reported_segments"] == 32
    assert m["flows"]["long"]["first_flight"]["segments"] == 32
    tp = m["throughput"]
    assert len(tp["t"]) == len(tp["short_mbps"]) == len(tp["long_mbps"]) and max(tp["short_mbps"]) > 0
    # The long flow's first second, from its first datagram at the clients' switch.
    first = min(d.ts for d in caps.client if d.src == SV2)
    assert tp["long_start"]["t"][0] == 0 and max(tp["long_start"]["mbps"]) > 0
    at = first + tp["long_start"]["t"][10]
    arrived_then = sum(d.length for d in caps.client if d.src == SV2 and at - spec["rtt_s"] < d.ts <= at)
    assert tp["long_start"]["mbps"][10] == pytest.approx(arrived_then * 8 / spec["rtt_s"] / 1e6, abs=2e-3)
    json.dumps(m)
    # The workload's analysis takes the QUIC path from the spec alone.
    meta = {"spec": spec, "profile_params": {"mtu": 1500}}
    assert competing_analysis.ANALYSIS.run_metrics(run_dir, meta)["short"]["lost_pkts"] == 2


def _flows_meta(server_cc: str = "cubic-iw32", iw=32) -> dict:
    return {"flows": [
        {"name": "short", "declared_cc": [server_cc], "declared_iw": iw, "observed_cc": [server_cc],
         "observed_by": "endpoint", "transport": "quic"},
        {"name": "long", "declared_cc": ["cubic-iw32"], "declared_iw": 32, "observed_cc": ["cubic-iw32"],
         "observed_by": "endpoint", "transport": "quic"}]}


def test_checks_pass_when_endpoints_and_wire_agree(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    checks = flow_checks.flow_checks(_flows_meta(), m)
    assert flow_checks.problems(checks) == []
    short = checks[0]
    assert short["iw_ok"] and short["window_ok"] and short["sent_ok"] and "hint_ok" not in short


def test_checks_catch_a_wrong_hint_a_wrong_window_and_a_miscount(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path, server_cc="blitz", hint_sent=50_000, hint_received=25_000,
                                  sent_offset=1)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    m["flows"]["short"]["reported_segments"] = 40                 # the server claims a larger start
    problems = flow_checks.problems(flow_checks.flow_checks(_flows_meta("blitz", None), m))
    assert problems == [
        "flow short: first flight 32 datagrams on the wire, the server reports a start window of 40",
        "flow short: the client sent a hint of 50000 kbit/s, the server received 25000",
        f"flow short: the server counted {m['short']['wire_sent_datagrams'] + 1} datagrams "
        f"({m['short']['wire_sent_bytes']} bytes) sent, the capture before the queue saw "
        f"{m['short']['wire_sent_datagrams']} ({m['short']['wire_sent_bytes']} bytes)"]


def test_a_first_flight_off_by_more_than_its_tolerance_fails_the_declared_iw(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    meta = _flows_meta()
    meta["flows"][0]["declared_iw"] = 30
    check = flow_checks.flow_checks(meta, m)[0]
    assert check["iw_ok"] is False
    meta["flows"][0]["declared_iw"] = 31                          # within one datagram: the small packets
    assert flow_checks.flow_checks(meta, m)[0]["iw_ok"]


def test_a_window_larger_than_the_object_expects_the_object_less_its_resends(tmp_path: Path) -> None:
    """Blitzstart's window exceeds a 70 KB object: the flight is the whole object, and the
    two datagrams resent after it (the server's lost bytes) are not part of the object."""
    run_dir, spec, _ = _write_run(tmp_path, server_cc="blitz", hint_sent=50_000, hint_received=50_000,
                                  flight=49, rest=2, cwnd_start=400 * FULL, lost_bytes=2 * FULL)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    flight = m["flows"]["short"]["first_flight"]
    assert (flight["segments"], flight["total_segments"]) == (49, 49)
    checks = flow_checks.flow_checks(_flows_meta("blitz", None), m)
    assert flow_checks.problems(checks) == [] and checks[0]["window_ok"] and checks[0]["hint_ok"]
    # Counted without the resends, the whole flow would look two datagrams larger than its flight.
    dg = packets.load(run_dir / "cap-bneck-in.pcap").datagrams
    assert quic_flows.first_flight(dg, (_ip(SV1), _ip(CL1), 4433, 50000), RTT, FULL)["total_segments"] == 51


def _cut_short(bytes_sent: int, window: int = 60 * FULL) -> dict:
    """The server's account of a start flight its first acknowledgement ended: processed
    0.1 ms after that acknowledgement passed the capture (see _connection)."""
    start = 0.8 + RTT
    return {"began_unix_s": start, "window_bytes": window, "bytes": bytes_sent, "ended_by": "ack",
            "end_unix_s": start + RTT + 0.0021}


def test_a_flight_its_first_ack_ended_is_checked_against_what_the_server_sent_by_then(tmp_path: Path) -> None:
    """A paced Blitzstart window longer than the RTT: 32 of its 60 datagrams are out when the
    first acknowledgement comes back. The wire and the server agree on those 32; the window
    itself could not be seen whole, so it is checked as no smaller than what went out."""
    flight = 40 + 31 * FULL
    run_dir, spec, _ = _write_run(tmp_path, server_cc="blitz", hint_sent=50_000, hint_received=50_000,
                                  cwnd_start=60 * FULL, start_flight=_cut_short(flight))
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    got = m["flows"]["short"]
    assert (got["first_flight"]["segments"], got["first_flight"]["ended_by"]) == (32, "ack")
    assert (got["reported_segments"], got["reported_flight_segments"]) == (60, 32)
    [check, _] = flow_checks.flow_checks(_flows_meta("blitz", None), m)
    assert check["window_ok"] and check["flight_ended_by"] == "ack"
    assert flow_checks.problems([check]) == []
    # Without the server's account, the same wire reads as a window of 32 against 60 reported.
    del m["flows"]["short"]["reported_flight_segments"]
    assert flow_checks.problems(flow_checks.flow_checks(_flows_meta("blitz", None), m))[:1] == [
        "flow short: first flight 32 datagrams on the wire, the server reports a start window of 60"]


@pytest.mark.parametrize("sent, window, why", [(40 * FULL, 60 * FULL, "more than the wire shows"),
                                               (40 + 31 * FULL, 20 * FULL, "more than its window")])
def test_a_cut_short_flight_fails_when_the_server_miscounts_it_or_exceeds_its_window(
        tmp_path: Path, sent: int, window: int, why: str) -> None:
    run_dir, spec, _ = _write_run(tmp_path, server_cc="blitz", hint_sent=50_000, hint_received=50_000,
                                  cwnd_start=window, start_flight=_cut_short(sent, window))
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    problems = flow_checks.problems(flow_checks.flow_checks(_flows_meta("blitz", None), m))
    assert problems[:1] == [
        f"flow short: first flight 32 datagrams on the wire until the server's first acknowledgement (ack), "
        f"the server reports {-(-sent // FULL)} sent by then of a start window of {window // FULL}"], why


def test_equal_datagram_counts_with_other_bytes_still_fail(tmp_path: Path) -> None:
    """Datagrams of several packets each (a GSO frame on the wire) or a wrong flow show in
    the bytes even where the counts happen to agree."""
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    m["flows"]["long"]["sent_bytes_endpoint"] += FULL
    check = flow_checks.flow_checks(_flows_meta(), m)[1]
    assert check["sent_datagrams_wire"] == check["sent_datagrams_endpoint"] and check["sent_ok"] is False


def test_an_endpoint_flow_without_its_start_figures_fails(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    del m["flows"]["long"]
    problems = flow_checks.problems(flow_checks.flow_checks(_flows_meta(), m))
    assert problems == ["flow long: no start window reported by its endpoint or no first flight on the wire: "
                        "its start cannot be checked"]


def test_tcp_first_flights_stay_exact() -> None:
    flight = {"segments": 9, "total_segments": 100}
    meta = {"flows": [{"name": "short", "declared_cc": ["cubic"], "declared_iw": 10, "observed_cc": ["cubic"]}]}
    check = flow_checks.flow_checks(meta, {"flows": {"short": {"first_flight": flight}}})[0]
    assert check["iw_ok"] is False and check["observed_by"] == "kernel"
    assert "window_ok" not in check and "sent_ok" not in check


def test_missing_client_report_is_named(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path)
    (run_dir / "quic-client.json").unlink()
    with pytest.raises(Exception, match="quic-client.json"):
        competing_quic.run_metrics(run_dir, spec, 1500)


def test_lost_datagrams_are_those_missing_after_the_queue_only(tmp_path: Path) -> None:
    """A datagram captured at the clients' switch but not after the queue cannot be: the
    loss count follows the two bottleneck captures, as for TCP."""
    run_dir, spec, truth = _write_run(tmp_path)
    caps: DumbbellCaptures = truth["caps"]
    # Drop one more short-flow datagram only from the client capture: losses stay 2.
    victim = next(d for d in caps.client if d.src == SV1 and d.length == FULL)
    caps.client = [d for d in caps.client if d is not victim]
    caps.write(run_dir)
    for cols in run_dir.glob("*.cols"):
        shutil.rmtree(cols)
    assert competing_quic.run_metrics(run_dir, spec, 1500)["short"]["lost_pkts"] == 2


def test_a_short_first_flight_fails_on_a_punctual_host_and_is_flagged_on_a_late_one(tmp_path: Path) -> None:
    """A flight short of its window is the pacer woken late or a wrong window: on a host
    whose monitor was punctual during the run it fails; on a late one (delay flags) the run
    is flagged, its window left unchecked — never a long flight, never a silent pass."""
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    m["flows"]["short"]["first_flight"]["segments"] = 20          # 12 short of the 32 reported and declared
    punctual = flow_checks.flow_checks(_flows_meta(), m)
    assert any("first flight 20" in p for p in flow_checks.problems(punctual))
    late = {**_flows_meta(), "host_check": {"flags_by_kind": {"delay": ["host timer wake-ups p99 3357 µs"],
                                                                "rate": []}}}
    checks = flow_checks.flow_checks(late, m)
    assert flow_checks.problems(checks) == []
    assert checks[0]["flight_short_on_late_host"] == 1 and checks[0]["window_unchecked"]
    m["flows"]["short"]["first_flight"]["segments"] = 40          # a long flight fails whatever the host
    assert any("first flight 40" in p for p in flow_checks.problems(flow_checks.flow_checks(late, m)))


def test_the_flight_is_timed_from_its_first_data_not_from_handshake_done() -> None:
    """A server whose application starts late (a busy host) sends HANDSHAKE_DONE, then its
    data 40 ms later: the flight's window runs one RTT from the first data datagram, so the
    client's acknowledgement of HANDSHAKE_DONE (one RTT after it) does not cut it short."""
    sv, cl = _ip(SV1), _ip(CL1)
    rows = [(0.000, cl, sv, 50000, 4433, 1200, 1)]                 # the client's Finished
    rows += [(0.001, sv, cl, 4433, 50000, 40, 0)]                  # HANDSHAKE_DONE
    rows += [(0.041 + i * 0.0005, sv, cl, 4433, 50000, FULL, 0) for i in range(31)]   # data, 40 ms later
    rows += [(0.001 + RTT + 0.001, cl, sv, 50000, 4433, 50, 0)]   # ACK of HANDSHAKE_DONE
    rows += [(0.041 + RTT + 0.001, cl, sv, 50000, 4433, 50, 0)]   # ACK of the first data
    cols = list(zip(*sorted(rows)))
    dg = {"ts": np.array(cols[0]), "src": np.array(cols[1]), "dst": np.array(cols[2]), "sport": np.array(cols[3]),
          "dport": np.array(cols[4]), "ulen": np.array(cols[5]) + quic_flows.UDP_HEADER, "qlong": np.array(cols[6])}
    f = quic_flows.first_flight(dg, (sv, cl, 4433, 50000), RTT, FULL)
    assert (f["datagrams"], f["segments"]) == (32, 32)


def _early_handshake_done_rows(extra: int, early_s: float) -> dict:
    """The client's Finished; HANDSHAKE_DONE (203 B) `early_s` before the first data; a
    window of 32 full datagrams paced over 45 ms; the client's acknowledgement of
    HANDSHAKE_DONE one RTT after it; `extra` full datagrams that acknowledgement let out;
    and the first acknowledgement of the data one RTT after it began."""
    sv, cl = _ip(SV1), _ip(CL1)
    first = 0.001 + early_s
    rows = [(0.000, cl, sv, 50000, 4433, 1200, 1), (0.001, sv, cl, 4433, 50000, 203, 0)]
    rows += [(first + i * 0.045 / 31, sv, cl, 4433, 50000, FULL, 0) for i in range(32)]
    rows += [(0.001 + RTT + 0.0003, cl, sv, 50000, 4433, 50, 0)]
    rows += [(first + 0.0453 + (i + 1) * 0.0008, sv, cl, 4433, 50000, FULL, 0) for i in range(extra)]
    rows += [(first + RTT + 0.0003, cl, sv, 50000, 4433, 50, 0)]
    cols = list(zip(*sorted(rows)))
    return {"ts": np.array(cols[0]), "src": np.array(cols[1]), "dst": np.array(cols[2]),
            "sport": np.array(cols[3]), "dport": np.array(cols[4]),
            "ulen": np.array(cols[5]) + quic_flows.UDP_HEADER, "qlong": np.array(cols[6])}


def test_an_acknowledgement_of_an_early_handshake_done_may_add_two_datagrams() -> None:
    """A busy host: the server's HANDSHAKE_DONE left 5.4 ms before its first data, so the
    client's acknowledgement of it came back 44.9 ms after that data (under the 0.9-RTT cut)
    and, in slow start, let two more datagrams out behind the window of 32: 35 segments on
    the wire for a reported window of 32. The check allows what such an acknowledgement can
    release, and no more; without one inside the flight it allows nothing."""
    t = (_ip(SV1), _ip(CL1), 4433, 50000)
    grown = quic_flows.first_flight(_early_handshake_done_rows(2, 0.0054), t, RTT, FULL)
    assert (grown["datagrams"], grown["segments"], grown["released_segments"]) == (35, 35, 2)
    assert flow_checks._flight_fits(grown, 32)
    more = quic_flows.first_flight(_early_handshake_done_rows(3, 0.0054), t, RTT, FULL)
    assert more["segments"] == 36 and not flow_checks._flight_fits(more, 32)
    # HANDSHAKE_DONE just before the data: its acknowledgement is the flight's end.
    prompt = quic_flows.first_flight(_early_handshake_done_rows(0, 0.0001), t, RTT, FULL)
    assert (prompt["segments"], prompt["released_segments"]) == (33, 0)
    assert flow_checks._flight_fits(prompt, 32)


def _flight_rows(probes: list[float], ack_at: float) -> dict:
    """The client's Finished, HANDSHAKE_DONE, 31 full datagrams over 15 ms, `probes` (full
    datagrams at those times) and the client's first acknowledgement at `ack_at`."""
    sv, cl = _ip(SV1), _ip(CL1)
    rows = [(0.000, cl, sv, 50000, 4433, 1200, 1), (0.001, sv, cl, 4433, 50000, 40, 0)]
    rows += [(0.002 + i * 0.0005, sv, cl, 4433, 50000, FULL, 0) for i in range(31)]
    rows += [(t, sv, cl, 4433, 50000, FULL, 0) for t in probes]
    rows += [(ack_at, cl, sv, 50000, 4433, 50, 0)]
    cols = list(zip(*sorted(rows)))
    return {"ts": np.array(cols[0]), "src": np.array(cols[1]), "dst": np.array(cols[2]),
            "sport": np.array(cols[3]), "dport": np.array(cols[4]),
            "ulen": np.array(cols[5]) + quic_flows.UDP_HEADER, "qlong": np.array(cols[6])}


def test_a_probe_timeout_before_the_first_acknowledgement_disturbs_the_flight() -> None:
    """A receiver (or the path) stalled past the sender's PTO: the window of 32 is out, then
    two probes leave before the first acknowledgement. The wire cannot tell them from the
    window; their lateness can."""
    t = (_ip(SV1), _ip(CL1), 4433, 50000)
    stalled = quic_flows.first_flight(_flight_rows([0.170, 0.171], 0.230), t, RTT, FULL)
    assert stalled["segments"] == 34 and stalled["span_s"] == pytest.approx(0.169)
    assert quic_flows.disturbed(stalled, RTT, {"reductions_before": 0}) == \
        "probe timeout before the first acknowledgement"
    # The same window acknowledged in time: nothing disturbed, and a slower handshake (a
    # queue) raises the bar with the sender's RTT estimate.
    prompt = quic_flows.first_flight(_flight_rows([], 0.002 + RTT + 0.001), t, RTT, FULL)
    assert prompt["segments"] == 32 and quic_flows.disturbed(prompt, RTT, {"reductions_before": 0}) == ""
    assert quic_flows.disturbed(stalled, 0.120, None) == ""


def test_a_loss_before_the_response_disturbs_the_flight_by_the_senders_account(tmp_path: Path) -> None:
    sender = {"began_unix_s": 0.85, "window_bytes": 27 * FULL, "bytes": 27 * FULL, "ended_by": "window",
              "end_unix_s": 0.87, "reductions_before": 1}
    run_dir, spec, _ = _write_run(tmp_path, start_flight=sender)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    assert m["flows"]["short"]["first_flight"]["disturbed"] == "window reduced by a loss before the response"
    assert "disturbed" not in m["flows"]["long"]["first_flight"]


def test_a_disturbed_flight_is_counted_not_checked(tmp_path: Path) -> None:
    run_dir, spec, _ = _write_run(tmp_path)
    m = competing_quic.run_metrics(run_dir, spec, 1500)
    m["flows"]["short"]["first_flight"]["segments"] = 35         # 32 and a probe timeout's two
    assert any("first flight 35" in p for p in flow_checks.problems(flow_checks.flow_checks(_flows_meta(), m)))
    m["flows"]["short"]["first_flight"]["disturbed"] = "probe timeout before the first acknowledgement"
    [short, long] = flow_checks.flow_checks(_flows_meta(), m)
    assert flow_checks.problems([short, long]) == []
    assert short["iw_unchecked"] == 1 and short["window_unchecked"] == "probe timeout before the first acknowledgement"
    assert long["iw_ok"] and long["window_ok"]


def test_careful_resume_over_quic_passes_its_parameters_and_needs_startlab_cubic() -> None:
    v = VARIANTS["quic-careful-resume"]
    args = v.endpoint_args("server", ctx())
    got = {a: args[args.index(a) + 1] for a in ("--cc", "--iw", "--cr-lifetime-s", "--cr-max-jump", "--cr-beta")}
    assert got == {"--cc": "careful-resume", "--iw": "10", "--cr-lifetime-s": "3600", "--cr-max-jump": "0",
                   "--cr-beta": "0.5"}
    assert v.declared("server", EndHostDefaults()).cc == ("careful-resume",)
    from hosts.implementations.quic import IMPLEMENTATION
    params = dict(v.parts["server"].params, sender="gquic")
    with pytest.raises(ValueError, match="rfc9438"):
        IMPLEMENTATION.endpoint_args("server", params, ctx())
