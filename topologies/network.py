"""Builds a declared path topology into a running Mininet network and takes it down again.

Everything created is named with the instance prefix and recorded in the registry as it
is made, so an exception, Ctrl-C or SIGTERM at any point leaves nothing behind once the
`with` block exits, and `run.py clean` can remove what a killed process left.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host
from mininet.nodelib import LinuxBridge

from machine import registry
from machine.capabilities import require_root, switch_kind
from machine.errors import UserError
from topologies import bottleneck, delay
from topologies.path import PathNames, PathTopo, TOPOLOGIES, CLIENT_NET, SERVER_NET, GATEWAY_HOST
from topologies.profiles import LinkProfile
from topologies.shell import check_cmd

log = logging.getLogger("startlab.network")


class Network:
    """One emulated path for one link profile.

    with Network(profile, workdir=...) as net:
        net.host(net.names.client(1)).cmd("ping ...")
    """

    def __init__(self, profile: LinkProfile, workdir: Path, *, pairs: int = 2,
                 delay_backend: str = "auto", offload: bool | None = None):
        self.profile = profile
        self.workdir = Path(workdir)
        self.pairs = pairs
        self.delay_preference = delay_backend
        # Packet-exact captures need one MTU per packet on the wire; profiles made for
        # rate ceilings turn segmentation offloads on.
        self.offload = profile.offload if offload is None else offload
        self.instance: registry.Instance | None = None
        self.names: PathNames | None = None
        self.net: Mininet | None = None
        self.delays: list[tuple[str, delay.DelayBackend]] = []
        self.tbfs: list[bottleneck.TbfSettings] = []
        self.delay_stats: list[dict] = []
        self.timings: dict[str, float] = {}

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "Network":
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def build(self) -> None:
        require_root()
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Fail before building anything if no delay element can be had.
        backends = [delay.choose_backend(self.delay_preference)
                    for _ in range(TOPOLOGIES[self.profile.topology] - 1)]
        self.instance = registry.new_instance()
        self.names = PathNames(self.instance.prefix, TOPOLOGIES[self.profile.topology], self.pairs)
        for side in ("client", "server"):             # root-namespace objects, by name
            self.instance.add_bridge(self.names.switch(side))
        setLogLevel("error")
        switch_cls = switch_kind()[1] or LinuxBridge
        self.net = Mininet(topo=PathTopo(names=self.names), switch=switch_cls, host=Host,
                           link=Link, controller=None, build=False, autoSetMacs=False,
                           waitConnected=False)
        self.net.build()
        for node in self.net.hosts:
            self.instance.add_process(node.pid, f"shell {node.name}")
        for sw in self.net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    self.instance.add_link(intf.name)
        self.net.start()
        self._configure_hosts()
        self._configure_routes()
        self._configure_neighbours()
        self._configure_bottlenecks()
        self._configure_delays(backends)
        self.timings["setup_s"] = time.monotonic() - t0

    def teardown(self) -> None:
        t0 = time.monotonic()
        for name, element in self.delays:
            try:
                lifetime = time.monotonic() - self.timings.get("delay_started", time.monotonic())
                self.delay_stats.append({"core": name, "lifetime_s": round(lifetime, 3), **element.stop()})
            except Exception as exc:  # keep tearing down; report what failed
                log.warning("stopping the delay element on %s failed: %s", name, exc)
        self.delays = []
        if self.net is not None:
            try:
                self.net.stop()
            except Exception as exc:
                log.warning("Mininet stop failed: %s", exc)
            self.net = None
        if self.instance is not None:
            self.instance.remove_all()
            self.instance = None
        self.timings["teardown_s"] = time.monotonic() - t0

    # -- access ------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return self.net.get(name)

    @property
    def bottleneck_router(self) -> str:
        """Router whose eth0 queue is the downstream bottleneck next to the servers."""
        return self.names.router(self.names.routers)

    def applied(self) -> dict:
        """The link parameters actually applied, for meta.json."""
        return {
            "profile": self.profile.as_dict(),
            "topology": self.profile.topology,
            "prefix": self.names.prefix if self.names else None,
            "tbf": [t.as_dict() for t in self.tbfs],
            "delay_backend": self.delay_backend_name,
            "one_way_delay_s_per_core": self.profile.one_way_delay_s(self.names.routers - 1),
            "offload": self.offload,
        }

    @property
    def delay_backend_name(self) -> str | None:
        return self.delays[0][1].name if self.delays else None

    # -- configuration steps ----------------------------------------------------------
    def _configure_hosts(self) -> None:
        off = "on" if self.offload else "off"
        for node in self.net.hosts:
            check_cmd(node, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in node.intfList():
                if intf.name == "lo":
                    continue
                check_cmd(node, f"ip addr flush dev {intf.name}")
                check_cmd(node, f"ethtool -K {intf.name} tso {off} gso {off} gro {off} >/dev/null")
                check_cmd(node, f"ip link set {intf.name} up mtu {self.profile.mtu}")
                delay.set_single_cpu_rps(node, intf.name, self._rps_cpu(intf.name))
        n = self.names
        for name in n.clients() + n.servers():
            # Socket buffers that never cap a window on the profiles' BDPs plus buffers
            # (lab-1g: 2.5 MB BDP + 2.5 MB queue); tcp_rmem/wmem are per namespace.
            check_cmd(self.host(name), "sysctl -qw net.ipv4.tcp_rmem='4096 131072 67108864' "
                                      "net.ipv4.tcp_wmem='4096 16384 67108864' "
                                      "net.ipv4.tcp_no_metrics_save=1")
        for i in range(1, n.pairs + 1):
            check_cmd(self.host(n.client(i)), f"ip addr add {n.client_ip(i)}/24 dev {n.client(i)}-eth0")
            check_cmd(self.host(n.server(i)), f"ip addr add {n.server_ip(i)}/24 dev {n.server(i)}-eth0")
        for k in range(1, n.routers + 1):
            r = self.host(n.router(k))
            check_cmd(r, "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0")
            west = f"{CLIENT_NET}.{GATEWAY_HOST}/24" if k == 1 else f"{n.segment_ip(k - 1, 2)}/24"
            east = f"{SERVER_NET}.{GATEWAY_HOST}/24" if k == n.routers else f"{n.segment_ip(k, 1)}/24"
            check_cmd(r, f"ip addr add {west} dev {n.router(k)}-eth0")
            check_cmd(r, f"ip addr add {east} dev {n.router(k)}-eth1")
        for sw in self.net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    check_cmd(sw, f"ethtool -K {intf.name} tso {off} gso {off} gro {off} >/dev/null")
                    delay.set_single_cpu_rps(sw, intf.name, self._rps_cpu(intf.name))

    def _rps_cpu(self, intf: str) -> int:
        """The one CPU that handles frames arriving on `intf`.

        veth delivers a frame to the backlog of the sending CPU unless RPS steers it, so
        frames of one flow sent from different CPUs can overtake each other. One fixed CPU
        per interface keeps order; putting the client half of the path (clients, their
        switch, r1, the core's client-side port) on CPU 0 and the server half on CPU 1
        shares the per-packet work of high rates between two cores.
        """
        if (os.cpu_count() or 1) < 2:
            return 0
        n = self.names
        client_side = (f"{n.prefix}cl", n.switch("client") + "-", n.router(1) + "-", n.core(1) + "-eth0")
        return 0 if intf.startswith(client_side) else 1

    def _configure_routes(self) -> None:
        n = self.names
        for i in range(1, n.pairs + 1):
            check_cmd(self.host(n.client(i)), f"ip route add default via {CLIENT_NET}.{GATEWAY_HOST}")
            check_cmd(self.host(n.server(i)), f"ip route add default via {SERVER_NET}.{GATEWAY_HOST}")
        for k in range(1, n.routers + 1):
            r = self.host(n.router(k))
            if k > 1:
                check_cmd(r, f"ip route add {CLIENT_NET}.0/24 via {n.segment_ip(k - 1, 1)}")
            if k < n.routers:
                check_cmd(r, f"ip route add {SERVER_NET}.0/24 via {n.segment_ip(k, 2)}")

    def _configure_neighbours(self) -> None:
        """Static ARP entries: no ARP exchange delays the first packet of a run."""
        addresses = []                                # (node, intf, ip, mac), read once
        for node in self.net.hosts:
            for intf in node.intfList():
                if intf.name == "lo":
                    continue
                words = check_cmd(node, f"ip -4 -o addr show dev {intf.name}").split()
                if "inet" in words:
                    addresses.append((node, intf.name, words[words.index("inet") + 1].split("/")[0], intf.MAC()))
        for node, intf, ip, _ in addresses:
            subnet = ip.rsplit(".", 1)[0]
            for peer, _, peer_ip, peer_mac in addresses:
                if peer is not node and peer_ip.rsplit(".", 1)[0] == subnet:
                    check_cmd(node, f"ip neigh replace {peer_ip} lladdr {peer_mac} dev {intf} nud permanent")

    def _configure_bottlenecks(self) -> None:
        n = self.names
        for k in range(1, n.routers):
            # Each router-core-router hop: 'up' queue on the west router's eth1,
            # 'down' queue on the east router's eth0.
            for router, intf, direction in ((n.router(k), f"{n.router(k)}-eth1", "up"),
                                            (n.router(k + 1), f"{n.router(k + 1)}-eth0", "down")):
                settings = bottleneck.tbf_for(self.profile, router, intf, direction)
                check_cmd(self.host(router), " ".join(settings.command()))
                self.tbfs.append(settings)

    def _configure_delays(self, backends: list[delay.DelayBackend]) -> None:
        n = self.names
        one_way = self.profile.one_way_delay_s(n.routers - 1)
        for k, element in zip(range(1, n.routers), backends):
            core = self.host(n.core(k))
            element.start(core, f"{n.core(k)}-eth0", f"{n.core(k)}-eth1",
                          one_way, one_way, self.profile.rate_bps("up"), self.profile.rate_bps("down"),
                          self.workdir / f"delay-{n.core(k)}", self.instance)
            self.delays.append((n.core(k), element))
        self.timings["delay_started"] = time.monotonic()

    def queue_counters(self, direction: str) -> dict[str, dict[str, int]]:
        """Sent bytes/packets and drops of each tbf of `direction` ('down' or 'up') so far."""
        return {t.intf: bottleneck.tbf_counters(self.host(t.node).cmd(f"tc -s qdisc show dev {t.intf}"))
                for t in self.tbfs if t.direction == direction}

    def queue_drops(self) -> dict[str, int]:
        """Drops counted by each tbf so far (interface → packets)."""
        out = {}
        for t in self.tbfs:
            out[t.intf] = bottleneck.tbf_drops(self.host(t.node).cmd(f"tc -s qdisc show dev {t.intf}"))
        return out
