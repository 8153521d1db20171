"""Web sessions: the Quick-Start simulations' web traffic (Allman, Floyd, Sarolahti §4),
replayed open loop with real HTTP/1.0 over many hosts with varied RTTs.

`sessions` sessions arrive over the run (Poisson, so the load is about stationary) and fetch pages of objects from servers behind the
server-side router, one object per TCP connection (lighttpd on the servers, the open-loop
client hosts/arrivals_client.py on the clients); `reverse_fraction` × as many sessions run
the other way (servers behind the client-side router) as return traffic, as the paper's
N/2 clients and servers. The model and its parameters are hosts/workloads/ns2web.py's.

Hosts: `hosts` client/server pairs carry the forward sessions (session i on pair
i mod hosts), `reverse_hosts` further pairs the reverse ones, their roles swapped (the
server on the client side). Every host has an access delay drawn once per `rtt_seed`, and
each pair's base RTT (core RTT + both hosts' access delays, twice) is applied in the core's
delay element per address pair — the same for every sweep point, as the network is built
once. Fetches are scheduled within `duration_s`; the run then waits up to `drain_s` for
the connections still open, and records those it had to cut (ns-2 simply stopped).

A variant with a `mix` (hosts/variants.py) runs on that fraction of the forward pairs (the
first ones) and its `mix.other` on the rest (Fig. 5's half-Quick-Start runs); the reverse
pairs run the variant. The analysis keeps the two kinds apart by server address.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Optional

from config.params import Param
from hosts.apps import FTP_DATA_PORTS, HTTP_PORT, Lighttpd, Vsftpd, make_object
from hosts.workloads import ns2web
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult, read_report, repetition_seed
from hosts.workloads.web import HANDSHAKE_FILES, handshake_captures
from results.schema import UPSTREAM_CAPTURE_FILES

CLIENT = Path(__file__).resolve().parent.parent / "arrivals_client.py"
FTP_CLIENT = Path(__file__).resolve().parent.parent / "ftp_client.py"
FTP_LOCAL_PORTS = (20000, 32767)     # below the kernel's ephemeral range: two per transfer (control, data)
START_DELAY_S = 2.0
# A network serves runs in turn: a transfer the previous run ended late (or cut) leaves its
# pinned ports in TIME_WAIT (60 s) or a lingering FIN_WAIT, and curl cannot bind them again.
PORTS_FREE_TIMEOUT_S = 180.0
UNFINISHED = "not finished within the timeout"
CURL_TIMEOUT = 28                    # curl's exit code when --max-time ran out


def model_of(p: dict) -> ns2web.WebModel:
    return ns2web.WebModel(pages=p["pages"], interpage_s=p["interpage_s"], objects=p["objects"],
                           interobject_s=p["interobject_s"], object_mean_pkts=p["object_mean_pkts"],
                           object_shape=p["object_shape"], max_object_pkts=p["max_object_pkts"])


def reverse_sessions(p: dict) -> int:
    return int(round(p["sessions"] * p["reverse_fraction"]))


def pair_rtts(p: dict) -> dict[tuple[int, int], float]:
    """Base RTT of every pair that talks, (client i, server i) → ms, from the hosts' access
    delays: clients first, then servers, drawn in one seeded sequence."""
    pairs = p["hosts"] + (p["reverse_hosts"] if p["reverse_fraction"] > 0 else 0)
    d = ns2web.access_delays_ms(2 * pairs, p["access_mean_ms"], p["access_max_ms"], p["rtt_seed"],
                                p["access_dist"])
    return {(i, i): ns2web.pair_rtt_ms(p["core_rtt_ms"], d[i - 1], d[pairs + i - 1]) for i in range(1, pairs + 1)}


def plan(p: dict, rep: int) -> dict[str, list[ns2web.Fetch]]:
    """Each direction's fetches for repetition `rep` (the same for every variant)."""
    model = model_of(p)
    seed = repetition_seed(p["seed"], rep)
    span = ns2web.arrival_span_s(model, p["duration_s"])
    out = {"down": [f for f in ns2web.sessions(model, p["sessions"], span, seed) if f.t < p["duration_s"]]}
    if reverse_sessions(p):
        out["up"] = [f for f in ns2web.sessions(model, reverse_sessions(p), span, seed + 1) if f.t < p["duration_s"]]
    return out


