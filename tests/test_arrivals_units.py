"""The arrivals workload's pure parts: the schedule (reproducible per seed, the process's
distribution), the client's HTTP response parsing, and the scenario's bad input."""
from __future__ import annotations

import numpy as np
import pytest

from hosts.arrivals_client import Fetch, parse_head
from hosts.workloads.arrivals import schedule, schedules
from machine.errors import UserError
from scenarios.spec import load_scenario

BASE = {"flows": 100, "interarrival_s": 0.5, "process": "poisson", "directions": "both", "seed": 7}


def test_schedule_is_reproducible_per_seed():
    assert schedule(50, 0.5, "poisson", 7) == schedule(50, 0.5, "poisson", 7)
    assert schedule(50, 0.5, "poisson", 7) != schedule(50, 0.5, "poisson", 8)


def test_schedules_differ_by_direction_and_repetition_only():
    a, b = schedules(BASE, 1), schedules(BASE, 1)
    assert a == b and a["down"] != a["up"]
    assert schedules(BASE, 2)["down"] != a["down"]
    assert list(schedules({**BASE, "directions": "down"}, 1)) == ["down"]


def test_periodic_schedule_is_the_interval():
    assert schedule(4, 0.25, "periodic", 1) == [0.0, 0.25, 0.5, 0.75]


def test_poisson_gaps_are_exponential_with_the_mean():
    xs = np.diff(schedule(20001, 0.4, "poisson", 3))
    assert xs.min() >= 0
    assert abs(xs.mean() - 0.4) < 0.4 * 0.03                      # 20000 gaps: s.e. 0.7 %
    assert abs(np.std(xs) - 0.4) < 0.4 * 0.05                     # exponential: sd = mean
    assert abs(np.mean(xs > 0.4) - np.exp(-1)) < 0.02             # P(gap > mean) = 1/e


def test_parse_head_counts_the_body_only():
    f = Fetch(0, 0.0)
    parse_head(f, b"HTTP/1.0 200 OK\r\nContent-Len")
    assert f.status == 0 and f.bytes == 0
    parse_head(f, b"gth: 10\r\n\r\n12345")
    assert f.status == 200 and f.bytes == 5 and f.head_bytes == len(b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n")
    parse_head(f, b"67890")
    assert f.bytes == 10


def test_unknown_process_is_rejected_with_its_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nprofiles: [js-dumbbell]\nsizes: [100KB]\nworkload:\n  kind: arrivals\n"
                    "  process: bursty\nvariants: [reno-iw3]\n")
    with pytest.raises(UserError) as e:
        load_scenario(path)
    assert "bad.yaml:6" in str(e.value) and "process" in str(e.value) and "poisson" in str(e.value)


def test_the_jumpstart_sweep_scenario_loads():
    sc = load_scenario("scenarios/jumpstart-load.yaml")
    assert sc.workload.name == "arrivals" and sc.sweep.param == "interarrival_s"
    assert sc.sizes == [289600] and sc.workload_params["flows"] == 100


def _pk(rows: list[tuple]) -> dict:
    cols = ("src", "dst", "sport", "dport", "seq", "payload", "ipid")
    return {c: np.array([r[i] for r in rows], dtype=np.uint32) for i, c in enumerate(cols)}


def test_transmissions_lost_matches_every_field_of_a_transmission():
    from analysis.flows import transmissions_lost
    before = _pk([(1, 2, 80, 5000, 100, 1448, 7), (1, 2, 80, 5000, 1548, 1448, 8),
                  (1, 2, 80, 5000, 1548, 1448, 9),          # the retransmission: a new IP ID
                  (3, 2, 80, 5000, 100, 1448, 7)])          # another sender, same numbers
    after = _pk([(1, 2, 80, 5000, 100, 1448, 7), (1, 2, 80, 5000, 1548, 1448, 9)])
    lost = transmissions_lost(before, np.ones(4, bool), after, np.ones(2, bool))
    assert lost.tolist() == [False, True, False, True]
    only_first_two = np.array([True, True, False, False])
    assert transmissions_lost(before, only_first_two, after, np.ones(2, bool)).tolist() == [False, True]


