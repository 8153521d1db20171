"""Delay element: sizing math and backend choice (unit), and the delay line on a real network (root)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from machine.errors import UserError
from timing import timing_check
from links import delay

REPO = Path(__file__).resolve().parents[1]


# -- unit: sizing -------------------------------------------------------------------------

def test_netem_limit_covers_one_and_a_half_bdp():
    # 1 Gbit/s × 100 ms = 12.5 MB; × 1.5 / 1500 B = 12 500 packets.
    assert delay.netem_limit_packets(1e9, 0.1, 1500) == 12_500
    # Small BDPs keep netem's default limit.
    assert delay.netem_limit_packets(1e6, 0.01, 1500) == delay.NETEM_MIN_LIMIT
    with pytest.raises(ValueError):
        delay.netem_limit_packets(1e9, 0.1, 0)


def test_ring_is_at_least_one_and_a_half_bdp_with_floor_and_cap():
    # 1 Gbit/s × 300 ms: 1.5 × 37.5 MB = 56.25 MB plus two frames of wrap slack.
    assert delay.ring_bytes(1e9, 0.3) == 56_250_000 + 2 * delay.MAX_FRAME_BYTES
    assert delay.ring_bytes(50e6, 0.01) == delay.RING_FLOOR_BYTES
    assert delay.ring_bytes(None, 0.02) >= 1.5 * delay.DEFAULT_RATE_BPS / 8 * 0.02
    assert delay.ring_bytes(1e12, 10) == delay.RING_MAX_BYTES


def test_netem_commands_delay_each_direction_on_its_egress():
    cmds = delay.netem_commands("c-eth0", "c-eth1", "stl3fbr", 0.02, 0.005, 2000, 1000)
    text = [" ".join(c) for c in cmds]
    assert "ip link add name stl3fbr type bridge" in text
    assert "ip link set c-eth0 master stl3fbr" in text and "ip link set c-eth1 master stl3fbr" in text
    # a→b traffic leaves through intf_b.
    assert "tc qdisc replace dev c-eth1 root netem delay 20000us limit 2000" in text
    assert "tc qdisc replace dev c-eth0 root netem delay 5000us limit 1000" in text


def test_rps_mask_selects_exactly_one_cpu():
    assert delay.rps_mask(0) == "00000001"
    assert delay.rps_mask(5) == "00000020"
    assert delay.rps_mask(33) == "00000002,00000000"
    with pytest.raises(ValueError):
        delay.rps_mask(-1)


# -- unit: backend choice -------------------------------------------------------------------

def _machine(monkeypatch, netem: bool, binary: Path | None) -> None:
    monkeypatch.setattr(delay.capabilities, "probe_qdisc", lambda kind: netem if kind == "netem" else True)
    monkeypatch.setattr(delay, "delayline_binary", lambda: binary)


def test_auto_is_the_delay_line_on_every_kernel_and_netem_only_without_it(monkeypatch, tmp_path):
    fake = tmp_path / "startlab-delayline"
    for netem in (True, False):
        _machine(monkeypatch, netem, fake)
        chosen = delay.choose_backend("auto")
        assert chosen.name == "delayline" and chosen.binary == fake
    _machine(monkeypatch, True, None)
    assert delay.choose_backend("auto").name == "netem"
    _machine(monkeypatch, True, fake)
    assert delay.choose_backend("netem").name == "netem"


def test_auto_is_netem_on_the_virtual_clock_where_the_kernel_has_it(monkeypatch, tmp_path):
    """The guest's one CPU is the virtual clock's capacity: no userspace crossing per packet."""
    from machine import clock
    fake = tmp_path / "startlab-delayline"
    monkeypatch.setattr(clock, "is_virtual", lambda: True)
    _machine(monkeypatch, True, fake)
    assert delay.choose_backend("auto").name == "netem"
    assert delay.choose_backend("delayline").name == "delayline"
    _machine(monkeypatch, False, fake)
    assert delay.choose_backend("auto").name == "delayline"


def test_no_backend_says_why(monkeypatch):
    _machine(monkeypatch, False, None)
    with pytest.raises(UserError, match="no sch_netem.*not built.*cargo build"):
        delay.choose_backend("auto")
    with pytest.raises(UserError, match="'netem' unavailable"):
        delay.choose_backend("netem")
    with pytest.raises(UserError, match="'delayline' unavailable.*cargo build"):
        delay.choose_backend("delayline")
    with pytest.raises(UserError, match="unknown delay backend"):
        delay.choose_backend("mahimahi")


def test_summarize_takes_the_worse_direction():
    raw = {"a_to_b": {"lateness_us": {"p50": 3, "p99": 40, "max": 90.5}, "tx_frames": 7},
           "b_to_a": {"lateness_us": {"p50": 5, "p99": 20, "max": 30.0}, "tx_frames": 2},
           "drops": 1, "reorders": 0}
    s = delay.summarize(raw, 0.25)
    assert s["lateness_us"] == {"p50": 5, "p99": 40, "max": 90.5}
    assert (s["backend"], s["drops"], s["cpu_s"], s["a_to_b"]["tx_frames"]) == ("delayline", 1, 0.25, 7)


# -- root integration -----------------------------------------------------------------------

root = pytest.mark.root
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
ONE_WAY_S = 0.020


def _leftovers(prefix: str) -> list[str]:
    """Namespaces, links and processes still carrying the instance prefix."""
    left = [l for l in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
            if f": {prefix}" in l]
    left += [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if n.startswith(prefix)]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    left += [p for p in ps if "startlab-delayline" in p and f"{prefix}co-eth0" in p]
    left += [p for p in ps if f"mininet:{prefix}" in p]
    return left


@pytest.fixture
def line(tmp_path):
    """h1 — core — h2 with the delay line at 20 ms each way; checks teardown afterwards."""
    if delay.delayline_binary() is None:
        pytest.fail("delay line not built: cargo build --release -p startlab-delayline")
    from links.delayline.line_net import line_net
    with line_net(offload=True) as ln:
        element = delay.DelayLine()
        element.start(ln.core, ln.core_a, ln.core_b, ONE_WAY_S, ONE_WAY_S, 1e9, 1e9,
                      tmp_path / "delayline", ln.instance)
        prefix = ln.instance.prefix
        yield ln, element
        if element.proc is not None and element.proc.poll() is None:
            element.stop()
    time.sleep(0.2)
    assert _leftovers(prefix) == []


@pytest.mark.virtual_clock
@root
@needs_root
def test_udp_stream_delayed_exactly_without_loss_or_reordering(line, host_watch):
    ln, element = line
    # 3000 datagrams in bursts of 20 every 2 ms: a dense queue with gaps (10 kpps).
    probe = ln.udp_probe(count=3000, burst=20, gap_us=2000)
    stats = element.stop()
    owd = probe["owd_us"]
    # Whatever the host: nothing lost, duplicated, reordered or released early.
    assert probe["lost"] == 0 and probe["duplicates"] == 0 and probe["reordered"] == 0, probe
    assert owd["min"] >= ONE_WAY_S * 1e6, f"released early: {owd}"
    assert stats["drops"] == 0 and stats["reorders"] == 0, stats
    assert stats["a_to_b"]["tx_frames"] >= 3000
    assert stats["cpu_s"] is not None
    # On time: the emulator's to meet only on a host that ran it punctually.
    timing_check("UDP one-way delay mean within 0.3 ms, lateness p99 within 1 ms", host_watch.flags([stats]),
                 abs(owd["mean"] - ONE_WAY_S * 1e6) <= 300 and stats["lateness_us"]["p99"] <= 1000,
                 f"one-way {owd}, lateness {stats['lateness_us']}")


@pytest.mark.virtual_clock
@root
@needs_root
def test_ping_rtt_is_twice_the_delay(line, host_watch):
    ln, element = line
    from links.delayline.line_net import H2_IP
    out = ln.h1.cmd(f"ping -c 30 -i 0.02 -q {H2_IP}")
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", out)
    assert m, out
    rtt_min, rtt_avg = float(m.group(1)), float(m.group(2))
    assert "30 received" in out, out
    assert rtt_min >= 2 * ONE_WAY_S * 1e3, out
    stats = element.stop()
    assert stats["drops"] == 0
    timing_check("ping RTT mean within 0.3 ms of twice the delay", host_watch.flags([stats]),
                 abs(rtt_avg - 2 * ONE_WAY_S * 1e3) <= 0.3, out.strip().splitlines()[-1])


@pytest.mark.virtual_clock
@root
@needs_root
def test_tcp_with_offloads_passes_without_retransmission_storm(line, host_watch):
    ln, element = line
    from links.delayline.line_net import H2_IP
    server = ln.h2.popen(["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        # A 1 MB window (≈ 200 Mbit/s at 40 ms) keeps TCP from overrunning any queue, so
        # every retransmission would be the delay line's doing (mangled GSO frame,
        # bad checksum, drop).
        run = ln.h1.popen(["iperf3", "-c", H2_IP, "-p", "5299", "-t", "3", "-w", "1M", "-J"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = run.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    result = json.loads(out)
    sent = result["end"]["sum_sent"]
    stats = element.stop()
    # GSO super-frames must pass intact: frames larger than the MTU were forwarded.
    a = stats["a_to_b"]
    assert a["tx_bytes"] / max(a["tx_frames"], 1) > 1500, a
    assert stats["drops"] == 0, stats
    flags = host_watch.flags([stats])
    # The line never reorders (its stage holds a frame behind its predecessor); `reorders`
    # counts frames the host's receive path stamped out of their arrival order (measured: 2,
    # on a host whose line released frames 8.1 ms late at p99): the host's.
    timing_check("frames stamped in their arrival order", flags, stats["reorders"] == 0,
                 f"reorders {stats['reorders']}, lateness {stats['lateness_us']}")
    # Throughput is CPU time (the line copies every byte on a two-core host): the host's.
    timing_check("TCP through the delay line above 100 Mbit/s", flags,
                 sent["bits_per_second"] > 100e6, f"{sent['bits_per_second'] / 1e6:.1f} Mbit/s")
    # Unconditional: with no drop in the line (above), the line's FIFO order and the window
    # below any queue, a retransmission needs a mangled frame, or a stall past the RTO (200 ms
    # + srtt) or the loss probe (2 srtt, ~80 ms): a stall that long is a failure in its own right.
    segments = sent["bytes"] / 1448
    assert sent["retransmits"] <= 0.001 * segments, sent


@root
@needs_root
def test_refuses_different_mtus_with_a_clear_error(tmp_path):
    from links.delayline.line_net import line_net
    from machine.shell import check_cmd
    with line_net() as ln:
        check_cmd(ln.core, f"ip link set {ln.core_b} mtu 1400")
        element = delay.DelayLine()
        with pytest.raises(RuntimeError, match="MTUs differ"):
            element.start(ln.core, ln.core_a, ln.core_b, ONE_WAY_S, ONE_WAY_S, 1e8, 1e8,
                          tmp_path / "delayline", ln.instance)
        prefix = ln.instance.prefix
    assert _leftovers(prefix) == []


# -- root: the RPS mask, whatever mount says ------------------------------------------------

class _NamespaceNode:
    """A node whose shell is a fresh network namespace (unshare -n) with `bin` first on PATH."""
    name = "fresh-netns"

    def __init__(self, bin_dir: Path):
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def cmd(self, command: str) -> str:
        return subprocess.run(["unshare", "-n", "sh", "-c", command], capture_output=True, text=True,
                              env=self.env).stdout


def test_the_rps_mask_is_read_back_whatever_mount_says(tmp_path: Path) -> None:
    """util-linux's mount prints a hint on a systemd machine whose fstab changed since boot;
    read as part of the mask it failed every network build in a Vagrant guest."""
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mount").write_text("#!/bin/sh\necho 'mount: (hint) your fstab has been modified, but systemd "
                                   "still uses the old version; use systemctl daemon-reload to reload.' >&2\n"
                                   "exec /usr/bin/mount \"$@\"\n")
    (bin_dir / "mount").chmod(0o755)
    delay.set_single_cpu_rps(_NamespaceNode(bin_dir), "lo", 0)     # raises if the hint is read as the mask