def plan_ftp(p: dict, rep: int) -> dict[str, list[ns2web.Transfer]]:
    """Each direction's FTP transfers for repetition `rep` (none without ftp_per_session)."""
    if not p["ftp_per_session"]:
        return {}
    model = model_of(p)
    seed = repetition_seed(p["seed"], rep)
    span = ns2web.arrival_span_s(model, p["duration_s"])
    out = {"down": [t for t in ns2web.ftp_transfers(model, p["sessions"], span, p["ftp_per_session"], seed)
                    if t.t < p["duration_s"]]}
    if reverse_sessions(p):
        out["up"] = [t for t in ns2web.ftp_transfers(model, reverse_sessions(p), span, p["ftp_per_session"], seed + 1)
                     if t.t < p["duration_s"]]
    return out


class WebSessions(Workload):
    name = "websessions"
    summary = "ns-2 web sessions (Quick-Start §4) over many hosts with varied RTTs, open loop, HTTP/1.0"
    sized = False
    mixes = True
    params = {
        "sessions": Param(50, "web sessions arriving over a run from the servers behind the server-side router "
                              "(the load)", low=1, high=100000, integer=True),
        "reverse_fraction": Param(0.5, "as many sessions × this the other way (return traffic)", low=0, high=1),
        "pages": Param(30, "pages per session", low=1, high=100000, integer=True),
        "interpage_s": Param(0.8, "mean time between page starts in a session (exponential)", low=0.001, high=3600),
        "objects": Param(10.0, "mean objects per page (1 + Poisson(objects - 1))", low=1, high=1000),
        "interobject_s": Param(0.05, "mean time between object starts in a page (exponential)", low=0, high=60),
        "object_mean_pkts": Param(400.0, "ParetoII mean object size, packets", low=1, high=1e6),
        "object_shape": Param(1.002, "ParetoII shape of the object size", low=1.0001, high=10),
        "max_object_pkts": Param(20000, "objects are capped at this many packets (see ns2web.py)",
                                 low=1, high=10 ** 6, integer=True),
        "ftp_per_session": Param(0, "FTP transfers per session at random times in it (Fig. 4: 10)",
                                 low=0, high=1000, integer=True),
        "ftp_pkts": Param(100, "packets of an FTP transfer (Fig. 4: 100)", low=1, high=10 ** 6, integer=True),
        "duration_s": Param(150.0, "fetches start within this time (the paper's 150 s runs)", low=1, high=86400),
        "drain_s": Param(60.0, "then connections still open get this long before they are cut",
                         low=0, high=86400),
        "hosts": Param(6, "client/server pairs of the forward sessions", low=1, high=64, integer=True),
        "reverse_hosts": Param(3, "pairs of the reverse sessions (servers on the client side)",
                               low=1, high=64, integer=True),
        "core_rtt_ms": Param(80.0, "RTT of the core between the routers (the paper: 2 links of 20 ms)",
                             low=0, high=10000),
        "access_mean_ms": Param(12.0, "mean one-way access delay of a host", low=0, high=1000),
        "access_max_ms": Param(110.0, "largest one-way access delay of a host", low=0, high=10000),
        "access_dist": Param("exponential", "access delays: exponential (mean access_mean_ms) or uniform "
                                            "(0 to access_max_ms)", choices=ns2web.ACCESS_DISTRIBUTIONS),
        "rtt_seed": Param(1, "the hosts' access delays", low=0, high=2 ** 31 - 1, integer=True),
        "seed": Param(1, "the sessions (with the repetition)", low=0, high=2 ** 31 - 1, integer=True),
    }

    def hosts(self, params: dict) -> HostNeeds:
        rev = params["reverse_hosts"] if params["reverse_fraction"] > 0 else 0
        return HostNeeds(pairs=params["hosts"] + rev, rtts_ms=pair_rtts(params))

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        if params["access_dist"] == "uniform":
            return None
        if params["access_mean_ms"] > params["access_max_ms"]:
            return "access_mean_ms", f"{params['access_mean_ms']:g} ms is above access_max_ms"
        if params["access_max_ms"] > 0 and params["access_mean_ms"] > 0 and \
                math.exp(-params["access_max_ms"] / params["access_mean_ms"]) > 0.5:
            return "access_max_ms", "cuts off most of the access-delay distribution; raise it or lower the mean"
        return None

    def run(self, session, p: dict, size_bytes: Optional[int]) -> WorkloadResult:
        n, prof = session.names, session.profile
        mss = prof.mss          # full segments with timestamps: an object of k packets
        rep = session.rep
        fetches, ftp = plan(p, rep), plan_ftp(p, rep)
        fwd = list(range(1, p["hosts"] + 1))
        rev = list(range(p["hosts"] + 1, p["hosts"] + p["reverse_hosts"] + 1)) if "up" in fetches else []
        mix = session.variant.mix
        under = fwd[:int(round(mix.fraction * len(fwd)))] if mix else fwd
        others = [i for i in fwd if i not in under]
        group = {i: "reverse" if i in rev else "under" if i in under else "other" for i in fwd + rev}
        # Pair i: (sending host, its IP, requesting host, its IP).
        ends = {i: (session.host(n.server(i)), n.server_ip(i), session.host(n.client(i)), n.client_ip(i))
                for i in fwd}
        ends.update({i: (session.host(n.client(i)), n.client_ip(i), session.host(n.server(i)), n.server_ip(i))
                     for i in rev})
        session.install_under_test(server=[ends[i][0] for i in under + rev], client=[ends[i][2] for i in under + rev])
        if others:
            session.install(mix.other, server=[ends[i][0] for i in others], client=[ends[i][2] for i in others])
        www = session.scratch / "www"
        paths = {s: make_object(www, s * mss) for s in sorted({f.pkts for fs in fetches.values() for f in fs})}
        ftp_path = make_object(www, p["ftp_pkts"] * mss) if ftp else ""
        _start_servers(session, ends, www, bool(ftp))
        session.capture_standard()
        handshake_captures(session)
        if rev:
            points = session.net.upstream_capture_points()
            session.capture([(session.host(points[k][0]), points[k][1], session.workdir / f)
                             for k, f in UPSTREAM_CAPTURE_FILES.items()])
        for name, pairs in (("under", under), ("other", others), ("reverse", rev)):
            if pairs:
                session.flow(name, ends[pairs[0]][0], ends[pairs[0]][2], HTTP_PORT)
        # Sessions to pairs: forward session s on fwd[s mod len], reverse on rev[s mod len].
        web_of, ftp_of = _by_pair(fetches, fwd, rev), _by_pair(ftp, fwd, rev)
        most = (FTP_LOCAL_PORTS[1] - FTP_LOCAL_PORTS[0]) // 2
        if any(len(ts) > most for ts in ftp_of.values()):
            raise WorkloadError(f"more than {most} FTP transfers from one host: add hosts")
        t_wait = time.monotonic()
        wait_ports_free([ends[i][2] for i, ts in ftp_of.items() if ts], PORTS_FREE_TIMEOUT_S)
        session.timings["ftp_ports_wait_s"] = time.monotonic() - t_wait
        start_at = time.time() + START_DELAY_S
        procs = _start_clients(session, p, ends, web_of, ftp_of, paths, ftp_path, start_at)
        session.ready()
        t0 = time.monotonic()
        for (what, i), proc in procs.items():
            if proc.wait(timeout=START_DELAY_S + p["duration_s"] + p["drain_s"] + 60) is None:
                raise WorkloadError(f"the {what} client of pair {i} did not end: {proc.output()[-300:]}")
        session.timings["traffic_websessions_s"] = time.monotonic() - t0
        logged = _web_log(session.workdir, web_of, group, mss) + _ftp_log(session.workdir, ftp_of, group,
                                                                           p["ftp_pkts"] * mss)
        model = model_of(p)
        return WorkloadResult(
            spec={"server_port": HTTP_PORT, "start_at": start_at, "duration_s": p["duration_s"], "mss": mss,
                  "rate_bps": {d: prof.rate_bps(d) for d in ("down", "up")},
                  "pairs": {str(i): {"sender_ip": ends[i][1], "requester_ip": ends[i][3], "group": group[i],
                                     "rtt_ms": session.net.pair_rtts_ms.get((i, i))} for i in fwd + rev},
                  "model": {**model.__dict__, "capped_mean_pkts": model.capped_mean_pkts()},
                  "handshake_captures": HANDSHAKE_FILES, "fetches": logged, "cut": sum(f["cut"] for f in logged),
                  "ftp_data_ports": list(FTP_DATA_PORTS)},
            app={"peak_open": {i: read_report(session.workdir / f"fetches-{i}.json", "web sessions client")["peak_open"]
                               for (what, i) in procs if what == "web"}})


