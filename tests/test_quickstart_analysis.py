"""Quick-Start in the campaign analysis: summary columns, Equation 2, speedup and
time-sequence figures, on synthetic campaigns whose figures are known by construction."""

import json
import math
from pathlib import Path

import pytest

from analysis.plots import model_windows, speedups
from results.campaign import load_campaign
from analysis.report import write_report
from analysis.transfer_model import path_packets, relative_improvement, round_trips
from summaries import cell_figures, read_csv
from test_report import BASE_FCT, FCT_OFFSET, make_campaign, row_of

QS_COLUMNS = ["qs_requested_ratio", "qs_approval_ratio", "qs_failure_ratio", "qs_bytes_mean"]


# ------------------------------------------------------------------ Equation 2

def test_equation_2_round_trips_by_hand():
    assert round_trips(21, 3, 1000) == 4                # log2(21/3 + 1) = 3, plus one RTT for N < M
    assert round_trips(186, 3, 93) == 7                 # log2(93/3 + 1) = 5, plus ceil(186/93) = 2
    assert round_trips(5, 100, 1000) == 2               # the window covers it: one RTT of data + handshake
    assert path_packets(120e6, 0.1, 1500) == 1000


def test_equation_2_reproduces_the_papers_statement_for_an_initial_window_of_two():
    # "a data transfer of log2(N+2) − 1 round-trip times without Quick-Start (initial
    # window of two packets) is reduced to a single round-trip time with Quick-Start"
    for n in (6, 14, 30, 62, 100, 500):
        assert round_trips(n, 2, 10_000) - 1 == pytest.approx(math.log2(n + 2) - 1)
        assert round_trips(n, n, 10_000) - 1 == 1


def test_relative_improvement_from_sizes_and_path():
    # 21 packets of 1448 bytes, M = 120 Mbit/s × 0.1 s / 1500 B = 1000: 4 → 2 round trips
    assert relative_improvement(21 * 1448, 1448, 1500, 120e6, 0.1, 100, 3) == 0.5
    assert relative_improvement(21 * 1448, 1448, 1500, 120e6, 0.1, 3, 3) == 0
    with pytest.raises(ValueError):
        round_trips(10, 0, 100)


# ------------------------------------------------------------------ synthetic Quick-Start campaigns

def qs_block(variant: str, rep: int) -> dict | None:
    """"blitz" plays the Quick-Start variant: requests always, approved in reps 0-2 at
    5.12 Mbit/s, a failure in rep 0, 10 KB × (rep + 1) in the Quick-Start phase;
    "slowstart" never requests; "cautious" has no block at all (an older run)."""
    if variant == "cautious":
        return None
    if variant == "slowstart":
        return {"requested": False}
    approved = rep < 3
    block = {"requested": True, "requested_code": 7, "requested_bps": 5_120_000, "approved": approved,
             "verdict": "approved" if approved else "rejected", "approved_bps": 5_120_000 if approved else 0}
    if approved:
        block.update(qs_pkts=7 * (rep + 1), qs_bytes=10_000 * (rep + 1), qs_lost_pkts=int(rep == 0),
                     qs_failure=rep == 0)
    return block


