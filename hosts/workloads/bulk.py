"""Bulk: N parallel bulk TCP flows from the servers to the clients for a fixed duration.

Flow i runs from server ((i − 1) mod pairs) + 1 to the client of the same pair, each with
its own iperf3 (port 5201 + i − 1), all started together; the variant under test is on every
end host and router. Its analysis gives each flow's goodput and Jain's fairness index.
"""
from __future__ import annotations

import time
from typing import Optional

from config.params import Param
from hosts.apps import IPERF_PORT, Iperf3Server, iperf3_reverse_client
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult


class Bulk(Workload):
    name = "bulk"
    summary = "N parallel bulk TCP flows, servers to clients, for a duration: goodput per flow, Jain's index"
    sized = False
    params = {
        "flows": Param(4, "parallel bulk flows", low=1, high=64, integer=True),
        "pairs": Param(2, "client/server pairs the flows are spread over", low=1, high=16, integer=True),
        "duration_s": Param(10.0, "how long every flow sends", low=1, high=3600),
        "omit_s": Param(2.0, "leading seconds left out of the goodput (slow start)", low=0, high=600),
    }

    def hosts(self, params: dict) -> HostNeeds:
        return HostNeeds(pairs=params["pairs"])

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        if params["omit_s"] >= params["duration_s"]:
            return "omit_s", f"{params['omit_s']:g} s leaves nothing of duration_s ({params['duration_s']:g} s)"
        return None

    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        n, prof = session.names, session.profile
        session.install_under_test(server=[session.host(s) for s in n.servers()],
                                   client=[session.host(c) for c in n.clients()])
        flows = []
        for i in range(params["flows"]):
            pair = i % params["pairs"] + 1
            server, client, port = session.host(n.server(pair)), session.host(n.client(pair)), IPERF_PORT + i
            session.adopt(f"iperf3 server {port}", Iperf3Server(server, session.workdir, session.instance, port=port,
                                                                 log_name=f"iperf3-server-{port}.log"))
            flows.append((f"flow{i + 1}", server, client, pair, port))
        session.capture_standard()
        for name, server, client, _, port in flows:
            session.flow(name, server, client, port)
        session.ready()
        t0 = time.monotonic()
        procs = [session.adopt(name, iperf3_reverse_client(client, n.server_ip(pair), params["duration_s"],
                                                           session.workdir, session.instance, port=port,
                                                           log_name=f"iperf3-{name}.json"))
                 for name, _, client, pair, port in flows]
        for (name, *_), proc in zip(flows, procs):
            rc = proc.wait(timeout=params["duration_s"] + 30)
            if rc != 0:
                raise WorkloadError(f"{name}: iperf3 exited with {rc}: {proc.output()[-300:]}")
        session.timings["traffic_bulk_s"] = time.monotonic() - t0
        return WorkloadResult(spec={"flows": [{"name": name, "server_port": port, "client_ip": n.client_ip(pair),
                                               "server_ip": n.server_ip(pair)} for name, _, _, pair, port in flows],
                                    "duration_s": params["duration_s"], "omit_s": params["omit_s"],
                                    "rtt_s": prof.rtt_s, "rate_bps": prof.rate_bps("down")})


WORKLOAD = Bulk()
