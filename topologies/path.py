"""The topology every startlab network is made of, declared as a Mininet Topo.

    clients — sw1 — r1 — co1 — r2 [— co2 — r3 …] — sw2 — servers

Routers are hosts with forwarding; each core node `co<k>` sits between two routers and
carries the delay element. The dumbbell is this path with two routers (Blitzstart §4),
the chain of the Quick-Start simulations (Allman/Floyd/Sarolahti §4) the same with three.
Names and addresses are in topologies/names.py, which needs no Mininet.
"""
from __future__ import annotations

from mininet.topo import Topo

from topologies.names import PathNames


class PathTopo(Topo):
    """Clients and servers at the two ends of a chain of routers joined through core nodes."""

    def build(self, names: PathNames) -> None:  # type: ignore[override]
        sw_c = self.addSwitch(names.switch("client"), dpid="1")
        sw_s = self.addSwitch(names.switch("server"), dpid="2")
        for i, name in enumerate(names.clients(), 1):
            self.addHost(name, ip=None)
            self.addLink(name, sw_c, intfName1=names.host_intf(name), intfName2=f"{sw_c}-eth{i}")
        for i, name in enumerate(names.servers(), 1):
            self.addHost(name, ip=None)
            self.addLink(name, sw_s, intfName1=names.host_intf(name), intfName2=f"{sw_s}-eth{i}")
        for name in names.routers_list():
            self.addHost(name, ip=None)
        for name in names.cores():
            self.addHost(name, ip=None)
        first, last = names.router(1), names.router(names.routers)
        self.addLink(first, sw_c, intfName1=names.facing(first, "client"), intfName2=f"{sw_c}-eth0")
        self.addLink(last, sw_s, intfName1=names.facing(last, "server"), intfName2=f"{sw_s}-eth0")
        for k in range(1, names.routers):
            west, east = names.router(k), names.router(k + 1)
            self.addLink(west, names.core(k), intfName1=names.facing(west, "server"),
                         intfName2=names.core_intf(k, "client"))
            self.addLink(names.core(k), east, intfName1=names.core_intf(k, "server"),
                         intfName2=names.facing(east, "client"))
