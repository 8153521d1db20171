"""Per-run metrics on synthetic runs whose every answer is known by construction."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from analysis import packets
from analysis.workloads.competing import run_metrics as competing_metrics
from machine.errors import UserError
from pcapcraft import ACK, ECT0, FIN, MSS, PSH, Conversation, DumbbellCaptures

RTT = 0.022  # one way 10 ms down + 10 ms up + 1 ms queue each way, roughly
CLIENT = "10.0.0.1"


@pytest.fixture(autouse=True)
def _extractor_built() -> None:
    if not packets.EXTRACTOR.is_file():
        pytest.fail(f"{packets.EXTRACTOR} missing: build it with "
                    "`cargo build --release -p startlab-pcapcols`")


@dataclass
class Run:
    """A synthetic run plus the answers the analysis must find."""

    caps: DumbbellCaptures = field(default_factory=DumbbellCaptures)
    syn_ts: float = 0.0
    end_ts: float = 0.0
    short_bytes: int = 0
    short_sent_bytes: int = 0
    short_lost: int = 0
    short_retx: int = 0
    long_bytes: int = 0
    long_retx: int = 0
    long_lost: int = 0
    long_arrivals: list[tuple[float, int]] = field(default_factory=list)  # (client time, new bytes)
    long_first: float = 0.0          # the long flow's first packet from its server (client time)
    short_arrivals: list[tuple[float, int]] = field(default_factory=list)


def add_long_flow(run: Run, t0: float, t1: float, drop_every: int = 0) -> None:
    """iperf3: a small control connection, then a bulk data connection on 5201 sending
    one MSS per ms; every `drop_every`-th segment is dropped and resent 30 ms later."""
    caps = run.caps
    ctl = Conversation(CLIENT, 50000, "10.0.1.2", 5201, client_isn=77, server_isn=88)
    caps.upstream(ctl.syn(t0 - 0.1))
    caps.downstream(ctl.synack(t0 - 0.1 + 0.011))
    caps.upstream(ctl.from_client(t0 - 0.07, 0, 200, ipid=1))
    caps.downstream(ctl.from_server(t0 - 0.06, 0, 300, ipid=1))
    data = Conversation(CLIENT, 50001, "10.0.1.2", 5201, client_isn=1, server_isn=3_000_000_000)
    caps.upstream(data.syn(t0 - 0.05))
    caps.downstream(data.synack(t0 - 0.05 + 0.011))
    run.long_first = caps.client_time(t0 - 0.05 + 0.011)
    i = 0
    while t0 + i * 0.001 < t1:
        t = t0 + 0.0005 + i * 0.001
        dropped = drop_every > 0 and i % drop_every == drop_every - 1
        caps.downstream(data.from_server(t, i * MSS, MSS, ipid=i), dropped=dropped)
        if dropped:
            run.long_lost += 1
            run.long_retx += 1
            caps.downstream(data.from_server(t + 0.030, i * MSS, MSS, ipid=60000 + i))
            run.long_arrivals.append((caps.client_time(t + 0.030), MSS))
        else:
            run.long_arrivals.append((caps.client_time(t), MSS))
        run.long_bytes += MSS
        i += 1


def add_short_flow(run: Run, syn_ts: float, size: int, drops: set[int], spurious: set[int],
                   server_isn: int = 5000, ecn: bool = False, marks: frozenset[int] = frozenset(),
                   waits_s: tuple[float, ...] = ()) -> None:
    """curl fetching `size` response bytes from lighttpd; segments in `drops` are lost
    at the queue and resent after the others, those in `spurious` are resent needlessly.
    `ecn`: the handshake sets up ECN and new data goes out ECT(0), as Linux's does; the
    queue marks the segments in `marks` CE. Segment i waits `waits_s[i]` in the queue
    beyond its fixed delay (0 past the tuple's end)."""
    caps = run.caps
    c = Conversation(CLIENT, 40000, "10.0.1.1", 80, server_isn=server_isn)
    run.syn_ts = syn_ts
    caps.upstream(c.syn(syn_ts, ecn=ecn))
    caps.downstream(c.synack(syn_ts + 0.0107, ecn=ecn))
    caps.upstream(c.from_client(syn_ts + 0.0223, 0, 90, ipid=1, flags=ACK | PSH))
    nseg = math.ceil(size / MSS)
    first = syn_ts + 0.0335
    ipid = 100
    for i in range(nseg):
        t = first + i * 0.0004
        n = min(MSS, size - i * MSS)
        wait = waits_s[i] if i < len(waits_s) else 0.0
        caps.downstream(c.from_server(t, i * MSS, n, ipid=ipid, tos=ECT0 if ecn else 0), dropped=i in drops,
                        marked=i in marks, waits_s=wait)
        ipid += 1
        run.short_sent_bytes += n
        if i not in drops:
            run.short_arrivals.append((caps.client_time(t) + wait, n))
    resend = first + nseg * 0.0004 + RTT
    for k, i in enumerate(sorted(drops | spurious)):
        t = resend + k * 0.0004
        n = min(MSS, size - i * MSS)
        caps.downstream(c.from_server(t, i * MSS, n, ipid=ipid))
        ipid += 1
        run.short_sent_bytes += n
        run.short_retx += 1
        if i in drops:
            run.short_arrivals.append((caps.client_time(t), n))
    run.short_lost = len(drops)
    run.short_bytes = size
    run.end_ts = max(t for t, _ in run.short_arrivals)
    caps.downstream(c.from_server(run.end_ts + 0.001, size, 0, ipid=ipid, flags=ACK | FIN))
    caps.upstream(c.from_client(run.end_ts + 0.002, 90, 0, flags=ACK | FIN))


def run_metrics(run_dir: Path, spec: dict) -> dict:
    return competing_metrics(run_dir, spec, MSS)


def spec(size: int, long: bool = True) -> dict:
    return {"short": {"server_port": 80, "size_bytes": size},
            "long": {"server_port": 5201} if long else None,
            "rtt_s": RTT, "rate_bps": 10e6}


def in_window(arrivals: list[tuple[float, int]], t0: float, t1: float) -> int:
    return sum(n for t, n in arrivals if t0 <= t <= t1)


SIZE = 70_000


@pytest.fixture
def competing(tmp_path: Path) -> tuple[Run, dict]:
    run = Run()
    add_long_flow(run, 1.0, 4.0, drop_every=97)
    nseg = math.ceil(SIZE / MSS)
    add_short_flow(run, 2.2, SIZE, drops={3, 17, nseg - 1}, spurious={5})
    run.caps.write(tmp_path)
    return run, run_metrics(tmp_path, spec(SIZE))


def test_short_flow_figures(competing: tuple[Run, dict]) -> None:
    run, m = competing
    s = m["short"]
    assert s["syn_ts"] == pytest.approx(run.syn_ts, abs=1e-6)
    # The last segment was dropped, so the flow ends with its retransmission.
    assert s["end_ts"] == pytest.approx(run.end_ts, abs=1e-6)
    assert s["fct_s"] == pytest.approx(run.end_ts - run.syn_ts, abs=2e-6)
    # The handshake, the request and its round trip: the first response segment's arrival.
    assert s["first_data_s"] == pytest.approx(run.short_arrivals[0][0] - run.syn_ts, abs=2e-6)
    assert s["bytes"] == run.short_bytes and s["complete"]
    assert s["lost_pkts"] == run.short_lost == 3
    assert s["retx_pkts"] == run.short_retx == 4
    assert s["inflation"] == pytest.approx(run.short_sent_bytes / run.short_bytes, rel=1e-12)


def test_long_flow_and_fairness(competing: tuple[Run, dict]) -> None:
    run, m = competing
    long = dict(m["long"])
    dip = {k: long.pop(k) for k in ("mbps_before", "mbps_during", "dip")}
    assert long == {"bytes": run.long_bytes, "retx_pkts": run.long_retx, "lost_pkts": run.long_lost, "ce_pkts": 0,
                    "lost_ect_pkts": 0}
    expected = (in_window(run.short_arrivals, run.syn_ts, run.end_ts)
                / in_window(run.long_arrivals, run.syn_ts, run.end_ts))
    assert m["fairness_ratio"] == pytest.approx(expected, rel=1e-12)
    # The long flow's dip: its rate while the short flow ran against the second before.
    before = in_window(run.long_arrivals, run.syn_ts - 1.0, run.syn_ts) * 8 / 1.0 / 1e6
    during = in_window(run.long_arrivals, run.syn_ts, run.end_ts) * 8 / (run.end_ts - run.syn_ts) / 1e6
    assert dip["mbps_before"] == pytest.approx(before, rel=1e-9)
    assert dip["mbps_during"] == pytest.approx(during, rel=1e-9)
    assert dip["dip"] == pytest.approx(1 - during / before, rel=1e-9)


def test_throughput_series(competing: tuple[Run, dict]) -> None:
    run, m = competing
    tp = m["throughput"]
    t = np.array(tp["t"])
    assert t[0] < 0 < t[-1]  # starts before the SYN, relative to it
    assert np.all(np.diff(t) > 0) and np.diff(t).max() < 0.01
    for i in range(0, len(t), 37):
        at = t[i] + run.syn_ts
        for arrivals, got in ((run.short_arrivals, tp["short_mbps"][i]), (run.long_arrivals, tp["long_mbps"][i])):
            nbytes = sum(n for ta, n in arrivals if at - RTT < ta <= at)
            assert got == pytest.approx(nbytes * 8 / RTT / 1e6, abs=2e-3), at


def test_long_flow_start_series(competing: tuple[Run, dict]) -> None:
    """The long flow's first second, from its first packet (the paper's Fig. 1, top)."""
    run, m = competing
    start = m["throughput"]["long_start"]
    first = run.long_first
    assert start["t"][0] == 0 and start["t"][-1] == pytest.approx(1.0)
    for i in range(0, len(start["t"]), 23):
        at = first + start["t"][i]
        nbytes = sum(n for ta, n in run.long_arrivals if at - RTT < ta <= at)
        assert start["mbps"][i] == pytest.approx(nbytes * 8 / RTT / 1e6, abs=2e-3), at


def test_result_is_json(competing: tuple[Run, dict]) -> None:
    _, m = competing
    back = json.loads(json.dumps(m, allow_nan=False))
    assert back["counts"]["client"]["connections"] == 3
    assert back["counts"]["bneck_in"]["tcp_packets"] == back["counts"]["bneck_out"]["tcp_packets"] + \
        m["short"]["lost_pkts"] + m["long"]["lost_pkts"]


def test_a_first_flight_a_timeout_disturbed_is_marked(tmp_path: Path) -> None:
    """A SYN sent twice (its first answer late, as behind a trace link's outage): the sender
    starts from one segment, so its first flight says nothing about the initial window."""
    run = Run()
    c = Conversation(CLIENT, 40000, "10.0.1.1", 80, server_isn=5000)
    run.caps.upstream(c.syn(1.0))
    add_short_flow(run, 2.0, SIZE, drops=set(), spurious=set())
    run.caps.write(tmp_path)
    m = run_metrics(tmp_path, spec(SIZE, long=False))
    assert m["flows"]["short"]["first_flight"]["disturbed"] == "handshake retransmitted"
    clean = tmp_path / "clean"
    run = Run()
    add_short_flow(run, 2.0, SIZE, drops=set(), spurious=set())
    run.caps.write(clean)
    assert "disturbed" not in run_metrics(clean, spec(SIZE, long=False))["flows"]["short"]["first_flight"]


def test_ce_marks_and_the_ecn_handshake_are_read_from_the_wire(tmp_path: Path) -> None:
    """A short flow that set up ECN and was marked CE on three segments at the queue (and
    lost one), beside a long flow without ECN: the marks are counted after the queue, each
    flow's handshake says whether it could be marked, and a run that declared ECN fails
    its check on the flow that did not set it up."""
    from analysis.flow_checks import flow_checks, problems
    run = Run()
    add_long_flow(run, 1.0, 3.0)
    add_short_flow(run, 2.2, SIZE, drops={7}, spurious=set(), ecn=True, marks=frozenset({2, 9, 30}))
    run.caps.write(tmp_path)
    m = run_metrics(tmp_path, spec(SIZE))
    assert (m["short"]["ce_pkts"], m["short"]["lost_pkts"]) == (3, 1)
    assert (m["long"]["ce_pkts"], m["long"]["lost_pkts"]) == (0, 0)
    # The lost segment reached the queue ECN-capable (its retransmission went out Not-ECT).
    assert m["short"]["lost_ect_pkts"] == 1 and m["long"]["lost_ect_pkts"] == 0
    assert m["flows"]["short"]["ecn"] is True and m["flows"]["long"]["ecn"] is False
    declared = {"flows": [{"name": n, "declared_cc": ["cubic"], "observed_cc": ["cubic"], "declared_ecn": True}
                          for n in ("short", "long")]}
    checks = {c["flow"]: c for c in flow_checks(declared, m)}
    assert checks["short"]["ecn_ok"] is True and checks["long"]["ecn_ok"] is False
    assert problems(list(checks.values())) == [
        "flow long: the end hosts ask for ECN, the handshake on the wire did not set it up"]
    # Without ECN the same drops and no mark: the flag says so.
    plain = tmp_path / "plain"
    run = Run()
    add_long_flow(run, 1.0, 3.0)
    add_short_flow(run, 2.2, SIZE, drops={7}, spurious=set())
    run.caps.write(plain)
    m = run_metrics(plain, spec(SIZE))
    assert m["short"]["ce_pkts"] == 0 and m["flows"]["short"]["ecn"] is False
    assert (m["short"]["lost_pkts"], m["short"]["lost_ect_pkts"]) == (1, 0)


def test_the_queueing_delay_is_read_from_the_captures_around_the_queue(tmp_path: Path) -> None:
    """Segment i of a short flow alone waits i × 0.5 ms beyond the queue's fixed 1 ms: the
    analysis finds the fixed part as the smallest transit and the rest as queueing delay,
    its percentiles while the flow ran and its largest value per step of the series."""
    run = Run()
    nseg = math.ceil(SIZE / MSS)
    waits = tuple(i * 0.0005 for i in range(nseg))
    add_short_flow(run, 1.0, SIZE, drops=set(), spurious=set(), waits_s=waits)
    run.caps.write(tmp_path)
    m = run_metrics(tmp_path, spec(SIZE, long=False))
    expected_ms = np.array(waits) * 1e3
    q = m["queue"]
    assert q["samples"] == nseg and q["base_transit_ms"] == pytest.approx(1.0, abs=0.002)
    assert q["p50_ms"] == pytest.approx(np.percentile(expected_ms, 50), abs=0.002)
    assert q["p99_ms"] == pytest.approx(np.percentile(expected_ms, 99), abs=0.002)
    assert q["max_ms"] == pytest.approx(expected_ms.max(), abs=0.002)
    series = m["throughput"]["queue_ms"]
    assert len(series) == len(m["throughput"]["t"])
    assert max(x for x in series if x is not None) == pytest.approx(expected_ms.max(), abs=0.002)
    # Before the SYN no segment reached the queue: those steps have no figure.
    assert series[0] is None


def test_short_flow_alone_across_sequence_wrap(tmp_path: Path) -> None:
    run = Run()
    size = 200_000
    add_short_flow(run, 0.5, size, drops={10, 60}, spurious={61, 62}, server_isn=2**32 - 50 * MSS)
    run.caps.write(tmp_path)
    m = run_metrics(tmp_path, spec(size, long=False))
    assert m["long"] is None and m["fairness_ratio"] is None
    assert m["short"]["bytes"] == size
    assert (m["short"]["lost_pkts"], m["short"]["retx_pkts"]) == (2, 4)
    assert m["short"]["fct_s"] == pytest.approx(run.end_ts - run.syn_ts, abs=2e-6)
    assert max(m["throughput"]["long_mbps"]) == 0


def test_incomplete_transfer_is_flagged(tmp_path: Path) -> None:
    run = Run()
    add_short_flow(run, 0.5, 10_000, drops=set(), spurious=set())
    run.caps.write(tmp_path)
    m = run_metrics(tmp_path, spec(20_000, long=False))
    assert m["short"]["bytes"] == 10_000 and not m["short"]["complete"]
    assert (m["short"]["lost_pkts"], m["short"]["retx_pkts"], m["short"]["inflation"]) == (0, 0, 1.0)


def test_missing_capture_names_it(tmp_path: Path) -> None:
    run = Run()
    add_short_flow(run, 0.5, 10_000, drops=set(), spurious=set())
    run.caps.write(tmp_path)
    (tmp_path / "cap-bneck-out.pcap").unlink()
    with pytest.raises(UserError, match="cap-bneck-out.pcap"):
        run_metrics(tmp_path, spec(10_000, long=False))


def test_missing_long_flow_is_an_error(tmp_path: Path) -> None:
    run = Run()
    add_short_flow(run, 0.5, 10_000, drops=set(), spurious=set())
    run.caps.write(tmp_path)
    with pytest.raises(UserError, match="5201"):
        run_metrics(tmp_path, spec(10_000, long=True))


def test_time_sequence_is_the_senders_data_decimated_with_every_retransmission(tmp_path: Path,
                                                                              monkeypatch) -> None:
    import analysis.workloads.competing as metrics_module
    monkeypatch.setattr(metrics_module, "MAX_SEQ_POINTS", 20)
    run = Run()
    size = 70_000                                      # 49 segments, then 3 resent
    add_short_flow(run, 0.5, size, drops={10, 30}, spurious={31}, server_isn=2**32 - 20 * MSS)
    run.caps.write(tmp_path)
    ts = run_metrics(tmp_path, spec(size, long=False))["time_sequence"]
    nseg = math.ceil(size / MSS)
    assert ts["stride"] == math.ceil((nseg + 3) / 20) == 3
    first = 0.5 + 0.0335 - run.syn_ts                  # the first data segment, relative to the SYN
    # every third segment of the first transmissions (sequence wraps at 20 segments in) …
    for k, i in enumerate(range(0, nseg, 3)):
        assert ts["t"][k] == pytest.approx(first + i * 0.0004, abs=2e-6)
        assert ts["seq"][k] == min((i + 1) * MSS, size) and ts["retx"][k] == 0
    # … then all three retransmissions, the last segment sent kept as well
    assert ts["retx"][-3:] == [1, 1, 1]
    assert ts["seq"][-3:] == [11 * MSS, 31 * MSS, 32 * MSS]
    assert len(ts["t"]) == len(range(0, nseg, 3)) + 3
