"""Bursty P-HTTP transfers beside window-limited bulk traffic (TCP Fast Start, §4).

`constant`: `bulk` bulk transfers (cl2 ← sv2, each with its window capped at
`bulk_window`) run throughout; once they have run `warmup_s`, one persistent HTTP
connection (cl1 ← sv1, window capped at `max_window`) fetches `burst_bytes`, idles
`pause_s`, and fetches `burst_bytes` again: the second burst is the one measured.
`changed`: the same, but the bulk transfers start during the pause (the cache of the
first burst is stale by the second). `flashcrowd`: `clients` client hosts each fetch once,
spread over `spread_s`, pause, then all fetch again at once on new connections; the odd
ones from sv1 (the variant under test), the even ones from sv2 (`other_variant`, by
default slow start), so one run shows both halves.

The applications are lighttpd and hosts/phttp_client.py (one persistent connection per
client, TCP_WINDOW_CLAMP for the maximum window, request/response times in JSON).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from config.params import Param
from hosts.apps import HTTP_PORT, Lighttpd, make_object
from hosts.variants import RolePart, Variant
from hosts.workloads.base import HostNeeds, Workload, WorkloadError, WorkloadResult, read_report

CLIENT = Path(__file__).resolve().parent.parent / "phttp_client.py"
BULK_OBJECT_BYTES = 100_000_000      # never finishes within a run at T1 rates: the bulk transfers


class Bursty(Workload):
    name = "bursty"
    summary = "a P-HTTP connection sends a burst, idles, sends again, beside window-limited bulk flows (Fast Start §4)"
    sized = False
    params = {
        "mode": Param("constant", "when the bulk traffic runs, or a flash crowd",
                      choices=("constant", "changed", "flashcrowd")),
        "bulk": Param(2, "bulk transfers (the swept load)", low=0, high=64, integer=True),
        "bulk_window": Param(8192, "maximum window of a bulk transfer, bytes (8 KB at 50 ms, 32 KB at 200 ms)",
                             low=1024, high=1 << 24, integer=True),
        "bulk_variant": Param("newreno", "variant of the bulk transfers' server", kind="variant"),
        "burst_bytes": Param(30000, "bytes of each burst (the paper's 30 KB)", low=1000, high=10 ** 8, integer=True),
        "max_window": Param(32768, "maximum window of the bursty connection, bytes", low=1024, high=1 << 24,
                            integer=True),
        "pause_s": Param(5.0, "idle time between the two bursts", low=0.5, high=3600),
        "warmup_s": Param(5.0, "the bulk transfers run this long before the measured burst's conditions hold",
                          low=0, high=3600),
        "clients": Param(8, "flash crowd: client hosts (half fetch from the variant, half from other_variant)",
                         low=2, high=64, integer=True),
        "spread_s": Param(8.0, "flash crowd: the first fetches are spread over this long", low=0, high=3600),
        "other_variant": Param("newreno", "flash crowd: the variant of the other half's server", kind="variant"),
    }

    def hosts(self, params: dict) -> HostNeeds:
        return HostNeeds(pairs=max(2, params["clients"]) if params["mode"] == "flashcrowd" else 2)

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        if params["mode"] == "flashcrowd" and params["clients"] % 2:
            return "clients", f"a flash crowd needs an even number of clients (two halves), got {params['clients']}"
        return None

    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        if params["mode"] == "flashcrowd":
            return self._flashcrowd(session, params)
        return self._bursts(session, params)

    # -- constant and changed load ---------------------------------------------------------
    def _bursts(self, session, p: dict) -> WorkloadResult:
        n = session.names
        sv1, cl1, sv2, cl2 = (session.host(x) for x in (n.server(1), n.client(1), n.server(2), n.client(2)))
        www = session.scratch / "www"
        burst_url = make_object(www, p["burst_bytes"])
        bulk_url = make_object(www, BULK_OBJECT_BYTES) if p["bulk"] else None
        session.install_under_test(server=[sv1], client=[cl1])
        if p["bulk"]:
            session.install(window_limited(session.lookup(p["bulk_variant"]), p["bulk_window"] // session.profile.mss),
                            server=[sv2], client=[cl2])
        for i, server in ((1, sv1), (2, sv2))[:2 if p["bulk"] else 1]:
            _mkdir(session.workdir / f"sv{i}")
            session.adopt(f"lighttpd sv{i}", Lighttpd(server, n.server_ip(i), www, session.workdir / f"sv{i}",
                                                       session.instance, extra=keep_alive(p)))
        session.capture_standard()
        session.flow("bursty", sv1, cl1, HTTP_PORT, 2 * p["burst_bytes"])
        if p["bulk"]:
            session.flow("bulk", sv2, cl2, HTTP_PORT)
        session.ready()
        t = session.timings
        t0 = time.monotonic()
        # Long enough for everything: warm-up, two bursts at a fraction of the link, the pause.
        span = p["warmup_s"] + p["pause_s"] + 60 + 20 * p["burst_bytes"] * 8 / session.profile.rate_bps("down")
        bulk = []
        if p["bulk"] and p["mode"] == "constant":
            bulk = self._start_bulk(session, cl2, n.server_ip(2), bulk_url, p, span)
            time.sleep(p["warmup_s"])
        pauses = [0.0, p["pause_s"]]
        if p["mode"] == "changed" and p["bulk"]:
            # The pause must give the new bulk traffic time to settle before the second burst.
            pauses[1] = max(p["pause_s"], p["warmup_s"] + 1.0)
        bursty = session.spawn(cl1, [sys.executable, str(CLIENT), "--server", n.server_ip(1), "--path", burst_url,
                                     "--path", burst_url, "--pause", "0", "--pause", f"{pauses[1]:g}",
                                     "--clamp", str(p["max_window"]), "--out", str(session.workdir / "bursty.json")],
                               "bursty client", "bursty.log")
        if p["mode"] == "changed" and p["bulk"]:
            first_done = _wait_for_first_response(session.workdir / "bursty.log", bursty, span)
            if not first_done:
                raise WorkloadError(f"the first burst did not complete: {bursty.output()[-300:]}")
            bulk = self._start_bulk(session, cl2, n.server_ip(2), bulk_url, p, span)
        rc = bursty.wait(timeout=span + pauses[1])
        t["traffic_bursts_s"] = time.monotonic() - t0
        for proc in bulk:
            proc.stop(grace_s=3.0)
        result = read_report(session.workdir / "bursty.json", "bursty client")
        if rc != 0 or result.get("error") or len(result["requests"]) != 2:
            raise WorkloadError(f"the bursty connection failed (exit {rc}): {result.get('error')}")
        for r in result["requests"]:
            if r["status"] != 200 or r["bytes"] != p["burst_bytes"]:
                raise WorkloadError(f"a burst returned {r['status']} with {r['bytes']} bytes, expected {p['burst_bytes']}")
        bulk_reports = [read_report(session.workdir / f"bulk-{i}.json", f"bulk transfer {i}") for i in range(len(bulk))]
        return WorkloadResult(
            spec={"mode": p["mode"], "server_port": HTTP_PORT, "burst_bytes": p["burst_bytes"],
                  "bursty": {"client_ip": n.client_ip(1), "server_ip": n.server_ip(1)},
                  "bulk": {"client_ip": n.client_ip(2), "server_ip": n.server_ip(2), "count": len(bulk)},
                  "requests": result["requests"], "rtt_s": session.profile.rtt_s,
                  "rate_bps": session.profile.rate_bps("down")},
            app={"bursty": result, "bulk": bulk_reports})

    def _start_bulk(self, session, client, server_ip: str, url: str, p: dict, duration_s: float) -> list:
        return [session.spawn(client, [sys.executable, str(CLIENT), "--server", server_ip, "--path", url, "--bulk",
                                       "--duration-s", f"{duration_s:g}", "--clamp", str(p["bulk_window"]),
                                       "--out", str(session.workdir / f"bulk-{i}.json")],
                              f"bulk transfer {i}", f"bulk-{i}.log")
                for i in range(p["bulk"])]

    # -- flash crowd ----------------------------------------------------------------------------
    def _flashcrowd(self, session, p: dict) -> WorkloadResult:
        n = session.names
        k = p["clients"]
        sv1, sv2 = session.host(n.server(1)), session.host(n.server(2))
        clients = [session.host(n.client(i)) for i in range(1, k + 1)]
        www = session.scratch / "www"
        url = make_object(www, p["burst_bytes"])
        mine = clients[0::2]                 # cl1, cl3, …: from sv1, the variant under test
        others = clients[1::2]               # cl2, cl4, …: from sv2, other_variant
        session.install_under_test(server=[sv1], client=mine)
        session.install(p["other_variant"], server=[sv2], client=others)
        for i, server in ((1, sv1), (2, sv2)):
            _mkdir(session.workdir / f"sv{i}")
            session.adopt(f"lighttpd sv{i}", Lighttpd(server, n.server_ip(i), www, session.workdir / f"sv{i}",
                                                       session.instance, extra=keep_alive(p)))
        session.capture_standard()
        session.flow("crowd", sv1, mine[0], HTTP_PORT, p["burst_bytes"])
        session.flow("others", sv2, others[0], HTTP_PORT, p["burst_bytes"])
        session.ready()
        t0 = time.monotonic()
        gap = p["spread_s"] / max(1, k - 1)
        timeout = 60 + 20 * k * p["burst_bytes"] * 8 / session.profile.rate_bps("down")
        jobs = []
        for phase, spacing in (("first", gap), ("crowd", 0.0)):
            if phase == "crowd":
                time.sleep(p["pause_s"])
            procs = []
            for i, client in enumerate(clients, 1):
                server_ip = n.server_ip(1 if client in mine else 2)
                procs.append((client.name, n.client_ip(i), server_ip, phase, session.spawn(
                    client, [sys.executable, str(CLIENT), "--server", server_ip, "--path", url,
                             "--clamp", str(p["max_window"]), "--out",
                             str(session.workdir / f"{phase}-{client.name}.json")],
                    f"{phase} fetch {client.name}", f"{phase}-{client.name}.log")))
                if spacing:
                    time.sleep(spacing)
            for name, _, _, _, proc in procs:
                if proc.wait(timeout=timeout) != 0:
                    raise WorkloadError(f"the {phase} fetch of {name} failed: {proc.output()[-300:]}")
            jobs += procs
        session.timings["traffic_crowd_s"] = time.monotonic() - t0
        fetches = []
        for name, client_ip, server_ip, phase, _ in jobs:
            report = read_report(session.workdir / f"{phase}-{name}.json", f"{phase} fetch of {name}")
            if report.get("error") or len(report["requests"]) != 1:
                raise WorkloadError(f"{name}'s {phase} fetch failed: {report.get('error')}")
            [req] = report["requests"]
            if req["status"] != 200 or req["bytes"] != p["burst_bytes"]:
                raise WorkloadError(f"{name}'s {phase} fetch returned {req['status']} with {req['bytes']} bytes")
            fetches.append({"client": name, "client_ip": client_ip, "server_ip": server_ip, "phase": phase,
                            "half": "variant" if server_ip == n.server_ip(1) else "other",
                            "local_port": report["local_port"], **req})
        return WorkloadResult(
            spec={"mode": "flashcrowd", "server_port": HTTP_PORT, "burst_bytes": p["burst_bytes"],
                  "fetches": fetches, "rtt_s": session.profile.rtt_s, "rate_bps": session.profile.rate_bps("down"),
                  "variant_server_ip": n.server_ip(1), "other_server_ip": n.server_ip(2)},
            app={})



def window_limited(variant: Variant, segments: int) -> Variant:
    """`variant` with its sender's window held at `segments` (the paper's maximum window of
    a bulk transfer). The sender holds it: a receiver's TCP_WINDOW_CLAMP is not kept by this
    kernel (measured: 55-64 KB in flight for an 8 KB clamp)."""
    part = variant.parts.get("server")
    if part is None or "max_cwnd" not in part.impl.params:
        raise WorkloadError(f"bulk_variant {variant.name}: its server ({part.impl.name if part else 'none'}) "
                            "cannot hold a maximum window; choose a linux-tcp variant")
    parts = {**variant.parts, "server": RolePart(part.impl, {**part.params, "max_cwnd": max(1, segments)})}
    return Variant(name=variant.name, summary=f"{variant.summary}; window {segments} segments", parts=parts)


def keep_alive(p: dict) -> tuple[str, ...]:
    """lighttpd closes a keep-alive connection idle for 5 s by default; the P-HTTP
    connection must outlive the pause, or the second burst finds it closed."""
    return (f"server.max-keep-alive-idle = {int(max(p['pause_s'], p['warmup_s'])) + 60}",)


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _wait_for_first_response(log: Path, proc, timeout_s: float) -> bool:
    """The client writes its report only at the end; the first burst's end is seen as the
    second request's pause beginning, i.e. when the first response was read. Polls the
    client's own report of progress (a line per response on its log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "response 1 done" in (log.read_text() if log.exists() else ""):
            return True
        if not proc.running():
            return False
        time.sleep(0.02)
    return False


WORKLOAD = Bursty()
