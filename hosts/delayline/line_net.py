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

from machine.registry import Instance, new_instance
from topologies.shell import check_cmd

H1_IP, H2_IP = "10.77.0.1", "10.77.0.2"
PROBE = Path(__file__).resolve().with_name("udp_probe.py")


class LineTopo(Topo):
    def build(self, prefix: str) -> None:  # type: ignore[override]
        h1 = self.addHost(f"{prefix}h1", ip=None)
        core = self.addHost(f"{prefix}c", ip=None)
        h2 = self.addHost(f"{prefix}h2", ip=None)
        self.addLink(h1, core)
        self.addLink(core, h2)


class LineNet:
    """The built network: nodes and the interface names of the core."""

    def __init__(self, net: Mininet, instance: Instance, offload: bool) -> None:
        p = instance.prefix
        self.net, self.instance = net, instance
        self.h1, self.core, self.h2 = net.get(f"{p}h1"), net.get(f"{p}c"), net.get(f"{p}h2")
        self.core_a, self.core_b = f"{p}c-eth0", f"{p}c-eth1"
        off = "on" if offload else "off"
        for node in (self.h1, self.core, self.h2):
            check_cmd(node, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in node.intfNames():
                if intf != "lo":
                    check_cmd(node, f"ip addr flush dev {intf}")
                    check_cmd(node, f"ethtool -K {intf} tso {off} gso {off} gro {off} >/dev/null")
                    check_cmd(node, f"ip link set {intf} up")
        check_cmd(self.h1, f"ip addr add {H1_IP}/24 dev {p}h1-eth0")
        check_cmd(self.h2, f"ip addr add {H2_IP}/24 dev {p}h2-eth0")
        # Static neighbours: no ARP exchange through the delay element.
        check_cmd(self.h1, f"ip neigh replace {H2_IP} lladdr {self.h2.intf(f'{p}h2-eth0').MAC()} "
                           f"dev {p}h1-eth0 nud permanent")
        check_cmd(self.h2, f"ip neigh replace {H1_IP} lladdr {self.h1.intf(f'{p}h1-eth0').MAC()} "
                           f"dev {p}h2-eth0 nud permanent")

    def udp_probe(self, count: int, burst: int, gap_us: float, port: int = 5601) -> dict:
        """Send `count` numbered datagrams h1 → h2 through the core; the receiver's summary."""
        recv = self.h2.popen([sys.executable, str(PROBE), "recv", str(port), str(count)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert recv.stdout is not None
            if recv.stdout.readline().strip() != b"listening":
                raise RuntimeError(f"probe receiver failed: {recv.stderr.read().decode() if recv.stderr else ''}")
            send = self.h1.popen([sys.executable, str(PROBE), "send", H2_IP, str(port), str(count),
                                  str(burst), str(gap_us)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            _, err = send.communicate(timeout=120)
            if send.returncode != 0:
                raise RuntimeError(f"probe sender failed: {err.decode()}")
            out, err = recv.communicate(timeout=60)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
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
