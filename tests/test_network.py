"""Root integration tests: real Mininet networks with tbf bottlenecks and the core delay."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT  # noqa: E402
from leftovers import assert_nothing_left, leftovers  # noqa: E402
from timing import timing_check
from hosts.apps import Iperf3Server
from hosts.process import NodeProcess
from hosts.workloads.competing import tx_bytes
from topologies.network import Network
from links.profiles import LinkProfile

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]


def small(rate_mbps: float, topology: str = "dumbbell", rtt_ms: float = 10) -> LinkProfile:
    return LinkProfile(name=f"test-{rate_mbps:g}", down_mbps=rate_mbps, up_mbps=rate_mbps, rtt_ms=rtt_ms,
                       buffer_pkts=100, topology=topology)


def ping_ok(node, ip: str) -> bool:
    return " 0% packet loss" in node.cmd(f"ping -n -c 2 -i 0.2 -W 2 {ip}")


@pytest.mark.parametrize("topology,routers", [("dumbbell", 2), ("chain", 3)])
def test_build_reachability_and_teardown(tmp_path, topology, routers):
    with Network(small(20, topology), tmp_path) as net:
        n = net.names
        assert n.routers == routers and len(n.cores()) == routers - 1
        for i in (1, 2):
            for j in (1, 2):
                assert ping_ok(net.host(n.client(i)), n.server_ip(j)), (i, j)
        # every router on the path forwards: the TTL drops by one per router
        out = net.host(n.client(1)).cmd(f"ping -n -c 1 -W 2 {n.server_ip(1)}")
        assert f"ttl={64 - routers}" in out, out
        # the core node has no addresses: it is not a router, only a delay element
        core = net.host(n.core(1))
        assert "inet " not in core.cmd("ip -4 -o addr show scope global")
        assert net.delay_backend_name in ("netem", "delayline")
        applied = net.applied()
        assert len(applied["queues"]) == 2 * (routers - 1) and applied["shaper"]["kind"] == "tbf"
        prefix = n.prefix
    assert prefix not in " ".join(leftovers()["links"])


@pytest.mark.parametrize("rate_mbps", [10, 50])
def test_tbf_delivers_the_configured_rate_within_one_percent(tmp_path, rate_mbps):
    """A UDP flood at 1.5 × the rate keeps the queue backlogged, so what leaves is tbf's rate
    (a TCP flow would measure its own sawtooth as well)."""
    with Network(small(rate_mbps), tmp_path) as net:
        n = net.names
        router, intf = net.host(n.router(2)), f"{n.router(2)}-eth0"
        server = Iperf3Server(net.host(n.server(1)), tmp_path, net.instance)
        client = NodeProcess(net.host(n.client(1)), ["iperf3", "-c", n.server_ip(1), "-R", "-u", "-b",
                                                     f"{int(rate_mbps * 1.5)}M", "-l", "1400", "-t", "8"],
                             net.instance, "iperf3 udp", log_path=tmp_path / "udp.log")
        try:
            time.sleep(1.0)
            b0, t0 = tx_bytes(router, intf), time.monotonic()
            time.sleep(4.0)
            b1, t1 = tx_bytes(router, intf), time.monotonic()
        finally:
            client.stop()
            server.stop()
        rate = (b1 - b0) * 8 / (t1 - t0)          # link-layer bytes, as tbf counts them
    timing_check(f"tbf rate within 1 % at {rate_mbps} Mbit/s", net.host_flags(),
                 abs(rate / (rate_mbps * 1e6) - 1) <= 0.01, f"{rate / 1e6:.3f} Mbit/s for {rate_mbps} configured")


def _start_detached(args: list[str], tmp_path: Path) -> subprocess.Popen:
    log = open(tmp_path / "proc.log", "wb")
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "STARTLAB_NO_REEXEC": "1"})


def _wait_for_network(timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if leftovers()["links"]:
            time.sleep(1.0)                       # let it get into the measurement
            return
        time.sleep(0.1)
    raise AssertionError("the network never came up")


@pytest.mark.parametrize("command", ["sleep 600", "trap '' INT; sleep 600"])
def test_teardown_ends_a_command_a_signal_cut_short(tmp_path, caplog, command):
    """A signal that ends a run can arrive while a node runs a command (Ctrl-C, or a scheduler
    cancelling a task): the teardown brings the node's shell back to its prompt, so every
    step of it still runs there and Mininet's own stop completes, in seconds. ^C ends the
    command, or, where it ignores SIGINT (a command started from a shell's background job
    inherits that), the teardown kills it."""
    t0 = time.monotonic()
    with Network(small(20), tmp_path) as net:
        node = net.host(net.names.client(1))
        node.sendCmd(command)                # what an interrupted node.cmd leaves: a node still waiting
        assert node.waiting
        shell = node.shell
    assert shell.poll() is not None
    assert not [r.getMessage() for r in caplog.records if r.name == "startlab.network"]
    # Not a timing check: the command would hold the teardown 600 s.
    assert time.monotonic() - t0 < 300


def test_sigterm_tears_everything_down(tmp_path):
    proc = _start_detached(["fidelity", "js-dumbbell"], tmp_path)
    _wait_for_network()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    assert_nothing_left()


def test_clean_removes_what_a_killed_run_left(tmp_path):
    workdirs_before = set(Path(tempfile.gettempdir()).glob("startlab-fidelity-*"))
    proc = _start_detached(["fidelity", "js-dumbbell"], tmp_path)
    _wait_for_network()
    proc.kill()                                   # no chance to tear down
    proc.wait(timeout=10)
    assert any(leftovers().values())
    out = subprocess.run([sys.executable, str(ROOT / "run.py"), "clean"], capture_output=True, text=True,
                         env={**os.environ, "STARTLAB_NO_REEXEC": "1"})
    assert out.returncode == 0, out.stderr
    assert "removed" in out.stdout
    assert_nothing_left()
    # The killed process could not remove its temporary work directory: the test does.
    for stale in set(Path(tempfile.gettempdir()).glob("startlab-fidelity-*")) - workdirs_before:
        shutil.rmtree(stale)


@pytest.mark.root
def test_a_process_in_a_node_namespace_is_found_without_its_registry_entry(clean_machine):
    """A server whose campaign was killed before it could register or stop it (a cluster's killed
    shard) is still found: by its network namespace, whose interfaces carry our names."""
    from links.delayline.line_net import line_net
    from machine.cleanup import processes_in_our_netns
    with line_net() as ln:
        stray = ln.core.popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            found = {pid: prefix for pid, _, prefix in processes_in_our_netns()}
            assert found.get(stray.pid) == ln.instance.prefix, found
            assert os.getpid() not in found
        finally:
            stray.kill()
            stray.wait()


def test_clean_leaves_foreign_objects_alone(tmp_path):
    """A link that merely looks similar, and someone else's process, survive `clean`."""
    subprocess.run(["ip", "link", "add", "stlx-other", "type", "dummy"], check=False)
    has_dummy = "stlx-other" in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        subprocess.run([sys.executable, str(ROOT / "run.py"), "clean"], capture_output=True,
                       env={**os.environ, "STARTLAB_NO_REEXEC": "1"}, check=True)
        assert sleeper.poll() is None
        if has_dummy:
            assert "stlx-other" in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "link", "del", "stlx-other"], check=False, capture_output=True)