def ports_in_use(ss_lines: str) -> list[str]:
    """The sockets `ss -Htan` listed (one per non-empty line)."""
    return [line.strip() for line in ss_lines.splitlines() if line.strip()]


def wait_ports_free(hosts: list, timeout_s: float) -> None:
    """Wait until no socket on `hosts` holds a port of FTP_LOCAL_PORTS, which every run's
    transfers pin; fail the run, naming the sockets, if they outlive `timeout_s`."""
    lo, hi = FTP_LOCAL_PORTS
    deadline = time.monotonic() + timeout_s
    while True:
        busy = {h.name: ports_in_use(h.cmd(f"ss -Htan '( sport >= :{lo} and sport <= :{hi} )'")) for h in hosts}
        busy = {k: v for k, v in busy.items() if v}
        if not busy:
            return
        if time.monotonic() > deadline:
            raise WorkloadError(f"FTP ports still in use after {timeout_s:g} s: "
                                + "; ".join(f"{k}: {v[0]} (+{len(v) - 1})" for k, v in busy.items()))
        time.sleep(1.0)


def _by_pair(plan_: dict[str, list], fwd: list[int], rev: list[int]) -> dict[int, list]:
    """Each pair's share of a plan: session s of a direction on that direction's pair s mod count."""
    out: dict[int, list] = {i: [] for i in fwd + rev}
    for d, pairs in (("down", fwd), ("up", rev)):
        for x in plan_.get(d, []):
            out[pairs[x.session % len(pairs)]].append(x)
    return out


