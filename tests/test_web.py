"""The web workload: its parameters and their errors, and its analysis on crafted captures with
known answers (page download times, connections, Quick-Start per connection, first flights,
drops), the summary, the paired comparison and the figures."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from analysis import stats
from analysis.workloads import web as web_analysis
from analysis.workloads import web_plots
from analysis.workloads.web_handshakes import read_client_side, read_server_side
from config.yamlfile import FieldError
from hosts.workloads import httperf as hp
from hosts.workloads import surge
from hosts.workloads import web
from machine.errors import UserError
from pcapcraft import ACK, FIN, SYN, Conversation, DumbbellCaptures, PcapWriter
from results.campaign import RunRecord
from scenarios.spec import load_scenario
from wire.httperf_log import HTTP_MODES, WEB_MODELS
from wire.quickstart import QsRequest, QsResponse

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


# --- parameters --------------------------------------------------------------------------------

def test_shared_names_match_the_workload():
    assert WEB_MODELS == tuple(surge.MODELS) and HTTP_MODES == tuple(hp.MODES)


SCENARIO = """name: web-bad
profiles: [scharf-200ms]
workload:
  kind: web
{fields}
variants: [reno-iw3]
"""


@pytest.mark.parametrize("fields, line, field, message", [
    ("  model: small-files", 5, "workload.model", "'small-files' is not one of: surge-default, large-files"),
    ("  mode: [http10, http2]", 5, "workload.mode", "'http2' is not one of: http10, http11, http11-pipelined"),
    ("  mode: [http10, http10]", 5, "workload.mode", "a name appears twice"),
    ("  users: 0", 5, "workload.users", "0 is below the minimum 1"),
    ("  duration_s: 2", 5, "workload.duration_s", "2 is below the minimum 10"),
    ("  model: surge-default\n  users: 2500\n  clients: 2", 5, "workload.users", "one httperf replays at most 1000"),
])
def test_bad_input_is_one_line_with_file_line_and_field(tmp_path, fields, line, field, message):
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.format(fields=fields))
    with pytest.raises((FieldError, UserError)) as err:
        load_scenario(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}:") and f"{field}: " in text and message in text
    if field != "workload.users" or "httperf" not in message:
        assert text.startswith(f"{path}:{line}:")


def test_shipped_scenarios():
    fig12 = load_scenario(SCENARIOS / "quickstart-web.yaml")
    assert fig12.workload.name == "web" and not fig12.workload.sized and fig12.sweep is None
    assert web.names(fig12.workload_params["model"]) == list(WEB_MODELS)
    assert web.names(fig12.workload_params["mode"]) == list(HTTP_MODES)
    assert fig12.workload_params["users"] == 1 and list(fig12.variants) == ["reno-iw3", "cubic-iw3", "qs-reno",
                                                                          "qs-cubic"]
    users = load_scenario(SCENARIOS / "quickstart-web-users.yaml")
    assert users.sweep.param == "users" and users.sweep.values[0] == 1 and len(users.sweep.values) >= 4
    assert users.pairs_needed() == 2
    share = load_scenario(SCENARIOS / "quickstart-web-share.yaml")
    thresholds = [v.describe()["roles"].get("router", {}).get("qs_thresh") for v in share.variants.values()]
    assert 0.5 in thresholds and 0.9 in thresholds


def test_users_spread_over_hosts():
    assert [web.users_of_host(5, 2, k) for k in (0, 1)] == [[0, 2, 4], [1, 3]]
    assert web.WORKLOAD.hosts({"users": 1, "clients": 4}).pairs == 1
    assert web.WORKLOAD.hosts({"users": 10, "clients": 4}).pairs == 4


# --- a crafted run -----------------------------------------------------------------------------

CLIENT, SERVER = "10.1.0.1", "10.2.0.1"
MSS = 1448


def _raw(src: str, dst: str, sport: int, dport: int, seq: int, flags: int, ttl: int = 64, ip_opts: bytes = b"",
         tcp_opts: bytes = b"", payload: bytes = b"") -> bytes:
    tcp_opts = tcp_opts + b"\x01" * (-len(tcp_opts) % 4)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, (20 + len(tcp_opts)) // 4 << 4, flags, 65535, 0, 0)
    ihl = (20 + len(ip_opts)) // 4
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(ip_opts) + len(tcp) + len(tcp_opts) + len(payload),
                     0, 0x4000, ttl, 6, 0, bytes(int(x) for x in src.split(".")),
                     bytes(int(x) for x in dst.split(".")))
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + ip_opts + tcp + tcp_opts + payload


def _write_raw(path: Path, frames: list[tuple[float, bytes]]) -> None:
    with open(path, "wb") as f:
        w = PcapWriter(f, snaplen=128)
        for ts, data in sorted(frames, key=lambda x: x[0]):
            w.record(ts, data)


def _request(uri: str) -> bytes:
    return f"GET {uri} HTTP/1.1\r\nUser-Agent: httperf/0.9.0\r\nHost: {SERVER}\r\n\r\n".encode()


class CraftedRun:
    """Two replays with known answers (times at the client's uplink unless said otherwise):

    http11: one user, one connection (client port 1024, Quick-Start approved): page 0 =
      document (reply 1000 B) + one embedded file (3000 B, its second segment dropped at
      the queue and sent again), from the SYN at 100.0 to the retransmission at 100.9;
      page 1 = a document of 2000 B requested at 103.0 after a think time, done at 103.2001.
    http10: one page of two objects over two connections (1025: Quick-Start rejected;
      1026: no request), from the first SYN at 200.0 to the last byte at 200.8102.
    """

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        cap = DumbbellCaptures(queue_s=0.001, down_s=0.099, up_s=0.1)
        hs_client, hs_server, logs = [], [], {0: [], 1: []}

        def shake(conv: Conversation, t: float, request: QsRequest | None, echo: QsResponse | None) -> None:
            cap.upstream(conv.syn(t))
            cap.downstream(conv.synack(t + 0.1))
            opts = request.encode() if request else b""
            hs_server.append((t + 0.1, _raw(SERVER, CLIENT, 80, conv.cport, conv.server_isn, SYN | ACK, 64, opts)))
            arrived = QsRequest(request.func, request.rate_code, request.qs_ttl - 2, request.nonce) if request else None
            hs_client.append((t + 0.2, _raw(SERVER, CLIENT, 80, conv.cport, conv.server_isn, SYN | ACK, 62,
                                            arrived.encode() if arrived else b"")))
            cap.upstream(conv.from_client(t + 0.2, 0, 0))
            hs_client.append((t + 0.2, _raw(CLIENT, SERVER, conv.cport, 80, conv.client_isn + 1, ACK,
                                            tcp_opts=b"\x01\x01\x08\x0a" + bytes(8) + (echo.encode() if echo else b""))))

        sent: dict[int, int] = {}                         # request bytes each client port has sent

        def call(combo: int, cid: int, conv: Conversation, t_req: float, uri: str, header: int,
                 content: int, t_done: float) -> None:
            req = _request(uri)
            offset = sent.get(conv.cport, 0)
            sent[conv.cport] = offset + len(req)
            cap.upstream(conv.from_client(t_req, offset, len(req)))
            hs_client.append((t_req, _raw(CLIENT, SERVER, conv.cport, 80, conv.client_isn + 1 + offset, ACK,
                                          tcp_opts=b"\x01\x01\x08\x0a" + bytes(8), payload=req)))
            logs[combo] += [f"{t_req + 0.0001:.6f} SH{cid}:GET {uri} HTTP/1.1", f"{t_req + 0.0001:.6f} SS{cid}: "
                            f"header {len(req)} content 0", f"{t_done:.6f} RH{cid}:HTTP/1.1 200 OK",
                            f"{t_done + 0.0002:.6f} RS{cid}: header {header} content {content} footer 0"]

        # http11, port 1024
        a = Conversation(CLIENT, 1024, SERVER, 80, client_isn=1000, server_isn=5000)
        nonce = 0x1234567
        shake(a, 100.0, QsRequest(0, 7, 200, nonce), QsResponse(7, (62 - 198) & 0xFF, nonce))
        call(0, 0, a, 100.2005, "/b0000.bin?u=0&p=0&o=0", 100, 900, 100.4)
        cap.downstream(a.from_server(100.3, 0, 1000, ipid=1))
        cap.upstream(a.from_client(100.4, sent[1024], 0, acked=1000))
        call(0, 1, a, 100.4005, "/e0000.bin?u=0&p=0&o=1", 100, 2900, 100.9)
        cap.downstream(a.from_server(100.51, 1000, 1448, ipid=2))
        cap.downstream(a.from_server(100.5101, 2448, 1448, ipid=3), dropped=True)
        cap.downstream(a.from_server(100.5102, 3896, 104, ipid=4))
        cap.downstream(a.from_server(100.8, 2448, 1448, ipid=5))          # the retransmission
        call(0, 2, a, 103.0, "/b0001.bin?u=0&p=1&o=0", 100, 1900, 103.2001)
        cap.downstream(a.from_server(103.1, 4000, 1448, ipid=6))
        cap.downstream(a.from_server(103.1001, 5448, 552, ipid=7))
        cap.upstream(a.from_client(104.0, sent[1024], 0, flags=FIN | ACK, acked=6000))
        # http10, ports 1025 and 1026
        b = Conversation(CLIENT, 1025, SERVER, 80, client_isn=2000, server_isn=7000)
        shake(b, 200.0, QsRequest(0, 7, 100, nonce), QsResponse(0, (62 - 98) & 0xFF, nonce))
        call(1, 0, b, 200.2001, "/b0002.bin?u=0&p=0&o=0", 100, 400, 200.4)
        cap.downstream(b.from_server(200.3, 0, 500, ipid=8, flags=ACK | FIN))
        c = Conversation(CLIENT, 1026, SERVER, 80, client_isn=3000, server_isn=9000)
        shake(c, 200.41, None, None)
        call(1, 1, c, 200.6101, "/e0001.bin?u=0&p=0&o=1", 100, 3900, 200.8102)
        for k, (off, n) in enumerate([(0, 1448), (1448, 1448), (2896, 1104)]):
            cap.downstream(c.from_server(200.71 + k * 0.0001, off, n, ipid=9 + k))
        cap.write(run_dir)
        _write_raw(run_dir / "web-hs-client.pcap", hs_client)
        _write_raw(run_dir / "web-hs-bneck-in.pcap", hs_server)
        for combo, lines in logs.items():
            (run_dir / f"h{combo}.out").write_text("\n".join(lines) + "\n")
            (run_dir / f"h{combo}.err").write_text("")
        host = [{"host": "cl1", "ip": CLIENT, "log": "", "err": ""}]
        self.spec = {"server_port": 80, "users": 1, "session_seed": 1,
                     "handshake_captures": web.HANDSHAKE_FILES,
                     "combos": [{"key": f"surge-default.{mode}", "model": "surge-default", "mode": mode,
                                 "t_start": t0, "t_end": t0 + 10, "stopped": False, "pages_scheduled": pages,
                                 "hosts": [{**host[0], "log": f"h{i}.out", "err": f"h{i}.err"}],
                                 "link_use": {"utilisation": 0.1, "drop_rate": 0.0, "dropped_pkts": 0}}
                                for i, (mode, t0, pages) in enumerate([("http11", 99.9, 2), ("http10", 199.9, 1)])]}


@pytest.fixture
def crafted(tmp_path) -> tuple[CraftedRun, dict]:
    run = CraftedRun(tmp_path / "run")
    return run, web_analysis.run_metrics(run.dir, run.spec, MSS)


def test_page_download_times(crafted):
    _, m = crafted
    http11, http10 = m["combos"]["surge-default.http11"], m["combos"]["surge-default.http10"]
    # Page 0 from the SYN (its document opens the connection) to the retransmitted segment;
    # page 1 from its document's request on the open connection.
    assert http11["download_s"] == pytest.approx([100.8 + 0.1 - 100.0, 103.1001 + 0.1 - 103.0], abs=2e-6)
    assert http11["page_index"] == [0, 1] and http11["page_objects"] == [2, 1]
    assert http11["page_bytes"] == [4000, 2000]
    assert http10["download_s"] == pytest.approx([200.7102 + 0.1 - 200.0], abs=2e-6)
    assert http11["pages"] == http11["pages_logged"] == 2 and http11["pages_unfinished"] == 0
    # The stamped completion lies 0.1 ms after the capture in every reply (RH + 0.2 ms, …)
    assert abs(http10["log_minus_capture_end"]["p50"]) < 1.0
    assert m["pages"] == 3 and m["download_mean_s"] == pytest.approx(np.mean([0.9, 0.2001, 0.8102]), abs=1e-5)


def test_connection_pattern_and_quickstart_per_connection(crafted):
    _, m = crafted
    http11, http10 = m["combos"]["surge-default.http11"], m["combos"]["surge-default.http10"]
    assert http11["connections"] == 1 and http11["objects"] == 3 and http11["syns_per_object"] == pytest.approx(1 / 3)
    assert http10["connections"] == 2 and http10["syns_per_object"] == 1.0
    assert http11["requests_per_connection_max"] == 3 and http11["in_flight_max"] == 1
    assert http11["conn_qs"] == [2] and http11["qs_approval_ratio"] == 1.0
    assert http11["qs_approved_bps_mean"] == 40_000 * 2 ** 7
    assert http10["conn_qs"] == [1, 0] and http10["qs_requested"] == 1 and http10["qs_approved"] == 0
    assert http11["conn_bytes"] == [6000] and http10["conn_bytes"] == [500, 4000]
    assert http11["lost_pkts"] == 1 and http11["retx_pkts"] == 1 and http10["lost_pkts"] == 0
    assert m["lost_pkts"] == 1 and m["calls_unplaced"] == 0


def test_first_flights_per_connection(crafted):
    _, m = crafted
    # The persistent connection's first flight is its first reply (one segment): the second
    # request bounds what the first flight may carry; the HTTP/1.0 connections carry one reply.
    got = sorted((f["segments"], f["total_segments"]) for f in m["flows"]["web"]["first_flights"])
    assert got == [(1, 1), (1, 1), (3, 3)]


def test_handshake_reader_verdicts(crafted):
    run, _ = crafted
    requests, shakes = read_client_side(run.dir / "web-hs-client.pcap", 80)
    read_server_side(run.dir / "web-hs-bneck-in.pcap", 80, shakes)
    assert [r.uri for r in requests][:2] == ["/b0000.bin?u=0&p=0&o=0", "/e0000.bin?u=0&p=0&o=1"]
    verdicts = {k[1]: h.figures().get("verdict") for k, h in shakes.items()}
    assert verdicts == {1024: "approved", 1025: "rejected", 1026: None}


def test_pipelined_requests_count_in_flight(tmp_path):
    """Two requests sent before the first reply came back: the second is second in flight."""
    from analysis.workloads.web_pages import Calls, in_flight
    calls = Calls(*(np.array(x) for x in ([0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 2], [1, 1, 1])),
                  np.array([1.0, 2.0, 2.0001]), np.array([1.5, 2.5, 2.6]), np.array([10, 10, 10]),
                  np.array([True, True, True]), ["a", "b", "c"])
    got = in_flight(calls, np.array([0, 0, 0]), np.array([1.5, 2.5, 2.6]), 0.0)
    assert got.tolist() == [1, 1, 2]


# --- the summary ---------------------------------------------------------------------------------

def _record(variant: str, server: dict, pages: list[float], rep: int = 1, users: int = 1,
            sweep: dict | None = None, approved: int = 0, requested: int = 0) -> RunRecord:
    key = "large-files.http10"
    combo = {"download_s": pages, "page_user": [0] * len(pages), "page_index": list(range(len(pages))),
             "download_mean_s": float(np.mean(pages)), "qs_requested": requested, "qs_approved": approved,
             "utilisation": 0.3, "drop_rate": 0.0}
    meta = {"variant_definition": {"roles": {"server": server}}, "spec": {"users": users, "session_seed": rep}}
    metrics = {"combos": {key: combo}, "download_mean_s": float(np.mean(pages)), "lost_pkts": 0, "retx_pkts": 0}
    return RunRecord(run_id=f"{variant}_r{rep}", profile="scharf-200ms", size_bytes=None, variant=variant, rep=rep,
                     sweep=sweep or {}, rtt_s=0.2, rate_bps=10e6, mtu=1500, meta=meta, metrics=metrics)


SS = {"impl": "linux-tcp", "cc": "reno", "iw": 3}
QS = {"impl": "quickstart", "base_cc": "reno", "iw": 3}


def test_describe_pools_pages_and_compares_with_welch():
    ss = [_record("reno-iw3", SS, [2.0, 3.0, 4.0], rep=1), _record("reno-iw3", SS, [5.0, 6.0], rep=2)]
    qs = [_record("qs-reno", QS, [1.0, 1.5, 2.0], rep=1, approved=3, requested=3),
          _record("qs-reno", QS, [2.5, 3.0], rep=2, approved=1, requested=2)]
    a = web_analysis.ANALYSIS
    row = a.describe(qs)
    p = "dl_large_files_http10"
    assert row["pages"] == 5 and row[f"{p}_pages"] == 5 and row["kind"] == "QS" and row["cc"] == "reno"
    assert row[f"{p}_mean_s"] == pytest.approx(2.0)
    ci = stats.mean_ci([1.0, 1.5, 2.0, 2.5, 3.0])
    assert (row[f"{p}_ci_low_s"], row[f"{p}_ci_high_s"]) == pytest.approx(ci)
    assert row[f"{p}_qs_approval"] == pytest.approx(4 / 5) and row["qs_approval_ratio"] == pytest.approx(4 / 5)
    cmp = a.compare(qs, ss)
    d = stats.welch_difference([1.0, 1.5, 2.0, 2.5, 3.0], [2.0, 3.0, 4.0, 5.0, 6.0])
    assert cmp[f"{p}_diff_s"] == pytest.approx(-2.0) and cmp[f"{p}_diff_ci_low_s"] == pytest.approx(d.ci[0])
    assert cmp["dl_significant"] == d.significant
    # The Fig. 12 table pairs QS with SS of the same congestion control.
    rows = []
    for runs in (ss, qs):
        r = {"profile": "scharf-200ms", "sweep_param": None, "variant": runs[0].variant, **a.describe(runs)}
        rows.append(r)
    [line] = web_analysis.qs_vs_ss_section(rows).rows
    assert line[1] == "reno-iw3 → qs-reno" and line[-1] == "QS faster"
    w = web_analysis.welch_from_summary((2.0, float(np.std([1, 1.5, 2, 2.5, 3], ddof=1)), 5),
                                        (4.0, float(np.std([2, 3, 4, 5, 6], ddof=1)), 5))
    assert (w[1], w[2]) == pytest.approx(d.ci)


def test_paired_differences_match_pages_of_the_same_sessions():
    ss = [_record("reno-iw3", SS, [2.0, 3.0, 4.0], rep=1)]
    qs = [_record("qs-reno", QS, [1.0, 3.0, 3.5], rep=1), _record("qs-reno", QS, [9.0], rep=2)]
    got = web_plots.paired_differences(qs, ss, "large-files.http10")
    assert sorted(got.tolist()) == [-1.0, -0.5, 0.0]      # rep 2 has no slow-start partner


def test_figures_are_written(tmp_path):
    colours = {"reno-iw3": "#1f77b4", "qs-reno": "#d62728"}
    plain = [_record("reno-iw3", SS, [2.0, 3.0, 4.0]), _record("qs-reno", QS, [1.0, 2.0, 2.5])]
    made = web_plots.all_plots(tmp_path, {"sweep": None}, plain, colours)
    assert {p.kind for p in made} == {"web_cdf", "web_bars", "web_paired"} and all(p.path.exists() for p in made)
    swept = [_record(v, s, [2.0 * u, 3.0 * u], users=u, sweep={"users": u}, approved=1, requested=2)
             for u in (1, 5) for v, s in (("reno-iw3", SS), ("qs-reno", QS))]
    made = web_plots.all_plots(tmp_path, {"sweep": {"param": "users", "values": [1, 5]}}, swept, colours)
    assert {p.kind for p in made} == {"web_cdf", "web_sweep"} and all(p.path.exists() for p in made)


def test_each_quickstart_variant_has_its_benefit_against_slow_start_of_its_own_tcp():
    cubic_ss = {"impl": "linux-tcp", "cc": "cubic", "iw": 3}
    cubic_qs = {"impl": "quickstart", "base_cc": "cubic", "iw": 3}
    runs = [_record(v, s, pages, users=u, sweep={"users": u})
            for u in (1, 5)
            for v, s, pages in (("reno-iw3", SS, [2.0 * u, 2.0 * u]), ("qs-reno", QS, [1.0 * u, 1.0 * u]),
                                ("qs-reno-share50", QS, [1.5 * u, 1.5 * u]),
                                ("cubic-iw3", cubic_ss, [4.0, 4.0]), ("qs-cubic", cubic_qs, [3.0, 3.0]))]
    got = web_plots.benefit_by_variant(runs, ["large-files.http10"], [1, 5])
    assert set(got) == {"qs-reno", "qs-reno-share50", "qs-cubic"}
    assert got["qs-reno"] == pytest.approx([0.5, 0.5]) and got["qs-reno-share50"] == pytest.approx([0.25, 0.25])
    assert got["qs-cubic"] == pytest.approx([0.25, 0.25])        # against CUBIC's slow start, not Reno's


# --- a replay that goes wrong fails the run ------------------------------------------------------

DATA = Path(__file__).resolve().parent / "data" / "httperf"


def _sample_sessions():
    """The sessions tests/data/httperf's two-user samples replayed (benchmarks/surge_model.py samples)."""
    fs = surge.make_file_set(surge.SURGE_DEFAULT, 1, max_file_bytes=200_000)
    return fs, [surge.Session(s.user, tuple(surge.Visit(v.page, 0.5) for v in s.visits[:2]))
                for s in (surge.user_session(fs, u, 30.0) for u in range(2))]


def test_replay_problems_of_real_httperf_output():
    from wire.httperf_log import parse_files
    fs, sessions = _sample_sessions()
    for mode in HTTP_MODES:
        clean = parse_files(DATA / f"{mode}-stamped.out", DATA / f"{mode}-stamped.err")
        assert web.replay_problems(clean, fs, sessions, stopped=False) == []
    refused = parse_files(DATA / "refused.out", DATA / "refused.err")
    problems = web.replay_problems(refused, fs, sessions, stopped=False)
    assert "2 connrefused errors" in problems and "users [0, 1] did not get all their replies" in problems
    # Stopped at the bound: unfinished sessions are expected, errors still are not.
    stopped = parse_files(DATA / "stopped.out", DATA / "stopped.err")
    assert web.replay_problems(stopped, fs, sessions, stopped=True) == []
    assert web.replay_problems(stopped, fs, sessions, stopped=False)


class _FakeProc:
    """A stamper as _wait sees it: poll() gives the codes in turn, stop() records the call."""

    def __init__(self, codes: list):
        self.codes, self.stopped = list(codes), False
        self.popen = self

    def poll(self):
        return self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]

    def stop(self, grace_s: float = 0.0):
        self.stopped = True