def test_the_upstream_schedule_is_half_an_interval_later():
    s = schedules({**BASE, "process": "periodic", "flows": 3, "interarrival_s": 1.0}, 1)
    assert s["down"] == [0.0, 1.0, 2.0] and s["up"] == [0.5, 1.5, 2.5]


def _conn_packets(rows: list[tuple]) -> dict:
    """One connection (0) at a capture next to its sender: (ts, dir, flags, seq, ack, payload, ipid)."""
    cols = ("ts", "dir", "flags", "seq", "ack", "payload", "ipid")
    pk = {c: np.array([r[i] for r in rows]) for i, c in enumerate(cols)}
    n = len(rows)
    pk.update(conn=np.zeros(n, dtype=np.int64), retx=np.zeros(n, dtype=np.int64),
              src=np.where(pk["dir"] == 1, 2, 1).astype(np.uint32), dst=np.where(pk["dir"] == 1, 1, 2).astype(np.uint32),
              sport=np.where(pk["dir"] == 1, 80, 5000).astype(np.uint32),
              dport=np.where(pk["dir"] == 1, 5000, 80).astype(np.uint32))
    return pk


HANDSHAKE = [(0.0, 0, 0x02, 0, 0, 0, 1), (0.0001, 1, 0x12, 1000, 1, 0, 2), (0.1, 0, 0x10, 1, 1001, 0, 3),
             (0.1001, 0, 0x18, 1, 1001, 48, 4)]
IW3 = [(0.1002, 1, 0x10, 1001, 49, 1448, 10), (0.1003, 1, 0x10, 2449, 49, 1448, 11),
       (0.1004, 1, 0x10, 3897, 49, 1448, 12)]


def test_a_clean_first_flight_is_checked():
    from analysis import flows
    pk = _conn_packets(HANDSHAKE + IW3 + [(0.2, 0, 0x10, 49, 3897, 0, 5)])
    assert flows.first_flight(pk, 0, 1, 1448)["segments"] == 3
    assert flows.handshake_rtt(pk, 0, 1) == pytest.approx(0.0999)
    assert flows.first_flight_disturbed(pk, 0, 1, pk, 0, 1) == ""


def test_a_tail_loss_probe_before_the_first_ack_disturbs_the_flight():
    from analysis import flows
    probe = [(0.35, 1, 0x10, 5345, 49, 1448, 13)]          # 2.5 handshake RTTs later, no ACK yet
    pk = _conn_packets(HANDSHAKE + IW3 + probe + [(0.45, 0, 0x10, 49, 3897, 0, 5)])
    assert flows.first_flight(pk, 0, 1, 1448)["segments"] == 4
    assert flows.first_flight_disturbed(pk, 0, 1, pk, 0, 1) == "probe timeout before the first ACK"


def test_a_retransmitted_handshake_or_a_lost_flight_disturbs_the_flight():
    from analysis import flows
    again = [(1.0, 1, 0x12, 1000, 1, 0, 6)]                  # the SYN-ACK sent twice: IW 1 (RFC 5681)
    pk = _conn_packets(HANDSHAKE[:2] + again + HANDSHAKE[2:] + IW3[:1] + [(1.2, 0, 0x10, 49, 2449, 0, 5)])
    assert flows.first_flight_disturbed(pk, 0, 1, pk, 0, 1) == "handshake retransmitted"
    pk = _conn_packets(HANDSHAKE + IW3 + [(0.2, 0, 0x10, 49, 2449, 0, 5)])
    after = _conn_packets(HANDSHAKE + IW3[:1] + IW3[2:])     # the second segment dropped at the queue
    assert flows.first_flight_disturbed(pk, 0, 1, after, 0, 1) == "first flight lost at the queue"
