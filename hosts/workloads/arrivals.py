"""Arrivals: N fixed-size flows in each direction, opened at scheduled times (open loop).

The Jump Start experiment's load (Liu, Allman, Jin, Wang, PFLDnet 2007, "A first look at
benefits and drawbacks"): 100 flows in both directions over the dumbbell, each of 200
packets, the inter-arrival time of the flows varied from heavy load (small interval) to
light load (large interval); connection duration and aggregate drop rate against it.

Downstream flows go sv1 → cl1 (lighttpd on sv1, the client on cl1); upstream flows go
cl2 → sv2 (lighttpd on cl2, the client on sv2), through the other direction's bottleneck
queue. The variant under test is on every sending host (and the routers); the requesting
hosts run it too, as their ACKs are the sender's clock. Every flow is an HTTP/1.0 fetch of
the scenario's object size (one connection per flow) by hosts/arrivals_client.py, which
opens each connection at its scheduled time whether or not earlier ones have finished.

The schedule (`schedule()`) depends on `seed`, the direction and the repetition only, so
two variants at the same repetition see exactly the same arrivals (paired). The paper does
not say whether its arrivals were periodic or Poisson; `process` offers both, periodic by
default (the slides speak of "the interval").
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from config.params import Param
from hosts.apps import HTTP_PORT, Lighttpd, make_object
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult, read_report, repetition_seed
from results.schema import UPSTREAM_CAPTURE_FILES

CLIENT = Path(__file__).resolve().parent.parent / "arrivals_client.py"
DIRECTIONS = ("down", "up")
START_DELAY_S = 1.0          # the clients read their schedule and wait for the shared start


def schedule(flows: int, interarrival_s: float, process: str, seed: int) -> list[float]:
    """Arrival offsets (s) of `flows` flows: periodic (0, ia, 2·ia, …) or Poisson
    (exponential gaps of mean ia, the first flow at 0), deterministic per seed."""
    if flows <= 0:
        return []
    if process == "periodic":
        return [round(i * interarrival_s, 9) for i in range(flows)]
    if process == "poisson":
        gaps = np.random.default_rng(seed).exponential(interarrival_s, flows - 1)
        return [0.0, *np.round(np.cumsum(gaps), 9).tolist()]
    raise ValueError(f"unknown arrival process {process!r}")


def schedules(params: dict, rep: int) -> dict[str, list[float]]:
    """Each direction's schedule for repetition `rep` (1-based). The upstream one starts half
    an interval later, so the two directions' connections do not open at the same instants
    (which periodic arrivals would make them do for the whole run)."""
    out = {}
    for k, d in enumerate(DIRECTIONS):
        if d == "up" and params["directions"] == "down":
            continue
        phase = params["interarrival_s"] / 2 if d == "up" else 0.0
        out[d] = [round(phase + t, 9) for t in schedule(params["flows"], params["interarrival_s"], params["process"],
                                                        repetition_seed(params["seed"], rep) + k)]
    return out


class Arrivals(Workload):
    name = "arrivals"
    summary = "N fixed-size flows each way opened at scheduled times (open loop): duration and drop rate vs load"
    sized = True
    params = {
        "flows": Param(100, "flows in each direction", low=1, high=100000, integer=True),
        "interarrival_s": Param(1.0, "mean time between flow arrivals in one direction (the swept load)",
                                low=0.0001, high=3600),
        "process": Param("periodic", "arrival process", choices=("periodic", "poisson")),
        "directions": Param("both", "down: servers to clients only; both: as many flows the other way",
                            choices=("both", "down")),
        "seed": Param(1, "schedule seed (with the repetition and the direction)", low=0, high=2 ** 31 - 1,
                      integer=True),
        "timeout_s": Param(300.0, "how long flows may take after the last arrival before the run fails",
                           low=1, high=86400),
    }

    def hosts(self, params: dict) -> HostNeeds:
        return HostNeeds(pairs=2)

    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        if not size_bytes:
            raise WorkloadError("the arrivals workload needs an object size (the scenario's sizes)")
        n = session.names
        sv1, cl1, sv2, cl2 = (session.host(x) for x in (n.server(1), n.client(1), n.server(2), n.client(2)))
        plan = schedules(params, session.rep)
        # (direction, sending host, its IP, requesting host, its IP)
        ends = {"down": (sv1, n.server_ip(1), cl1, n.client_ip(1)),
                "up": (cl2, n.client_ip(2), sv2, n.server_ip(2))}
        senders = [ends[d][0] for d in plan]
        requesters = [ends[d][2] for d in plan]
        session.install_under_test(server=senders, client=requesters)
        www = session.scratch / "www"
        url = make_object(www, size_bytes)
        for d in plan:
            sender, ip = ends[d][0], ends[d][1]
            (session.workdir / f"www-{d}").mkdir(parents=True, exist_ok=True)
            session.adopt(f"lighttpd {d}", Lighttpd(sender, ip, www, session.workdir / f"www-{d}", session.instance,
                                                    extra=("server.max-keep-alive-requests = 0",
                                                           "server.max-connections = 4096",
                                                           "server.max-fds = 8192"),
                                                    name=f"lighttpd-{d}"))
        session.capture_standard()
        if "up" in plan:
            points = session.net.upstream_capture_points()
            session.capture([(session.host(points[k][0]), points[k][1], session.workdir / f)
                             for k, f in UPSTREAM_CAPTURE_FILES.items()])
        for d in plan:
            session.flow(d, ends[d][0], ends[d][2], HTTP_PORT, size_bytes)
        start_at = time.time() + START_DELAY_S
        procs = {}
        for d, offsets in plan.items():
            sched = session.workdir / f"schedule-{d}.json"
            sched.write_text(json.dumps(offsets))
            procs[d] = session.spawn(ends[d][2], [sys.executable, str(CLIENT), "--server", ends[d][1],
                                                  "--port", str(HTTP_PORT), "--path", url, "--schedule", str(sched),
                                                  "--start-at", f"{start_at:.6f}",
                                                  "--timeout-s", f"{params['timeout_s']:g}",
                                                  "--out", str(session.workdir / f"arrivals-{d}.json")],
                                     f"arrivals client {d}", f"arrivals-{d}.log")
        session.ready()
        t0 = time.monotonic()
        longest = max(max(o) for o in plan.values())
        for d, proc in procs.items():
            rc = proc.wait(timeout=START_DELAY_S + longest + params["timeout_s"] + 30)
            if rc is None or rc != 0:
                raise WorkloadError(f"the {d} arrivals client failed (exit {rc}): {proc.output()[-400:]}")
        session.timings["traffic_arrivals_s"] = time.monotonic() - t0
        reports = {d: read_report(session.workdir / f"arrivals-{d}.json", "arrivals client") for d in plan}
        for d, rep in reports.items():
            bad = [f for f in rep["fetches"] if f["error"] or f["status"] != 200 or f["bytes"] != size_bytes]
            if bad:
                raise WorkloadError(f"{len(bad)} {d} fetches failed, e.g. {bad[0]}")
        return WorkloadResult(
            spec={"server_port": HTTP_PORT, "size_bytes": size_bytes, "start_at": start_at,
                  "rtt_s": session.profile.rtt_s,
                  "rate_bps": {d: session.profile.rate_bps(d) for d in plan},
                  "directions": {d: {"sender_ip": ends[d][1], "requester_ip": ends[d][3],
                                     "fetches": [{k: f[k] for k in ("index", "scheduled", "started", "local_port",
                                                                    "done", "bytes", "head_bytes")}
                                                 for f in reports[d]["fetches"]]}
                                 for d in plan}},
            app={d: {"peak_open": r["peak_open"], "fd_limit": r["fd_limit"]} for d, r in reports.items()})


WORKLOAD = Arrivals()