def _start_servers(session, ends: dict, www: Path, ftp: bool) -> None:
    """lighttpd (and vsftpd with FTP transfers) on every sending host, logs per pair."""
    for i, (sender, ip, _, _) in ends.items():
        logs = session.workdir / f"www-{i}"
        logs.mkdir(parents=True, exist_ok=True)
        session.adopt(f"lighttpd pair {i}", Lighttpd(sender, ip, www, logs, session.instance, name=f"lighttpd-{i}",
                                                     extra=("server.max-keep-alive-requests = 0",
                                                            "server.max-connections = 4096",
                                                            "server.max-fds = 8192")))
        if ftp:
            session.adopt(f"vsftpd pair {i}", Vsftpd(sender, ip, www, logs, session.instance, name=f"vsftpd-{i}"))


def _start_clients(session, p: dict, ends: dict, web_of: dict, ftp_of: dict, paths: dict, ftp_path: str,
                   start_at: float) -> dict:
    """The open-loop clients of every requesting host, all on one time line from start_at."""
    procs = {}
    for i, fs in web_of.items():
        if fs:
            sched = session.workdir / f"schedule-{i}.json"
            sched.write_text(json.dumps([[f.t, paths[f.pkts]] for f in fs]))
            procs[("web", i)] = session.spawn(
                ends[i][2], [sys.executable, str(CLIENT), "--server", ends[i][1], "--port", str(HTTP_PORT),
                             "--schedule", str(sched), "--start-at", f"{start_at:.6f}",
                             "--timeout-s", f"{p['drain_s']:g}", "--out", str(session.workdir / f"fetches-{i}.json")],
                f"web sessions client {i}", f"fetches-{i}.log")
    for i, ts in ftp_of.items():
        if ts:
            sched = session.workdir / f"ftp-schedule-{i}.json"
            sched.write_text(json.dumps([[t.t, f"ftp://{ends[i][1]}{ftp_path}", FTP_LOCAL_PORTS[0] + 2 * k]
                                         for k, t in enumerate(ts)]))
            procs[("FTP", i)] = session.spawn(
                ends[i][2], [sys.executable, str(FTP_CLIENT), "--schedule", str(sched), "--start-at", f"{start_at:.6f}",
                             "--max-time", f"{p['duration_s'] + p['drain_s']:g}",
                             "--out", str(session.workdir / f"ftp-{i}.json")],
                f"FTP client {i}", f"ftp-{i}.log")
    return procs


