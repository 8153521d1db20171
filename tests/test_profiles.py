"""Profile arithmetic and validation of profile files."""
import math

import pytest

from machine.errors import UserError
from links.profiles import LinkProfile, get_profile, load_profiles


def profile(**kw) -> LinkProfile:
    base = dict(name="t", down_mbps=50, up_mbps=10, rtt_ms=50, buffer_pkts=208)
    base.update(kw)
    return LinkProfile(**base)


def test_bdp_and_buffers():
    p = profile()
    assert p.bdp_bytes("down") == pytest.approx(50e6 * 0.05 / 8)
    assert p.bdp_bytes("up") == pytest.approx(10e6 * 0.05 / 8)
    assert p.buffer_packets("down") == 208
    assert p.buffer_bytes("down") == 208 * 1514          # tbf counts the Ethernet header
    q = profile(buffer_pkts=None, buffer_ms=50)
    assert q.buffer_packets("down") == round(50e6 * 0.05 / 8 / 1514)
    assert q.buffer_packets("up") == round(10e6 * 0.05 / 8 / 1514)


def test_goodput_ideal_is_payload_share_of_the_frame():
    p = profile()
    assert p.mss == 1448
    assert p.goodput_ideal_bps("down") == pytest.approx(50e6 * 1448 / 1514)


def test_tbf_burst_is_at_least_three_frames_and_covers_timer_slack():
    assert profile(down_mbps=10).tbf_burst_bytes("down") == 3 * 1514
    assert profile(down_mbps=100).tbf_burst_bytes("down") == 5 * 1514
    one_gig = profile(down_mbps=1000).tbf_burst_bytes("down")
    assert one_gig == math.ceil(1e9 / 8 * 500e-6 / 1514) * 1514
    assert one_gig >= 1e9 / 8 * 500e-6


def test_tbf_burst_holds_a_whole_gso_frame_when_offloads_are_on():
    assert profile(down_mbps=10, offload=True).tbf_burst_bytes("down") >= 65536 + 44 * 66


def test_one_way_delay_split_over_core_nodes():
    p = profile(rtt_ms=128)
    assert p.one_way_delay_s(1) == pytest.approx(0.064)
    assert p.one_way_delay_s(2) == pytest.approx(0.032)


def test_shipped_profiles_match_the_papers():
    profiles = load_profiles()
    for name in ("dsl-slow", "dsl-fast", "3g", "lte", "gprs", "geo-sat", "t1-50ms", "t1-200ms",
                 "js-dumbbell", "qs-10m", "qs-100m", "scharf-100ms", "scharf-200ms", "lab-1g"):
        assert name in profiles
    assert (profiles["dsl-fast"].down_mbps, profiles["dsl-fast"].rtt_ms, profiles["dsl-fast"].buffer_packets()) == (50, 50, 208)
    assert (profiles["lte"].down_mbps, profiles["lte"].rtt_ms, profiles["lte"].buffer_packets()) == (32, 70, 560)
    assert (profiles["js-dumbbell"].down_mbps, profiles["js-dumbbell"].rtt_ms, profiles["js-dumbbell"].buffer_packets()) == (5, 64, 60)
    assert profiles["qs-10m"].topology == "chain"


def test_unknown_profile_lists_the_choices():
    with pytest.raises(UserError) as exc:
        get_profile("dsl-fats")
    assert "dsl-fast" in str(exc.value) and "lte" in str(exc.value)


@pytest.mark.parametrize("field,value,expected", [
    ("down_mbps", 0, "below the minimum"),
    ("down_mbps", -5, "below the minimum"),
    ("down_mbps", 50000000, "above the maximum"),      # bit/s written into a Mbit/s field
    ("rtt_ms", 0, "below the minimum"),
    ("rtt_ms", "fast", "expected a number"),
    ("buffer_pkts", 0, "below the minimum"),
    ("buffer_pkts", 2.5, "whole number"),
])
def test_bad_profile_values_name_file_line_and_field(tmp_path, field, value, expected):
    good = {"down_mbps": 10, "up_mbps": 10, "rtt_ms": 40, "buffer_pkts": 50}
    good[field] = value
    body = "\n".join(f"    {k}: {v!r}" if isinstance(v, str) else f"    {k}: {v}" for k, v in good.items())
    path = tmp_path / "profiles.yaml"
    path.write_text(f"format: 1\nprofiles:\n  mine:\n{body}\n")
    with pytest.raises(UserError) as exc:
        load_profiles(path)
    line = 4 + list(good).index(field)
    assert str(exc.value).startswith(f"{path}:{line}: profiles.mine.{field}: "), str(exc.value)
    assert expected in str(exc.value)