class _FakeSession:
    def __init__(self, workdir: Path):
        self.workdir = workdir


def test_an_httperf_that_dies_fails_the_run_with_its_log(tmp_path):
    dead = web.Replay("cl1", "10.1.0.1", [0], [], tmp_path / "httperf-x-cl1.out", _FakeProc([None, 1]))
    alive = web.Replay("cl2", "10.1.0.2", [1], [], tmp_path / "httperf-x-cl2.out", _FakeProc([None]))
    dead.err.write_text("httperf: connect: Network is unreachable\n")
    with pytest.raises(web.WorkloadError) as err:
        web.WORKLOAD._wait(_FakeSession(tmp_path), [dead, alive], "x", deadline=float("inf"))
    text = str(err.value)
    assert "httperf on cl1 (x) exited with status 1" in text and "Network is unreachable" in text
    assert alive.proc.stopped


def test_a_replay_past_its_bound_is_stopped(tmp_path):
    slow = web.Replay("cl1", "10.1.0.1", [0], [], tmp_path / "o.out", _FakeProc([None]))
    assert web.WORKLOAD._wait(_FakeSession(tmp_path), [slow], "x", deadline=0.0) is True and slow.proc.stopped
    done = web.Replay("cl1", "10.1.0.1", [0], [], tmp_path / "o.out", _FakeProc([0]))
    assert web.WORKLOAD._wait(_FakeSession(tmp_path), [done], "x", deadline=0.0) is False