def _web_log(workdir: Path, web_of: dict, group: dict, mss: int) -> list[dict]:
    """Every HTTP fetch as the clients logged it; a failed one fails the run, one still open
    when the drain time ran out is kept as cut."""
    out = []
    for i, fs in web_of.items():
        if not fs:
            continue
        for f, r in zip(fs, read_report(workdir / f"fetches-{i}.json", "web sessions client")["fetches"]):
            cut = r["error"] == UNFINISHED
            if not cut and (r["error"] or r["status"] != 200 or r["bytes"] != f.pkts * mss):
                raise WorkloadError(f"pair {i}: fetch {r['index']} of {f.pkts * mss} bytes failed: {r}")
            out.append({"pair": i, "direction": "up" if group[i] == "reverse" else "down", "kind": "http",
                        "group": group[i], "session": f.session, "page": f.page, "object": f.obj,
                        "size_bytes": f.pkts * mss, "scheduled": r["scheduled"], "started": r["started"],
                        "local_port": r["local_port"], "done": r["done"], "bytes": r["bytes"],
                        "head_bytes": r["head_bytes"], "cut": cut})
    return out


def _ftp_log(workdir: Path, ftp_of: dict, group: dict, size: int) -> list[dict]:
    """Every FTP transfer as curl reported it, with its data connection's local port."""
    out = []
    for i, ts in ftp_of.items():
        if not ts:
            continue
        for t, r in zip(ts, read_report(workdir / f"ftp-{i}.json", "FTP client")["transfers"]):
            cut = r["exit"] == CURL_TIMEOUT
            if not cut and (r["exit"] != 0 or r["code"] != 226 or r["bytes"] != size
                            or r["local_port"] != r["data_port"] - 1):
                raise WorkloadError(f"pair {i}: FTP transfer {r['index']} failed: {r}")
            out.append({"pair": i, "direction": "up" if group[i] == "reverse" else "down", "kind": "ftp",
                        "group": group[i], "session": t.session, "size_bytes": size, "scheduled": r["scheduled"],
                        "started": r["started"], "spawned": r.get("spawned"), "local_port": r["data_port"],
                        "bytes": r["bytes"], "cut": cut})
    return out


WORKLOAD = WebSessions()
