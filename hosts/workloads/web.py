"""Web: SURGE-model users load pages from lighttpd over HTTP/1.0, HTTP/1.1 and HTTP/1.1 with
pipelining (Scharf & Strotbek, "Quick-Start TCP for Linux", §4.2, Table 1, Figs. 8, 12-14).

A run replays, for each model and HTTP mode it is given (a name or a list of each, in
turn, on the same network and variant), `users` users for `duration_s` seconds of their
think-time clock: each user's session (hosts/workloads/surge.py: pages of a base document
and its embedded files, a Pareto think time after each) goes into an httperf
`--wsesslog` file, and one httperf per client host replays the users placed on it (user
u on client host u mod hosts + 1) against lighttpd on sv1, configured for the mode
(hosts/workloads/httperf.py). httperf runs under the stamper, so its per-call log gives
each call's send and completion time. The variant under test is on the server, every
client host used and every router (Quick-Start needs the routers' parts).

The sessions end on their own: a replay lasts duration_s plus the users' download times.
If it is still running after `overrun` × duration_s the replay is stopped (httperf still
prints its statistics) and the pages under way are recorded as unfinished, never counted
as loaded. Anything else that goes wrong with a user — a failed session, an error of any
kind, a reply that is not 200, httperf exiting on its own before its users are done —
fails the run with the tail of that httperf's log: a run is never silently short.

The file set depends only on `seed` (the site stays the same); the users' sessions on
`seed` and the so every repetition replays other users while two variants at
the same repetition replay exactly the same pages (their difference is paired).

Besides the standard captures, two small filtered ones keep what the per-connection
analysis needs and the columnar extractor does not keep (payload and options): at the
clients' uplink the SYN-ACKs and the clients' packets that carry data or options (HTTP
request lines, Quick-Start echoes), before the bottleneck queue the SYN-ACKs as the
server sent them (Quick-Start requests). The bottleneck queue's counters over each
model and mode give its utilisation and drop rate.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from config.params import Param
from hosts.apps import HTTP_PORT, Lighttpd
from hosts.capture import Capture, drain, not_exact
from hosts.workloads import httperf as hp
from hosts.workloads import surge
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult, repetition_seed
from hosts.workloads.competing import link_use, offered_rate
from wire.httperf_log import parse_files

REPO = Path(__file__).resolve().parent.parent.parent
SHIM_DIR = REPO / "target"                 # provisioning builds the poll shim here
MIN_DURATION_S = 10.0                      # below a couple of think times a run has no pages to speak of
MIN_DURATION_RTTS = 10                     # … and no run is shorter than this many RTTs of its path
LIGHTTPD_MAX_FDS = 4096
HANDSHAKE_FILES = {"client": "web-hs-client.pcap", "bneck-in": "web-hs-bneck-in.pcap"}
# What the filtered captures keep (libpcap filters; tcp[12] is the data offset byte, so
# ≥ 0x90 is a header longer than the 32 bytes of timestamps alone).
_PAYLOAD = "ip[2:2] - ((ip[0] & 0x0f) << 2) - ((tcp[12] & 0xf0) >> 2) > 0"
HANDSHAKE_FILTERS = {
    "client": (f"tcp and ((src port {HTTP_PORT} and tcp[tcpflags] & tcp-syn != 0) or "
               f"(dst port {HTTP_PORT} and (tcp[12] >= 0x90 or {_PAYLOAD})))"),
    "bneck-in": f"tcp and src port {HTTP_PORT} and tcp[tcpflags] & tcp-syn != 0",
}


def handshake_captures(session) -> list[Capture]:
    """The small filtered captures of every connection's handshake and requests
    (HANDSHAKE_FILTERS), started and listening; stopped with the session."""
    points = session.net.capture_points()
    caps = []
    for key, filename in HANDSHAKE_FILES.items():
        node, intf = points[key]
        caps.append(session.adopt(f"handshake capture {key}", Capture(session.host(node), intf,
                                                                      session.workdir / filename, session.instance,
                                                                      bpf_filter=HANDSHAKE_FILTERS[key])))
    for cap in caps:
        try:
            cap.wait_ready()
        except RuntimeError as exc:
            raise WorkloadError(str(exc)) from exc
    return caps


def names(value) -> list[str]:
    """A parameter that is one name or a list of names, as a list (unknown names stay, for check)."""
    return [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []


def combo_key(model: str, mode: str) -> str:
    return f"{model}.{mode}"


def users_of_host(users: int, hosts: int, k: int) -> list[int]:
    """The users host k (0-based) replays: every hosts-th user from k."""
    return list(range(k, users, hosts))


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU a live process has used (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Replay:
    """One httperf under its stamper on one client host."""
    host: str
    ip: str
    users: list[int]
    sessions: list
    out: Path
    proc: object = None

    @property
    def err(self) -> Path:
        return self.out.with_suffix(".err")

    def log_tail(self, session_log: Path, chars: int = 600) -> str:
        parts = []
        for path in (self.err, self.out, session_log):
            if path.exists():
                text = path.read_text(errors="replace").strip()
                if text:
                    parts.append(f"[{path.name}] …{text[-chars:]}")
        return "\n".join(parts)


class Web(Workload):
    name = "web"
    summary = ("SURGE-model users load pages (base document + embedded files, think times) from lighttpd "
               "with httperf over HTTP/1.0, 1.1 or 1.1 pipelined: object download time (Scharf Figs. 12-14)")
    sized = False
    params = {
        "model": Param(["surge-default"], f"SURGE model of Table 1 ({', '.join(surge.MODELS)}); a name or a list, "
                                          "each replayed in turn"),
        "mode": Param(["http10"], f"HTTP mode ({', '.join(hp.MODES)}); a name or a list, each replayed in turn"),
        "users": Param(1, "users, spread over the client hosts", low=1, high=4000, integer=True),
        "clients": Param(2, "client hosts the users are spread over (one httperf each)", low=1, high=16,
                         integer=True),
        "duration_s": Param(900.0, "think-time clock each user's session covers, per model and mode",
                            low=MIN_DURATION_S, high=86400),
        "seed": Param(1, "file set (and, with the the users' sessions)", low=0, high=2 ** 31 - 1,
                      integer=True),
        "stationary": Param(False, "users start in steady state: the first page after an equilibrium think time"),
        "start_spread_s": Param(7.0, "users start this far apart in all (the first at once)", low=0, high=3600),
        "max_file_bytes": Param(0, "cap on a file's size in bytes (0: the model as it is)", low=0, high=1 << 40,
                                integer=True),
        "overrun": Param(3.0, "a replay still running after overrun × duration_s is stopped", low=1.0, high=100.0),
        "recv_buffer": Param(8 << 20, "the clients' socket receive buffer (the paper's 8 MB)", low=65536,
                             high=1 << 30, integer=True),
    }

    def hosts(self, params: dict) -> HostNeeds:
        return HostNeeds(pairs=max(1, min(params["clients"], params["users"])))

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        for field, known in (("model", surge.MODELS), ("mode", hp.MODES)):
            given = names(params[field])
            if not given or not all(isinstance(n, str) for n in given):
                return field, f"expected a name or a list of names (one of: {', '.join(known)})"
            for name in given:
                if name not in known:
                    return field, f"'{name}' is not one of: {', '.join(known)}"
            if len(set(given)) != len(given):
                return field, "a name appears twice"
        per_host = math.ceil(params["users"] / max(1, min(params["clients"], params["users"])))
        if per_host > hp.HTTPERF_MAX_SESSIONS:
            return "users", (f"{per_host} users per client host: one httperf replays at most "
                             f"{hp.HTTPERF_MAX_SESSIONS}; raise clients")
        return None

    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        n, prof = session.names, session.profile
        duration = float(params["duration_s"])
        if duration < MIN_DURATION_RTTS * prof.rtt_s:
            raise WorkloadError(f"duration_s {duration:g} s is shorter than {MIN_DURATION_RTTS} RTTs of "
                                f"{prof.name} ({prof.rtt_s * 1000:g} ms)")
        rep = session.rep
        session_seed = repetition_seed(params["seed"], rep)
        users = params["users"]
        n_hosts = self.hosts(params).pairs
        clients = [session.host(n.client(i)) for i in range(1, n_hosts + 1)]
        server = session.host(n.server(1))
        t0 = time.monotonic()
        sets, docroots = {}, {}
        for model_name in names(params["model"]):
            fs = surge.make_file_set(surge.model(model_name), params["seed"], params["max_file_bytes"] or None)
            docroot = session.scratch / f"web-{surge.file_set_digest(fs)[:16]}"
            surge.write_docroot(fs, docroot)
            sets[model_name], docroots[model_name] = fs, docroot
        session.timings["docroot_s"] = time.monotonic() - t0
        shim = hp.build_poll_shim(SHIM_DIR)

        session.install_under_test(server=[server], client=clients)
        session.capture_standard()
        handshakes = handshake_captures(session)
        session.flow("web", server, clients[0], HTTP_PORT)
        session.ready()

        combos, app = [], {}
        t_all = time.monotonic()
        for model_name, fs in sets.items():
            sessions = [surge.user_session(fs, u, duration, seed=session_seed, stationary=params["stationary"])
                        for u in range(users)]
            for mode in names(params["mode"]):
                combo, figures = self._replay(session, params, fs, docroots[model_name], sessions, mode, clients,
                                              shim, server)
                combos.append(combo)
                app[combo["key"]] = figures
        session.timings["traffic_web_s"] = time.monotonic() - t_all
        drain(handshakes)
        stats = [c.stop() for c in handshakes]
        lost = not_exact(stats)
        if lost:
            raise WorkloadError(f"tcpdump lost packets of the handshake captures: {lost}")
        total = link_use_total([c["link_use"] for c in combos], prof.rate_bps("down"))
        return WorkloadResult(
            spec={"server_port": HTTP_PORT, "server_ip": n.server_ip(1), "users": users,
                  "clients": [{"host": c.name, "ip": n.client_ip(i + 1), "users": users_of_host(users, n_hosts, i)}
                              for i, c in enumerate(clients)],
                  "duration_s": duration, "seed": params["seed"], "session_seed": session_seed,
                  "repetition": rep, "stationary": params["stationary"], "rtt_s": prof.rtt_s,
                  "rate_bps": prof.rate_bps("down"), "handshake_captures": HANDSHAKE_FILES,
                  "combos": combos},
            app=app, extra={"link_use": total})

    # -- parts of a run ------------------------------------------------------------------------
    def _replay(self, session, params: dict, fs, docroot: Path, sessions: list, mode: str, clients: list,
                shim: Path, server) -> tuple[dict, dict]:
        """One model and HTTP mode: lighttpd for the mode, one stamped httperf per client host,
        until every user is done (or the overrun bound); returns (its spec, its app figures)."""
        n, prof = session.names, session.profile
        key = combo_key(fs.model.name, mode)
        duration, users = float(params["duration_s"]), params["users"]
        bound_s = params["overrun"] * duration
        timeout_s = hp.reply_timeout_s(max(f.size for f in fs.files), prof.rate_bps("down"), sharing=users)
        lighttpd = session.adopt(f"lighttpd {key}", Lighttpd(
            server, n.server_ip(1), docroot, session.workdir, session.instance, name=f"lighttpd-{key}",
            extra=(*hp.lighttpd_directives(mode, keepalive_idle_s=bound_s + timeout_s + 60),
                   f"server.max-fds = {LIGHTTPD_MAX_FDS}")))
        replays = []
        for k, node in enumerate(clients):
            mine = [sessions[u] for u in users_of_host(users, len(clients), k)]
            if not mine:
                continue
            replays.append(Replay(node.name, n.client_ip(k + 1), [s.user for s in mine], mine,
                                  session.workdir / f"httperf-{key}-{node.name}.out"))
        spread = 0.0 if params["stationary"] else params["start_spread_s"]
        queue_before = session.queue_counters("down")
        t_start = time.time()
        t0 = time.monotonic()
        for k, r in enumerate(replays):
            log = hp.write_wsesslog(session.workdir / f"web-{key}-{r.host}.wsesslog", fs, r.sessions)
            # User u starts u × spread/users after the first: host k's users are every
            # len(replays)-th user from k, so its httperf starts k × spread/users late and
            # starts its own users len(replays) × spread/users apart.
            argv = hp.httperf_argv(n.server_ip(1), log, len(r.users), mode, timeout_s=timeout_s,
                                   start_spread_s=spread * len(r.users) * len(replays) / users,
                                   recv_buffer=params["recv_buffer"], preload=shim)
            if k and spread:
                time.sleep(spread / users)
            r.proc = session.spawn(session.host(r.host), hp.stamped(sys.executable, r.out, argv),
                                   f"httperf {key} {r.host}", f"stamper-{key}-{r.host}.log")
        stopped = self._wait(session, replays, key, t0 + bound_s)
        time.sleep(max(0.2, 2 * prof.rtt_s))            # the last connections close
        t_end = time.time()
        use = link_use(queue_before, session.queue_counters("down"), t0, time.monotonic(), offered_rate(session))
        lighttpd_cpu = cpu_seconds(lighttpd.proc.pid)
        lighttpd.stop()

        figures, hosts = {}, []
        for r in replays:
            report = parse_files(r.out, r.err)
            expected = hp.requests_of(fs, r.sessions)
            problems = replay_problems(report, fs, r.sessions, stopped)
            if problems:
                raise WorkloadError(f"httperf on {r.host} ({key}): {'; '.join(problems[:6])}\n"
                                    f"{r.log_tail(session.workdir / f'stamper-{key}-{r.host}.log')}")
            figures[r.host] = {"figures": report.figures, "errors": report.errors, "cpu": stamper_cpu(
                session.workdir / f"stamper-{key}-{r.host}.log"), "requests_scheduled": expected}
            hosts.append({"host": r.host, "ip": r.ip, "users": r.users, "log": r.out.name, "err": r.err.name,
                          "wsesslog": f"web-{key}-{r.host}.wsesslog"})
        figures["lighttpd_cpu_s"] = lighttpd_cpu
        pages = sum(len(s.visits) for s in sessions)
        combo = {"key": key, "model": fs.model.name, "mode": mode, "t_start": t_start, "t_end": t_end,
                 "stopped": stopped, "pages_scheduled": pages, "requests_scheduled": hp.requests_of(fs, sessions),
                 "content_bytes_scheduled": sum(surge.session_bytes(fs, s) for s in sessions),
                 "reply_timeout_s": timeout_s, "hosts": hosts, "link_use": use,
                 "file_set": {k: v for k, v in surge.model_summary(fs).items() if k != "kind_counts"}}
        return combo, figures

    def _wait(self, session, replays: list[Replay], key: str, deadline: float) -> bool:
        """Until every httperf is done (False) or the deadline passed and they were stopped
        (True). An httperf that ends with an error fails the run at once."""
        while True:
            codes = [r.proc.popen.poll() for r in replays]
            for r, rc in zip(replays, codes):
                if rc not in (None, 0):
                    for other in replays:
                        other.proc.stop(grace_s=10.0)
                    raise WorkloadError(f"httperf on {r.host} ({key}) exited with status {rc}\n"
                                        f"{r.log_tail(session.workdir / f'stamper-{key}-{r.host}.log')}")
            if all(rc == 0 for rc in codes):
                return False
            if time.monotonic() > deadline:
                for r in replays:
                    r.proc.stop(grace_s=10.0)     # the stamper passes it on as SIGINT: httperf prints its figures
                return True
            time.sleep(0.25)


def replay_problems(report, fs, sessions: list, stopped: bool) -> list[str]:
    """What says that a user's replay went wrong (empty when it is clean): httperf's errors,
    failed sessions, replies other than 200, and — unless the replay was stopped at its
    bound — users that did not get every reply of their session."""
    problems = report.problems(users=len(sessions), expected_replies=hp.requests_of(fs, sessions), stopped=stopped)
    if not stopped:
        short = hp.failed_users(report, fs, sessions)
        if short:
            problems.append(f"users {short[:10]} did not get all their replies")
    return problems


def stamper_cpu(log: Path) -> dict:
    """The stamper's closing line: httperf's exit status and the CPU the replay used."""
    if not log.exists():
        return {}
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return {}
    return {}


def link_use_total(uses: list[dict], rate_bps: float) -> dict:
    """The bottleneck queue over all models and modes of a run together."""
    seconds = sum(u["seconds"] for u in uses)
    sent = sum(u["sent_bytes"] for u in uses)
    pkts = sum(u["sent_pkts"] for u in uses)
    drops = sum(u["dropped_pkts"] for u in uses)
    return {"seconds": seconds, "sent_bytes": sent, "sent_pkts": pkts, "dropped_pkts": drops,
            "utilisation": sent * 8 / (rate_bps * seconds) if seconds > 0 else None,
            "drop_rate": drops / (pkts + drops) if pkts + drops else 0.0}


WORKLOAD = Web()