def test_profile_needs_exactly_one_buffer_form(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("profiles:\n  x: {down_mbps: 1, up_mbps: 1, rtt_ms: 10}\n")
    with pytest.raises(UserError, match="exactly one of buffer_pkts or buffer_ms"):
        load_profiles(path)


def test_unknown_field_is_an_error_not_ignored(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("profiles:\n  x:\n    down_mbps: 1\n    up_mbps: 1\n    rtt_ms: 10\n    buffer_pkts: 5\n    delay_ms: 3\n")
    with pytest.raises(UserError) as exc:
        load_profiles(path)
    assert f"{path}:7: profiles.x.delay_ms: unknown field" in str(exc.value)


def test_yaml_syntax_error_has_a_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("profiles:\n  x: [1, 2\n")
    with pytest.raises(UserError, match=r"p.yaml:\d+: YAML syntax"):
        load_profiles(path)


def test_tbf_counters_read_sent_bytes_packets_and_drops():
    from links.shapers.tbf import tbf_counters
    out = ("qdisc tbf 1: root refcnt 2 rate 10Mbit burst 15140b lat 100ms \n"
           " Sent 13406791 bytes 8883 pkt (dropped 937, overlimits 120 requeues 0) \n"
           " backlog 0b 0p requeues 0\n")
    assert tbf_counters(out) == {"sent_bytes": 13406791, "sent_pkts": 8883, "dropped": 937}
    assert tbf_counters("") == {"sent_bytes": 0, "sent_pkts": 0, "dropped": 0}


# -- trace links and random loss ---------------------------------------------------------------

def test_a_trace_link_takes_its_rate_from_its_trace_and_its_loss_from_the_profile(tmp_path):
    trace = tmp_path / "four-per-ms.trace"
    trace.write_text("".join(f"{ms}\n" for ms in range(1, 1001) for _ in range(4)))
    path = tmp_path / "p.yaml"
    path.write_text(f"profiles:\n  cell:\n    trace_down: {trace}\n    up_mbps: 5\n    rtt_ms: 60\n"
                    f"    buffer_pkts: 100\n    loss_down: 0.01\n")
    p = load_profiles(path)["cell"]
    # Four 1514-byte frames per ms: 48.448 Mbit/s at the link layer (1500-byte packets: 48).
    assert p.down_mbps == pytest.approx(48.448) and p.up_mbps == 5
    assert p.trace_path("down") == trace and p.trace_path("up") is None
    assert (p.loss("down"), p.loss("up")) == (0.01, 0.0) and p.is_trace and p.needs_link_model


@pytest.mark.parametrize("extra, field, message", [
    ("    down_mbps: 5\n    trace_down: x.trace\n", "down_mbps", "not both"),
    ("    trace_down: {trace}\n", "trace_down", "line 2: 'x' is not a whole number"),
    ("    trace_down: no-such.trace\n", "trace_down", "cannot read the trace"),
    ("", "down_mbps", "give down_mbps (Mbit/s) or trace_down"),
    ("    down_mbps: 5\n    loss_down: 0.9\n", "loss_down", "above the maximum"),
])
def test_bad_trace_and_loss_fields_name_the_field(tmp_path, extra, field, message):
    trace = tmp_path / "bad.trace"
    trace.write_text("1\nx\n")
    path = tmp_path / "p.yaml"
    path.write_text("profiles:\n  cell:\n    up_mbps: 5\n    rtt_ms: 60\n    buffer_pkts: 100\n"
                    + extra.format(trace=trace))
    with pytest.raises(UserError) as exc:
        load_profiles(path)
    assert f"profiles.cell.{field}: " in str(exc.value) and message in str(exc.value), str(exc.value)


def test_pantheon_profiles_are_their_calibrated_paths():
    """The six calibrated emulators of Pantheon's observatory: trace, RTT = 2 × mm-delay,
    the uplink queue and loss on the data direction."""
    profiles = load_profiles()
    expect = {"pantheon-nepal-india": (0.57, 56, 14, 0.0477), "pantheon-mexico-cellular": (2.64, 176, 130, 0.0),
              "pantheon-colombia-cellular": (3.04, 260, 426, 0.0), "pantheon-india": (100.42, 54, 173, 0.0),
              "pantheon-korea-china": (77.72, 102, 94, 0.0006), "pantheon-california-mexico": (114.68, 90, 450, 0.0)}
    for name, (mbps, rtt, queue, loss) in expect.items():
        p = profiles[name]
        # The trace's rate of 1500-byte packets, within a Poisson realisation's 2 %.
        assert p.down_mbps * 1500 / 1514 == pytest.approx(mbps, rel=0.02), name
        assert (p.rtt_ms, p.buffer_packets(), p.loss_down, p.loss_up) == (rtt, queue, loss, 0.0), name
        assert p.trace_down == p.trace_up and p.trace_path("down").is_file()
