"""The topology every startlab network is made of, declared as data (a Mininet Topo).

    clients — sw1 — r1 — co1 — r2 [— co2 — r3 …] — sw2 — servers

Routers are hosts with forwarding; each core node `co<k>` sits between two routers and
carries the delay element. Interface names say what they face so later stages never
guess: on every router eth0 faces the clients and eth1 faces the servers, so
'down' traffic (server → client) leaves a router by eth0 and 'up' traffic by eth1.
The dumbbell is this path with two routers (Blitzstart §4), the chain of the Quick-Start
simulations (Allman/Floyd/Sarolahti §4) the same with three.
"""
from __future__ import annotations

from dataclasses import dataclass

from mininet.topo import Topo

CLIENT_NET = "10.1.0"
SERVER_NET = "10.2.0"
GATEWAY_HOST = 254

# Topology name (as profiles and scenarios write it) → number of routers.
TOPOLOGIES = {"dumbbell": 2, "chain": 3}


@dataclass(frozen=True)
class PathNames:
    """Node and interface names of one instance (all start with its prefix)."""
    prefix: str
    routers: int
    pairs: int

    def client(self, i: int) -> str:
        return f"{self.prefix}cl{i}"

    def server(self, i: int) -> str:
        return f"{self.prefix}sv{i}"

    def router(self, k: int) -> str:
        return f"{self.prefix}r{k}"

    def core(self, k: int) -> str:
        """Core node between router k and router k+1."""
        return f"{self.prefix}co{k}"

    def switch(self, side: str) -> str:
        return f"{self.prefix}sw{1 if side == 'client' else 2}"

    def clients(self) -> list[str]:
        return [self.client(i) for i in range(1, self.pairs + 1)]

    def servers(self) -> list[str]:
        return [self.server(i) for i in range(1, self.pairs + 1)]

    def routers_list(self) -> list[str]:
        return [self.router(k) for k in range(1, self.routers + 1)]

    def cores(self) -> list[str]:
        return [self.core(k) for k in range(1, self.routers)]

    # Addresses -----------------------------------------------------------------------
    @staticmethod
    def client_ip(i: int) -> str:
        return f"{CLIENT_NET}.{i}"

    @staticmethod
    def server_ip(i: int) -> str:
        return f"{SERVER_NET}.{i}"

    @staticmethod
    def segment_ip(k: int, end: int) -> str:
        """Address on the segment between router k (end=1) and router k+1 (end=2)."""
        return f"10.0.{k}.{end}"


class PathTopo(Topo):
    """Clients and servers at the two ends of a chain of routers joined through core nodes."""

    def build(self, names: PathNames) -> None:  # type: ignore[override]
        sw_c = self.addSwitch(names.switch("client"), dpid="1")
        sw_s = self.addSwitch(names.switch("server"), dpid="2")
        for i, name in enumerate(names.clients(), 1):
            self.addHost(name, ip=None)
            self.addLink(name, sw_c, intfName1=f"{name}-eth0", intfName2=f"{sw_c}-eth{i}")
        for i, name in enumerate(names.servers(), 1):
            self.addHost(name, ip=None)
            self.addLink(name, sw_s, intfName1=f"{name}-eth0", intfName2=f"{sw_s}-eth{i}")
        for name in names.routers_list():
            self.addHost(name, ip=None)
        for name in names.cores():
            self.addHost(name, ip=None)
        first, last = names.router(1), names.router(names.routers)
        self.addLink(first, sw_c, intfName1=f"{first}-eth0", intfName2=f"{sw_c}-eth0")
        self.addLink(last, sw_s, intfName1=f"{last}-eth1", intfName2=f"{sw_s}-eth0")
        for k in range(1, names.routers):
            west, core, east = names.router(k), names.core(k), names.router(k + 1)
            self.addLink(west, core, intfName1=f"{west}-eth1", intfName2=f"{core}-eth0")
            self.addLink(core, east, intfName1=f"{core}-eth1", intfName2=f"{east}-eth0")