def add_quickstart(root: Path) -> None:
    """Give every run of a make_campaign() campaign its Quick-Start block, a time-sequence
    series and the server's initial window (3) in its variant definition."""
    for run in root.iterdir():
        if not (run / "metrics.json").is_file():
            continue
        meta = json.loads((run / "meta.json").read_text())
        metrics = json.loads((run / "metrics.json").read_text())
        block = qs_block(meta["variant"], meta["rep"])
        if block is not None:
            metrics["quickstart"] = block
        metrics["time_sequence"] = {"t": [0.1, 0.2, 0.3], "seq": [1448, 2896, 4344], "retx": [0, 0, 1],
                                    "stride": 1}
        meta["variant_definition"] = {"roles": {"server": {"impl": "linux_tcp", "iw": 3}}}
        (run / "metrics.json").write_text(json.dumps(metrics))
        (run / "meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def qs_campaign(tmp_path_factory) -> Path:
    root = make_campaign(tmp_path_factory.mktemp("qs") / "campaign", long_flow=False)
    add_quickstart(root)
    write_report(root)
    return root


def test_summary_has_the_quick_start_figures(qs_campaign):
    rows = cell_figures(qs_campaign)
    assert all(c in rows[0] for c in QS_COLUMNS)
    qs = row_of(rows, "dsl", 70_000, "blitz")
    assert float(qs["qs_requested_ratio"]) == 1.0
    assert float(qs["qs_approval_ratio"]) == 0.75                     # 3 of 4 requests
    assert float(qs["qs_failure_ratio"]) == pytest.approx(1 / 3)        # 1 of 3 approved
    assert float(qs["qs_bytes_mean"]) == 20_000                         # (10 + 20 + 30) KB / 3
    base = row_of(rows, "dsl", 70_000, "slowstart")
    assert float(base["qs_requested_ratio"]) == 0.0
    assert base["qs_approval_ratio"] == base["qs_failure_ratio"] == base["qs_bytes_mean"] == ""
    old = row_of(rows, "lte", 2_000_000, "cautious")
    assert all(old[c] == "" for c in QS_COLUMNS)
    report = (qs_campaign / "report.md").read_text()
    assert "## Quick-Start" in report and "| dsl | 70KB | blitz | 4 | 100% | 75% | 33% | 20.0 KB |" in report


def test_campaign_without_quick_start_has_empty_columns_and_no_section(tmp_path):
    root = make_campaign(tmp_path / "c", variants=("slowstart", "blitz"), sizes=(70_000,), profiles=("dsl",),
                         reps=2)
    write_report(root)
    rows = cell_figures(root)
    assert all(r[c] == "" for r in rows for c in QS_COLUMNS)
    assert "Quick-Start" not in (root / "report.md").read_text()
    assert not list((root / "plots").glob("speedup_*")) and not list((root / "plots").glob("time_sequence_*"))


def test_speedup_and_model_inputs_from_the_records(qs_campaign):
    campaign, records = load_campaign(qs_campaign)
    dsl = [r for r in records if r.profile == "dsl"]
    rows = [(size, [r for r in dsl if r.size_bytes == size]) for size in sorted(BASE_FCT)]
    got = dict(speedups(rows, "blitz", "slowstart"))
    for size, base in BASE_FCT.items():
        mean_rep = sum(range(4)) / 4 * 0.001
        assert got[size] == pytest.approx((base + mean_rep) / (base + FCT_OFFSET["blitz"] + mean_rep))
    qs_window, iw = model_windows(dsl, "blitz", "slowstart")
    # Equation 1 at 5.12 Mbit/s and the profile's 50 ms: 21.3 packets of 1500 bytes
    assert qs_window == pytest.approx(5.12e6 * 0.05 / 8 / 1500) and iw == 3
    assert model_windows(dsl, "cautious", "slowstart") is None         # never approved


def test_quick_start_campaign_draws_speedup_and_time_sequence_figures(qs_campaign):
    plots = qs_campaign / "plots"
    for profile in ("dsl", "lte"):
        assert (plots / f"speedup_{profile}.png").read_bytes()[:4] == b"\x89PNG"
        for size in ("70KB", "2MB"):
            assert (plots / f"time_sequence_{profile}_{size}.png").is_file()
    page = (qs_campaign / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(list(plots.glob("*.png")))


# ------------------------------------------------------------------ a swept offered load

def test_swept_campaign_has_one_row_per_point_and_load_figures(tmp_path):
    """Reps 0-1 ran at load 0.2, reps 2-3 at 0.8; utilisation 0.3 + 0.6 × load + rep / 100,
    drop rate 1 % at the high load only."""
    root = make_campaign(tmp_path / "c", sizes=(70_000,), profiles=("dsl",))
    add_quickstart(root)
    for run in root.iterdir():
        if (run / "meta.json").is_file():
            meta = json.loads((run / "meta.json").read_text())
            load = 0.2 if meta["rep"] < 2 else 0.8
            meta["sweep"] = {"long_load": load}
            meta["link_use"] = {"utilisation": 0.3 + 0.6 * load + meta["rep"] / 100,
                                "drop_rate": 0.01 if load > 0.5 else 0.0}
            (run / "meta.json").write_text(json.dumps(meta))
    write_report(root)
    rows = cell_figures(root)
    assert len(rows) == len(read_csv(root / "summary.csv")[1]) == 3 * 2
    low = [r for r in rows if r["sweep_value"] == "0.2"]
    high = [r for r in rows if r["sweep_value"] == "0.8"]
    assert len(low) == len(high) == 3 and all(r["sweep_param"] == "long_load" and r["runs"] == "2" for r in rows)
    qs_high = next(r for r in high if r["variant"] == "blitz")
    assert float(qs_high["utilisation_mean"]) == pytest.approx(0.3 + 0.48 + 0.025)
    assert float(qs_high["drop_rate_mean"]) == 0.01
    # reps 0-1 of "blitz" were approved: approval 1 at the low load; reps 2-3: one of two
    assert float(next(r for r in low if r["variant"] == "blitz")["qs_approval_ratio"]) == 1.0
    assert float(qs_high["qs_approval_ratio"]) == 0.5
    # compared with the baseline at the same load: the same 100 ms faster at both points
    assert float(qs_high["fct_diff"]) == pytest.approx(-0.1)
    plots = sorted(p.name for p in (root / "plots").glob("*.png"))
    assert plots == ["load_dsl_70KB.png"]          # the per-cell figures would mix the loads
    assert "dsl, long_load 0.8" in (root / "report.md").read_text()


def test_unswept_rows_leave_the_sweep_and_link_columns_empty(qs_campaign):
    rows = cell_figures(qs_campaign)
    assert all(r[c] == "" for r in rows for c in ("sweep_param", "sweep_value", "utilisation_mean",
                                                    "drop_rate_mean"))


# ------------------------------------------------------------------ a request deleted on the path

def test_a_request_a_rejecting_router_deleted_is_counted_from_the_servers_counters(tmp_path):
    """RFC 4782 lets a router that rejects a request delete it: the bottleneck's capture then
    shows a SYN-ACK without one, and only the server's counters know it was sent. Such a
    run requested and was not approved; a run whose server sent none did not request."""
    from analysis.quickstart import flow_quickstart, quickstart_figures
    from pcapcraft import ACK, SYN, Packet, write_pcap
    from wire.quickstart import code_to_bps
    synack = Packet(0.1, "10.2.0.1", "10.1.0.1", 80, 40000, seq=1000, ack=2, flags=SYN | ACK)
    ack = Packet(0.2, "10.1.0.1", "10.2.0.1", 40000, 80, seq=2, ack=1001)
    for name in ("cap-bneck-in.pcap", "cap-client.pcap"):
        write_pcap(tmp_path / name, [synack, ack])
    sent = {"stl1s1": {"requests_sent": 1, "last_rate_code": 8, "echoes": 0, "no_echo": 1}}
    block = flow_quickstart(tmp_path, 80, None, 0, None, None, sent)
    assert block == {"requested": True, "requested_code": 8, "requested_bps": code_to_bps(8),
                     "seen_on_path": False, "arrived_code": None, "echoed": False, "verdict": "no-echo",
                     "approved": False}
    assert flow_quickstart(tmp_path, 80, None, 0, None, None, {"stl1s1": {"requests_sent": 0}}) == \
        {"requested": False}
    assert flow_quickstart(tmp_path, 80, None, 0, None, None, None) == {"requested": False}
    figures = quickstart_figures([block, {"requested": False}])
    assert figures["qs_requested_ratio"] == 0.5 and figures["qs_approval_ratio"] == 0.0
