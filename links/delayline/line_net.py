"""A three-node network h1 — core — h2 for measuring a delay element on its own.

Used by the delay-line integration tests and benchmark: the core node bridges h1 and h2
at L2 (no addresses), so whatever the delay element does is all that lies between them.
"""
from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mininet.link import Link
from mininet.net import Mininet
from mininet.topo import Topo

from links.delay import cpu_plan, set_single_cpu_rps
from machine.cpuset import own_cpus
from machine.registry import Instance, new_instance
from machine.shell import check_cmd

H1_IP, H2_IP = "10.77.0.1", "10.77.0.2"
PROBE = Path(__file__).resolve().with_name("udp_probe.py")


# Node names in startlab's scheme (machine/cleanup.OUR_NAME), so `clean` and the leftover
# checks know them: h1 a client, the core, h2 a server.
H1, CORE, H2 = "cl1", "co", "sv1"


class LineTopo(Topo):
    def build(self, prefix: str) -> None:  # type: ignore[override]
        h1 = self.addHost(f"{prefix}{H1}", ip=None)
        core = self.addHost(f"{prefix}{CORE}", ip=None)
        h2 = self.addHost(f"{prefix}{H2}", ip=None)
        self.addLink(h1, core)
        self.addLink(core, h2)


class LineNet:
    """The built network: nodes and the interface names of the core."""

    def __init__(self, net: Mininet, instance: Instance, offload: bool) -> None:
        p = instance.prefix
        self.net, self.instance = net, instance
        self.h1, self.core, self.h2 = net.get(f"{p}{H1}"), net.get(f"{p}{CORE}"), net.get(f"{p}{H2}")
        self.core_a, self.core_b = f"{p}{CORE}-eth0", f"{p}{CORE}-eth1"
        off = "on" if offload else "off"
        for node in (self.h1, self.core, self.h2):
            check_cmd(node, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in node.intfNames():
                if intf != "lo":
                    check_cmd(node, f"ip addr flush dev {intf}")
                    check_cmd(node, f"ethtool -K {intf} tso {off} gso {off} gro {off} "
                                    f"tx-udp-segmentation {off} >/dev/null")
                    check_cmd(node, f"ip link set {intf} up")
                    # As in the dumbbell: receive work off the delay line's own CPU.
                    set_single_cpu_rps(node, intf, cpu_plan(own_cpus(), True)[0][0])
        check_cmd(self.h1, f"ip addr add {H1_IP}/24 dev {p}{H1}-eth0")
        check_cmd(self.h2, f"ip addr add {H2_IP}/24 dev {p}{H2}-eth0")
        # Static neighbours: no ARP exchange through the delay element.
        check_cmd(self.h1, f"ip neigh replace {H2_IP} lladdr {self.h2.intf(f'{p}{H2}-eth0').MAC()} "
                           f"dev {p}{H1}-eth0 nud permanent")
        check_cmd(self.h2, f"ip neigh replace {H1_IP} lladdr {self.h1.intf(f'{p}{H1}-eth0').MAC()} "
                           f"dev {p}{H2}-eth0 nud permanent")

    def add_pair(self, h1_ip: str, h2_ip: str) -> None:
        """One more address on h1 and on h2 (same /24), so several IPv4 pairs cross the core."""
        p = self.instance.prefix
        check_cmd(self.h1, f"ip addr add {h1_ip}/24 dev {p}{H1}-eth0")
        check_cmd(self.h2, f"ip addr add {h2_ip}/24 dev {p}{H2}-eth0")
        check_cmd(self.h1, f"ip neigh replace {h2_ip} lladdr {self.h2.intf(f'{p}{H2}-eth0').MAC()} "
                           f"dev {p}{H1}-eth0 nud permanent")
        check_cmd(self.h2, f"ip neigh replace {h1_ip} lladdr {self.h1.intf(f'{p}{H1}-eth0').MAC()} "
                           f"dev {p}{H2}-eth0 nud permanent")

    def start_probe(self, count: int, burst: int, gap_us: float, port: int = 5601, *,
                    payload: int | None = None, tos: int = 0, src: str | None = None,
                    dst: str = H2_IP, skip_s: float = 0.0, packets: bool = False) -> "Probe":
        """Start `count` numbered datagrams h1 → h2 through the core; `finish()` gives the
        summary (`packets`: with each datagram's seq, send time and one-way delay in ns)."""
        recv = self.h2.popen([sys.executable, str(PROBE), "recv", str(port), str(count), "--skip-s", str(skip_s),
                              *(["--packets"] if packets else [])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert recv.stdout is not None
        if recv.stdout.readline().strip() != b"listening":
            recv.kill()
            recv.wait()
            raise RuntimeError(f"probe receiver failed: {recv.stderr.read().decode() if recv.stderr else ''}")
        extra = ([] if payload is None else ["--payload", str(payload)]) + (["--tos", str(tos)] if tos else []) \
            + (["--src", src] if src else [])
        send = self.h1.popen([sys.executable, str(PROBE), "send", dst, str(port), str(count), str(burst),
                              str(gap_us), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return Probe(recv, send)

    def udp_probe(self, count: int, burst: int, gap_us: float, port: int = 5601, **options) -> dict:
        """Send `count` numbered datagrams h1 → h2 through the core; the receiver's summary."""
        return self.start_probe(count, burst, gap_us, port, **options).finish()

    def start_rx_rate(self, start_s: float, end_s: float) -> subprocess.Popen:
        """Sample h2's rx byte counter from start_s to end_s from now; JSON on its stdout."""
        return self.h2.popen([sys.executable, str(PROBE), "rxrate", f"{self.instance.prefix}{H2}-eth0",
                              str(start_s), str(end_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class Probe:
    """A running probe: receiver in h2, sender in h1."""

    def __init__(self, recv: subprocess.Popen, send: subprocess.Popen) -> None:
        self.recv, self.send = recv, send

    def finish(self) -> dict:
        try:
            _, err = self.send.communicate(timeout=120)
            if self.send.returncode != 0:
                raise RuntimeError(f"probe sender failed: {err.decode()}")
            out, err = self.recv.communicate(timeout=60)
        finally:
            for proc in (self.send, self.recv):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return json.loads(out)


@contextmanager
def line_net(offload: bool = False) -> Iterator[LineNet]:
    """Build h1 — core — h2 with a fresh instance; always stop and unregister it."""
    instance = new_instance()
    net = None
    try:
        net = Mininet(topo=LineTopo(prefix=instance.prefix), controller=None, link=Link,
                      autoSetMacs=True, build=True)
        yield LineNet(net, instance, offload)
    finally:
        instance.remove_all()
        if net is not None:
            net.stop()


FLOOD_PAYLOAD = 1472                # one full 1514-byte Ethernet frame per datagram


def flood(ln: LineNet, rate_bps: float, seconds: float, factor: float = 1.5, skip_s: float = 1.0,
          port: int = 5602) -> dict:
    """A numbered UDP flood h1 → h2 at `factor` × `rate_bps` for `seconds` (full-size frames).

    Returns the receiver's summary with `iface`, the slope of h2's rx byte counter (Ethernet
    bytes) from `skip_s` until 0.3 s before the flood ends, and the flood's own figures.
    """
    frame_bits = (FLOOD_PAYLOAD + 42) * 8
    pps = factor * rate_bps / frame_bits
    burst = max(1, round(pps * 0.002))          # bursts ≥ 2 ms apart keep the sender's spin cheap
    gap_us = burst / pps * 1e6
    count = int(pps * seconds)
    sampler = ln.start_rx_rate(skip_s, seconds - 0.3)
    probe = ln.start_probe(count, burst, gap_us, port, payload=FLOOD_PAYLOAD, skip_s=skip_s)
    result = probe.finish()
    out, err = sampler.communicate(timeout=30)
    if sampler.returncode != 0:
        raise RuntimeError(f"rx sampler failed: {err.decode()}")
    result["iface"] = json.loads(out)
    result["flood"] = {"pps": pps, "burst": burst, "gap_us": gap_us, "count": count}
    return result
