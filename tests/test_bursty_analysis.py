"""The bursty workload's analysis on a crafted run whose every figure is known."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.workloads.bursty import burst_metrics
from pcapcraft import ACK, FIN, SYN, Conversation, DumbbellCaptures

MSS = 1000
CL1, SV1, CL2, SV2 = "10.1.0.1", "10.2.0.1", "10.1.0.2", "10.2.0.2"


def craft(run_dir: Path, previous_run: bool = False) -> dict:
    """A P-HTTP connection: burst 1 (10 segments from t=1.0), a pause, burst 2 (10 segments
    from t=5.0: a restart window of 6 before the first ACK at 5.1, two of them dropped and
    resent); a bulk transfer sv2 → cl2 losing one segment during burst 2."""
    caps = DumbbellCaptures(queue_s=0.001, down_s=0.01, up_s=0.01)
    b = Conversation(CL1, 40000, SV1, 80)
    caps.upstream(b.syn(0.80))
    caps.downstream(b.synack(0.85))
    caps.upstream(b.from_client(0.90, 0, 0))
    caps.upstream(b.from_client(0.95, 0, 100, flags=ACK))                         # request 1
    for i in range(10):
        caps.downstream(b.from_server(1.0 + 0.01 * i, i * MSS, MSS, ipid=i))
    caps.upstream(b.from_client(1.2, 100, 0, acked=10 * MSS))
    caps.upstream(b.from_client(4.9, 100, 100, flags=ACK, acked=10 * MSS))        # request 2
    for i in range(6):                                                             # the restart window
        caps.downstream(b.from_server(5.0 + 0.015 * i, (10 + i) * MSS, MSS, ipid=20 + i), dropped=i in (2, 3))
    caps.upstream(b.from_client(5.1, 200, 0, acked=12 * MSS))                     # first ACK of burst 2
    for i in range(6, 10):
        caps.downstream(b.from_server(5.12 + 0.01 * i, (10 + i) * MSS, MSS, ipid=20 + i))
    caps.downstream(b.from_server(5.3, 12 * MSS, MSS, ipid=40))                   # the two resent
    caps.downstream(b.from_server(5.31, 13 * MSS, MSS, ipid=41))
    caps.upstream(b.from_client(5.4, 200, 0, acked=20 * MSS, flags=ACK | FIN))
    bulk = Conversation(CL2, 41000, SV2, 80)
    caps.upstream(bulk.syn(0.10))
    caps.downstream(bulk.synack(0.15))
    caps.upstream(bulk.from_client(0.20, 0, 100))
    for i in range(60):
        t = 0.3 + 0.1 * i
        caps.downstream(bulk.from_server(t, i * MSS, MSS, ipid=100 + i), dropped=i == 48)   # t = 5.1
    if previous_run:
        # The previous run's connections on the same network, still closing when this
        # run's captures start: FIN retransmissions without a SYN in these captures.
        for conv in (Conversation(CL1, 39000, SV1, 80), Conversation(CL2, 39001, SV2, 80)):
            for t in (0.05, 0.45):
                caps.downstream(conv.from_server(t, 70_000, 0, flags=ACK | FIN, ipid=900))
    caps.write(run_dir)
    return {"mode": "constant", "server_port": 80, "burst_bytes": 10 * MSS,
            "bursty": {"client_ip": CL1, "server_ip": SV1}, "bulk": {"client_ip": CL2, "server_ip": SV2, "count": 1},
            "requests": [{"sent": 0.95}, {"sent": 4.9}], "rtt_s": 0.1, "rate_bps": 1.5e6}


@pytest.mark.parametrize("previous_run", [False, True])
def test_burst_metrics(tmp_path, previous_run):
    m = burst_metrics(tmp_path, craft(tmp_path, previous_run), MSS)
    # burst 2: the server's first byte at 5.0, the last new byte (the resent segment 13,
    # at the bottleneck at 5.31) at the client 11 ms later
    assert m["burst2_s"] == pytest.approx(5.31 + 0.011 - 5.0, abs=1e-5)
    assert m["burst2_request_s"] == pytest.approx(5.321 - 4.9, abs=1e-5)
    assert m["burst1_s"] == pytest.approx(1.09 + 0.011 - 1.0, abs=1e-5)
    assert m["restart_window_segments"] == 6
    assert (m["bursty_lost_pkts"], m["bursty_lost_burst2_pkts"], m["bursty_retx_pkts"]) == (2, 2, 2)
    assert (m["bulk_connections"], m["bulk_lost_pkts"], m["bulk_lost_burst2_pkts"]) == (1, 1, 1)
    trace = m["bulk_trace"]
    assert trace["t"][0] == pytest.approx(4.0 - 5.0 + 0.0, abs=0.11) and max(trace["t"]) <= 3.0
    assert m["flows"]["bursty"]["first_flight"]["segments"] == 10      # the connection's first flight
    assert len(m["flows"]["bulk"]["first_flights"]) == 1
