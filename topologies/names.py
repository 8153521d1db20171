"""Names and addresses of one emulated path, as data (no Mininet here).

    clients — sw1 — r1 — co1 — r2 [— co2 — r3 …] — sw2 — servers

Every node, link and bridge of an instance starts with its prefix (machine.registry).
Interface names say what they face, so no later stage guesses: on every router eth0
faces the clients and eth1 faces the servers; 'down' traffic (server → client) leaves a
router by eth0 and 'up' traffic by eth1.
"""
from __future__ import annotations

from dataclasses import dataclass

from machine.registry import NODE_ROLES

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
        return f"{self.prefix}{NODE_ROLES['client']}{i}"

    def server(self, i: int) -> str:
        return f"{self.prefix}{NODE_ROLES['server']}{i}"

    def router(self, k: int) -> str:
        return f"{self.prefix}{NODE_ROLES['router']}{k}"

    def core(self, k: int) -> str:
        """Core node between router k and router k+1."""
        return f"{self.prefix}{NODE_ROLES['core']}{k}"

    def switch(self, side: str) -> str:
        return f"{self.prefix}{NODE_ROLES['switch']}{1 if side == 'client' else 2}"

    def clients(self) -> list[str]:
        return [self.client(i) for i in range(1, self.pairs + 1)]

    def servers(self) -> list[str]:
        return [self.server(i) for i in range(1, self.pairs + 1)]

    def routers_list(self) -> list[str]:
        return [self.router(k) for k in range(1, self.routers + 1)]

    def cores(self) -> list[str]:
        return [self.core(k) for k in range(1, self.routers)]

    # Interfaces --------------------------------------------------------------------
    @staticmethod
    def host_intf(node: str) -> str:
        """An end host's one interface."""
        return f"{node}-eth0"

    @staticmethod
    def facing(router: str, side: str) -> str:
        """The interface of `router` that faces the clients ('client') or the servers."""
        return f"{router}-eth{0 if side == 'client' else 1}"

    @staticmethod
    def egress(router: str, direction: str) -> str:
        """Where traffic of `direction` ('down': server → client, 'up') leaves `router`."""
        return PathNames.facing(router, "client" if direction == "down" else "server")

    def core_intf(self, k: int, side: str) -> str:
        """Core node k's interface toward the clients ('client') or the servers."""
        return f"{self.core(k)}-eth{0 if side == 'client' else 1}"

    # Addresses -----------------------------------------------------------------------
    @staticmethod
    def client_ip(i: int) -> str:
        return f"{CLIENT_NET}.{i}"

    @staticmethod
    def server_ip(i: int) -> str:
        return f"{SERVER_NET}.{i}"

    @staticmethod
    def gateway(side: str) -> str:
        """The default gateway of the hosts on `side` ('client' or 'server')."""
        return f"{CLIENT_NET if side == 'client' else SERVER_NET}.{GATEWAY_HOST}"

    @staticmethod
    def subnet(side: str) -> str:
        return f"{CLIENT_NET if side == 'client' else SERVER_NET}.0/24"

    @staticmethod
    def segment_ip(k: int, end: int) -> str:
        """Address on the segment between router k (end=1) and router k+1 (end=2)."""
        return f"10.0.{k}.{end}"

    def side_of(self, node: str) -> str:
        """'client' or 'server' for an end host."""
        if node in self.clients():
            return "client"
        if node in self.servers():
            return "server"
        raise ValueError(f"{node} is not an end host of this path")
