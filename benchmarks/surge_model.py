#!/usr/bin/env python3
"""Benchmark: the SURGE web model and its httperf replay (a script that prints figures).

    .venv/bin/python benchmarks/surge_model.py model [--seeds 20]
    sudo .venv/bin/python benchmarks/surge_model.py modes
    sudo .venv/bin/python benchmarks/surge_model.py replay --users 1,10,50 --seconds 60 [--mode http11]
                                                          [--no-shim] [--rate-mbit 0] [--stationary]
    sudo .venv/bin/python benchmarks/surge_model.py samples [--out tests/data/httperf]

model   per model: the file set over seeds (docroot, pages, files per page, expected page
        bytes, one user's offered load), no root needed.
modes   per HTTP mode, a few users replayed over a 10 Mbit/s tbf; a capture of the client's
        interface gives SYNs per object, the most requests in flight on a connection, who
        closes first, resets; plus httperf's own verdict.
replay  N users for T seconds per N: httperf's CPU (with the poll shim unless --no-shim)
        and the stamper's, bytes per second against the model, page load times, and how
        far the stamped per-call times lie from the capture.
samples httperf outputs for tests/test_httperf.py: the three modes stamped, one plain, a
        stationary start, and each failure (refused, idle close, 404, timeout, stopped).

The network is two private namespaces (stlweb-bench-s, stlweb-bench-c) joined by a veth
pair, optionally with a tbf on the server's egress; no delay element. Everything runs
under flock /tmp/startlab-emulation.lock, and the namespaces (with their veth), the
processes started and the work directory are removed afterwards.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from hosts.workloads import httperf as hp  # noqa: E402
from wire import httperf_log as hl  # noqa: E402
from hosts.workloads import surge  # noqa: E402

LOCK = "/tmp/startlab-emulation.lock"
NS_S, NS_C = "stlweb-bench-s", "stlweb-bench-c"
IF_S, IF_C = "stlwb-s", "stlwb-c"
IP_S, IP_C = "10.79.0.1", "10.79.0.2"
PORT = 80


# --- the private network ---------------------------------------------------------------------

def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def in_ns(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


class Lab:
    """Two namespaces, a veth pair between them, and the processes started in them."""

    def __init__(self, work: Path, rate_mbit: float):
        self.work, self.rate_mbit = work, rate_mbit
        self.procs: list[subprocess.Popen] = []

    def up(self) -> None:
        for ns in (NS_S, NS_C):
            if ns in sh("ip", "netns", "list").stdout.split():
                raise SystemExit(f"namespace {ns} exists already (another run of this benchmark?)")
        sh("ip", "netns", "add", NS_S)
        sh("ip", "netns", "add", NS_C)
        sh("ip", "-n", NS_S, "link", "add", IF_S, "type", "veth", "peer", "name", IF_C, "netns", NS_C)
        for ns, intf, ip in ((NS_S, IF_S, IP_S), (NS_C, IF_C, IP_C)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", intf)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", intf, "up")
            sh(*in_ns(ns, "ethtool", "-K", intf, "tso", "off", "gso", "off", "gro", "off"))
            # reno: allowed in a child namespace here without touching the root's allowed list.
            sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno"))
        if self.rate_mbit > 0:
            burst = max(3 * 1514, int(self.rate_mbit * 1e6 / 8 * 500e-6))
            sh(*in_ns(NS_S, "tc", "qdisc", "add", "dev", IF_S, "root", "tbf", "rate", f"{self.rate_mbit}mbit",
                      "burst", str(burst), "limit", str(1 << 20)))

    def start(self, ns: str, argv: list[str], log: Path) -> subprocess.Popen:
        f = open(log, "w")
        p = subprocess.Popen(in_ns(ns, *argv), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen, sig: int = 15, grace_s: float = 5.0) -> None:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def down(self) -> None:
        for p in self.procs:
            self.stop(p)
        for ns in (NS_S, NS_C):
            sh("ip", "netns", "del", ns, check=False)


@contextmanager
def lab(rate_mbit: float, keep: bool = False) -> Iterator[Lab]:
    with open(LOCK, "a") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        work = Path(tempfile.mkdtemp(prefix="stlweb-bench-"))
        net = Lab(work, rate_mbit)
        try:
            net.up()
            yield net
        finally:
            net.down()
            if not keep:
                shutil.rmtree(work, ignore_errors=True)


def start_lighttpd(net: Lab, docroot: Path, mode: str, keepalive_idle_s: float,
                   max_fds: int = 4096) -> subprocess.Popen:
    conf = net.work / f"lighttpd-{mode}.conf"
    conf.write_text("\n".join([
        f'server.document-root = "{docroot}"',
        f'server.bind = "{IP_S}"',
        f"server.port = {PORT}",
        f'server.errorlog = "{net.work}/lighttpd-error.log"',
        'server.network-backend = "sendfile"',
        *([f"server.max-fds = {max_fds}"] if max_fds else []),
        'mimetype.assign = ( "" => "application/octet-stream" )',
        *hp.lighttpd_directives(mode, keepalive_idle_s), ""]))
    p = net.start(NS_S, ["lighttpd", "-D", "-f", str(conf)], net.work / f"lighttpd-{mode}.log")
    for _ in range(200):
        if f":{PORT}" in sh(*in_ns(NS_S, "ss", "-ltnH")).stdout:
            return p
        time.sleep(0.02)
    raise RuntimeError("lighttpd did not start")


def start_capture(net: Lab, path: Path, snaplen: int = 256) -> subprocess.Popen:
    p = net.start(NS_C, ["tcpdump", "-i", IF_C, "-s", str(snaplen), "-n", "-B", "32768", "--immediate-mode",
                         "-U", "-w", str(path), "tcp", "port", str(PORT)], path.with_suffix(".log"))
    for _ in range(200):
        if "listening on" in path.with_suffix(".log").read_text():
            time.sleep(0.05)
            return p
        time.sleep(0.02)
    raise RuntimeError("tcpdump did not start")


def run_httperf(net: Lab, argv: list[str], tag: str) -> tuple[hl.HttperfReport, dict]:
    """Run httperf through the stamper in the client namespace; (report, CPU figures)."""
    out = net.work / f"{tag}.out"
    stamper = hp.stamped(sys.executable, out, argv)
    t0 = time.monotonic()
    with open(net.work / f"{tag}.stamper-err", "w") as serr:
        p = subprocess.Popen(in_ns(NS_C, *stamper), stdout=subprocess.DEVNULL, stderr=serr)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    p.returncode = status
    rep = hl.parse_files(out, out.with_suffix(".err"))
    if status != 0:
        rep.stderr.append(f"stamper exit status {status}: " + (net.work / f"{tag}.stamper-err").read_text()[-300:])
    total_cpu = ru.ru_utime + ru.ru_stime            # the stamper and its waited-for child
    httperf_cpu = rep.figures.get("cpu_user_s", 0.0) + rep.figures.get("cpu_system_s", 0.0)
    return rep, {"wall_s": wall, "httperf_cpu_s": httperf_cpu, "stamper_cpu_s": max(0.0, total_cpu - httperf_cpu)}


# --- a small classic-pcap reader (the capture is small) ----------------------------------------

def tcp_packets(path: Path) -> Iterator[tuple]:
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    e = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    scale = 1e9 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1e6
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(e + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
            continue
        ihl = (pkt[14] & 15) * 4
        tot = struct.unpack(">H", pkt[16:18])[0]
        tcp = pkt[14 + ihl:]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        paylen = tot - ihl - doff
        yield sec + frac / scale, sport, dport, seq, tcp[13], paylen, bytes(tcp[doff:doff + paylen])


def connections(path: Path) -> dict[int, dict]:
    """Per client port: SYN time, request lines with their times, server byte arrivals, FIN/RST."""
    conns: dict[int, dict] = {}
    for t, sport, dport, seq, flags, paylen, payload in tcp_packets(path):
        c2s = dport == PORT
        port = sport if c2s else dport
        if c2s and flags & 0x02:
            conns[port] = {"syn": t, "requests": [], "server_bytes": [], "first_fin": None, "rst": 0,
                           "c_seqs": set(), "s_next": None}
            continue
        c = conns.get(port)
        if c is None:
            continue
        if flags & 0x01 and c["first_fin"] is None:
            c["first_fin"] = "client" if c2s else "server"
        if flags & 0x04:
            c["rst"] += 1
        if not paylen:
            if not c2s and flags & 0x02:
                c["s_next"] = (seq + 1) & 0xFFFFFFFF
            continue
        if c2s:
            if seq in c["c_seqs"]:
                continue
            c["c_seqs"].add(seq)
            for line in payload.split(b"\r\n"):
                if line.startswith(b"GET "):
                    c["requests"].append((t, line.split(b" ")[1].decode()))
        else:
            # Count only new bytes (the path may retransmit); sequence relative to the SYN-ACK.
            rel = (seq - c["s_next"]) & 0xFFFFFFFF if c["s_next"] is not None else 0
            have = c["server_bytes"][-1][1] if c["server_bytes"] else 0
            end = rel + paylen
            if end > have:
                c["server_bytes"].append((t, end))
    return conns


def match_calls(conns: dict[int, dict], rep: hl.HttperfReport) -> dict:
    """Per call: capture time of its request and of its response's last byte; stamp offsets.

    Responses on a connection arrive in request order, so call i's response ends when the
    server has sent the sizes of responses 0..i (header + content, as httperf counted).
    """
    by_uri = {c.uri: c for c in rep.calls.values() if c.tag is not None}
    send_err, done_err, inflight_max = [], [], 0
    for c in conns.values():
        reqs = [(t, by_uri.get(uri)) for t, uri in c["requests"]]
        ends, total = [], 0
        for _, call in reqs:
            if call is None or not call.complete:
                ends.append(None)
                continue
            total += call.header_bytes + call.content_bytes
            hit = next((t for t, b in c["server_bytes"] if b >= total), None)
            ends.append(hit)
        for i, (t, call) in enumerate(reqs):
            done_before = sum(1 for e in ends[:i] if e is not None and e <= t)
            inflight_max = max(inflight_max, i + 1 - done_before)
            if call is not None and call.sent_s is not None:
                send_err.append(call.sent_s - t)
            if call is not None and call.done_s is not None and ends[i] is not None:
                done_err.append(call.done_s - ends[i])
    def q(xs: list[float]) -> dict:
        if not xs:
            return {}
        a = np.array(xs) * 1e3
        return {"n": len(xs), "median_ms": round(float(np.median(a)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3),
                "min_ms": round(float(a.min()), 3), "max_ms": round(float(a.max()), 3)}
    return {"stamp_minus_capture_send": q(send_err), "stamp_minus_capture_done": q(done_err),
            "max_requests_in_flight": inflight_max}


# --- subcommands -------------------------------------------------------------------------------

def cmd_model(args) -> None:
    for m in surge.MODELS.values():
        rows = [surge.model_summary(surge.make_file_set(m, seed)) for seed in range(args.seeds)]
        def spread(key: str, scale: float = 1.0) -> str:
            xs = np.array([r[key] for r in rows]) / scale
            return f"median {np.median(xs):.3g} (10–90 % {np.percentile(xs, 10):.3g}–{np.percentile(xs, 90):.3g})"
        r0 = rows[0]
        print(f"{m.name}: {r0['files']} files {r0['kind_counts']}, {r0['pages']} pages; model file size mean "
              f"{r0['file_size_mean_model'] / 1e3:.1f} KB, median {r0['file_size_median_model'] / 1e3:.1f} KB; "
              f"embedded per base page mean {r0['embedded_per_page_mean_model']:.2f}; think mean "
              f"{r0['think_mean_s']:.2f} s, median {r0['think_median_s']:.2f} s")
        print(f"  over {args.seeds} seeds: docroot MB {spread('docroot_bytes', 1e6)}; largest file MB "
              f"{spread('largest_file_bytes', 1e6)}; files per page {spread('files_per_page_mean')}; "
              f"page KB {spread('page_bytes_mean', 1e3)}; offered kbit/s per user (no load time) "
              f"{spread('offered_bps_per_user_upper', 1e3)}")


def small_sessions(fs: surge.FileSet, users: int, seconds: float, max_pages: int) -> list[surge.Session]:
    out = []
    for u in range(users):
        s = surge.user_session(fs, u, seconds)
        out.append(surge.Session(s.user, s.visits[:max_pages]))
    return out


def cmd_modes(args) -> None:
    fs = surge.make_file_set(surge.SURGE_DEFAULT, args.seed, max_file_bytes=args.max_file_bytes)
    sessions = small_sessions(fs, args.users, 30.0, args.pages)
    # Short think times: the point is the connection pattern, not the pacing.
    sessions = [surge.Session(s.user, tuple(surge.Visit(v.page, min(v.think_s, 2.5)) for v in s.visits))
                for s in sessions]
    objects = sum(surge.session_requests(fs, s) for s in sessions)
    with lab(args.rate_mbit, args.keep) as net:
        docroot = net.work / "docroot"
        surge.write_docroot(fs, docroot)
        log = hp.write_wsesslog(net.work / "sessions.log", fs, sessions)
        shim = None if args.no_shim else hp.build_poll_shim(net.work)
        for mode in hp.MODES:
            server = start_lighttpd(net, docroot, mode, keepalive_idle_s=600)
            cap = start_capture(net, net.work / f"{mode}.pcap")
            rep, cpu = run_httperf(net, hp.httperf_argv(IP_S, log, len(sessions), mode, start_spread_s=1.0,
                                                        preload=shim), mode)
            time.sleep(0.3)
            net.stop(cap, sig=2)
            net.stop(server)
            conns = connections(net.work / f"{mode}.pcap")
            matched = match_calls(conns, rep)
            fins = {}
            for c in conns.values():
                fins[c["first_fin"]] = fins.get(c["first_fin"], 0) + 1
            print(json.dumps({
                "mode": mode, "objects": objects, "users": len(sessions), "syns": len(conns),
                "syns_per_object": round(len(conns) / objects, 3),
                "requests_per_connection_max": max(len(c["requests"]) for c in conns.values()),
                "max_requests_in_flight": matched["max_requests_in_flight"],
                "first_fin": fins, "rsts": sum(c["rst"] for c in conns.values()),
                "httperf_problems": rep.problems(len(sessions), objects),
                "replies": rep.figures.get("replies"), "errors_total": rep.errors.get("total"),
                "conns_per_session": rep.figures.get("conns_per_session"),
                "stamp_vs_capture": {k: v for k, v in matched.items() if k != "max_requests_in_flight"},
            }))


def cmd_replay(args) -> None:
    fs = surge.make_file_set(surge.model(args.model), args.seed, max_file_bytes=args.max_file_bytes)
    users_list = [int(x) for x in args.users.split(",")]
    with lab(args.rate_mbit, args.keep) as net:
        docroot = net.work / "docroot"
        t0 = time.monotonic()
        surge.write_docroot(fs, docroot)
        print(f"# docroot {fs.total_bytes / 1e6:.1f} MB written in {time.monotonic() - t0:.1f} s; model "
              f"{fs.model.name}, expected page {fs.expected_page_bytes / 1e3:.1f} KB, think mean "
              f"{fs.model.think_time.mean:.1f} s", flush=True)
        shim = None if args.no_shim else hp.build_poll_shim(net.work)
        for users in users_list:
            sessions = [surge.user_session(fs, u, args.seconds, stationary=args.stationary) for u in range(users)]
            requested = sum(surge.session_bytes(fs, s) for s in sessions)
            requests = hp.requests_of(fs, sessions)
            # A stationary start needs no spread (the offsets desynchronise the users) and
            # no warm-up; a start at a page is spread over one mean think time.
            spread = 1.0 if args.stationary else fs.model.think_time.mean
            log = hp.write_wsesslog(net.work / f"sessions-{users}.log", fs, sessions)
            server = start_lighttpd(net, docroot, args.mode, keepalive_idle_s=args.seconds * 3 + 60,
                                    max_fds=args.lighttpd_max_fds)
            cap = start_capture(net, net.work / f"replay-{users}.pcap", snaplen=128) if args.capture else None
            argv = hp.httperf_argv(IP_S, log, users, args.mode, start_spread_s=spread,
                                   preload=shim, per_call=not args.no_per_call)
            rep, cpu = run_httperf(net, argv, f"replay-{users}")
            if cap is not None:
                time.sleep(0.3)
                net.stop(cap, sig=2)
            net.stop(server)
            row = {"users": users, "mode": args.mode, "shim": shim is not None, "per_call": not args.no_per_call,
                   "stationary": args.stationary,
                   "wall_s": round(cpu["wall_s"], 1), "httperf_cpu_s": round(cpu["httperf_cpu_s"], 2),
                   "stamper_cpu_s": round(cpu["stamper_cpu_s"], 2),
                   "httperf_cpu_pct": round(100 * cpu["httperf_cpu_s"] / cpu["wall_s"], 1),
                   "requests": requests, "replies": rep.figures.get("replies"),
                   "requested_content_bytes": requested,
                   "received_content_bytes": sum(c.content_bytes or 0 for c in rep.calls.values()) if rep.calls
                   else round(rep.figures.get("reply_content_bytes", 0) * rep.figures.get("replies", 0)),
                   "problems": rep.problems(users, requests)}
            if not args.no_per_call:
                row.update(replay_figures(fs, sessions, rep, args.seconds, spread if args.stationary else spread + 3,
                                          spread))
            if cap is not None:
                row["stamp_vs_capture"] = match_calls(connections(net.work / f"replay-{users}.pcap"), rep)
            print(json.dumps(row), flush=True)


def scheduled(fs: surge.FileSet, sessions: list[surge.Session], spread_s: float, lo: float, hi: float) -> tuple:
    """Pages and content bytes the sessions themselves start in [lo, hi) (loads taking no
    time), user i starting at i × spread_s / users as httperf's --period starts it."""
    pages = nbytes = 0
    for i, s in enumerate(sessions):
        t = i * max(spread_s / len(sessions), 1e-3) + s.start_offset_s
        for v in s.visits:
            if lo <= t < hi:
                pages += 1
                nbytes += fs.page_bytes(v.page)
            t += v.think_s
    return pages, nbytes


def replay_figures(fs: surge.FileSet, sessions: list[surge.Session], rep: hl.HttperfReport, seconds: float,
                   warmup_s: float, spread_s: float) -> dict:
    """Offered load and think-time fidelity from the stamped calls.

    Within [warmup_s, seconds] of the first request every user is inside its session (the
    sessions cover `seconds` of think time, and loads only stretch them), so the content
    bytes completed there per user-second estimate one user's rate, next to the model's
    mean page bytes ÷ (mean think + mean load).
    """
    loads = [pl for pl in rep.page_loads() if pl.complete]
    load_mean = statistics.fmean(pl.load_time_s for pl in loads) if loads else 0.0
    t0 = min(c.sent_s for c in rep.calls.values() if c.sent_s is not None)
    lo, hi = t0 + warmup_s, t0 + seconds
    in_window = [c for c in rep.calls.values() if c.done_s is not None and lo <= c.done_s < hi]
    pages_started = [pl for pl in loads if pl.start_s is not None and lo <= pl.start_s < hi]
    user_s = len(sessions) * (hi - lo)
    # Think-time fidelity: next page's request minus this page's last reply minus the think time.
    by_user: dict[int, list[hl.PageLoad]] = {}
    for pl in loads:
        by_user.setdefault(pl.user, []).append(pl)
    think_err = []
    for s in sessions:
        pls = sorted(by_user.get(s.user, []), key=lambda pl: pl.page)
        for a, b in zip(pls, pls[1:]):
            if b.page == a.page + 1:
                think_err.append(b.start_s - a.end_s - s.visits[a.page].think_s)
    te = np.array(think_err) * 1e3 if think_err else np.array([np.nan])
    pages_all = max(1, sum(len(s.visits) for s in sessions))
    own_pages, own_bytes = scheduled(fs, sessions, spread_s, warmup_s, seconds)
    return {
        "pages": pages_all, "page_load_mean_s": round(load_mean, 4),
        "page_bytes_mean_replayed": round(sum(surge.session_bytes(fs, s) for s in sessions) / pages_all),
        "page_bytes_mean_model": round(fs.expected_page_bytes),
        "pages_per_user_s_window": round(len(pages_started) / user_s, 4),
        "pages_per_user_s_sessions": round(own_pages / user_s, 4),
        "pages_per_user_s_model": round(1 / (fs.model.think_time.mean + load_mean), 4),
        "kbps_per_user_window": round(8 * sum(c.content_bytes for c in in_window) / user_s / 1e3, 1),
        "kbps_per_user_sessions": round(8 * own_bytes / user_s / 1e3, 1),
        "kbps_per_user_model": round(fs.offered_bps(load_mean) / 1e3, 1),
        "think_error_ms": {"median": round(float(np.median(te)), 3), "p99": round(float(np.percentile(te, 99)), 3),
                           "max": round(float(te.max()), 3)},
    }


def cmd_samples(args) -> None:
    """httperf outputs for the parser's tests: clean runs per mode and every failure kind."""
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    fs = surge.make_file_set(surge.SURGE_DEFAULT, 1, max_file_bytes=200_000)
    sessions = [surge.Session(s.user, tuple(surge.Visit(v.page, 0.5) for v in s.visits[:2]))
                for s in (surge.user_session(fs, u, 30.0) for u in range(2))]
    stationary = [surge.Session(0, sessions[0].visits, start_offset_s=0.8)]
    with lab(10.0) as net:
        docroot = net.work / "docroot"
        surge.write_docroot(fs, docroot)
        (docroot / "big.bin").write_bytes(bytes(3_000_000))
        shim = hp.build_poll_shim(net.work)
        logs = {"two-users": hp.write_wsesslog(net.work / "two-users.log", fs, sessions),
                "stationary": hp.write_wsesslog(net.work / "stationary.log", fs, stationary)}
        (net.work / "missing.log").write_text("/l0000.bin?u=0&p=0&o=0 think=0.2\n\t/nothere.bin?u=0&p=0&o=1\n")
        (net.work / "big.log").write_text("/big.bin?u=0&p=0&o=0 think=0.2\n")
        (net.work / "idle.log").write_text("/l0000.bin?u=0&p=0&o=0 think=2.0\n/l0001.bin?u=0&p=1&o=0 think=1\n")
        (net.work / "slow.log").write_text("/l0000.bin?u=0&p=0&o=0 think=5\n/l0001.bin?u=0&p=1&o=0 think=5\n\n"
                                           "/l0002.bin?u=1&p=0&o=0 think=5\n/l0003.bin?u=1&p=1&o=0 think=5\n")
        for name in logs:
            shutil.copy(logs[name], out_dir / f"{name}.wsesslog")

        def run(tag: str, mode: str, log: Path, users: int, *, stamped: bool = True, idle_s: float = 600,
                server: bool = True, timeout_s: float = 30, stop_after_s: float | None = None) -> None:
            srv = start_lighttpd(net, docroot, mode, idle_s) if server else None
            argv = hp.httperf_argv(IP_S, log, users, mode, start_spread_s=0.2, timeout_s=timeout_s,
                                   preload=shim if stamped else None)
            if stamped:
                argv = hp.stamped(sys.executable, out_dir / f"{tag}.out", argv)
                p = subprocess.Popen(in_ns(NS_C, *argv))
            else:
                with open(out_dir / f"{tag}.out", "w") as o, open(out_dir / f"{tag}.err", "w") as e:
                    p = subprocess.Popen(in_ns(NS_C, *argv), stdout=o, stderr=e)
            if stop_after_s is not None:
                time.sleep(stop_after_s)
                p.send_signal(2)
            p.wait()
            if srv is not None:
                net.stop(srv)
            for f in (out_dir / f"{tag}.out", out_dir / f"{tag}.err"):
                f.write_text(f.read_text().replace(str(net.work), "/tmp/WORK"))

        for mode in hp.MODES:
            run(f"{mode}-stamped", mode, logs["two-users"], 2)
        run("http11-plain", "http11", logs["two-users"], 2, stamped=False)
        run("stationary-stamped", "http11", logs["stationary"], 1)
        run("refused", "http11", logs["two-users"], 2, server=False)
        run("idle-close", "http11", net.work / "idle.log", 1, idle_s=1)
        run("missing", "http11", net.work / "missing.log", 1)
        run("timeout", "http11", net.work / "big.log", 1, timeout_s=1)
        run("stopped", "http11", net.work / "slow.log", 2, stop_after_s=2.0)
    print(f"samples in {out_dir}: {', '.join(sorted(p.name for p in out_dir.iterdir()))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("model")
    a.add_argument("--seeds", type=int, default=20)
    for name in ("modes", "replay"):
        b = sub.add_parser(name)
        b.add_argument("--seed", type=int, default=1)
        b.add_argument("--max-file-bytes", type=int, default=4 << 20)
        b.add_argument("--no-shim", action="store_true")
        b.add_argument("--keep", action="store_true", help="keep the work directory (captures, logs)")
        if name == "modes":
            b.add_argument("--users", type=int, default=3)
            b.add_argument("--pages", type=int, default=4)
            b.add_argument("--rate-mbit", type=float, default=10.0)
        else:
            b.add_argument("--model", default="surge-default", choices=list(surge.MODELS))
            b.add_argument("--users", default="1,10,50")
            b.add_argument("--seconds", type=float, default=60.0)
            b.add_argument("--mode", default="http11", choices=list(hp.MODES))
            b.add_argument("--rate-mbit", type=float, default=0.0, help="tbf on the server's egress (0: none)")
            b.add_argument("--capture", action="store_true", help="compare stamped times with a capture")
            b.add_argument("--no-per-call", action="store_true", help="no per-call printing (CPU comparison)")
            b.add_argument("--lighttpd-max-fds", type=int, default=4096, help="0: lighttpd's default")
            b.add_argument("--stationary", action="store_true", help="users start in steady state")
    c = sub.add_parser("samples")
    c.add_argument("--out", default=str(REPO / "tests/data/httperf"))
    args = ap.parse_args()
    {"model": cmd_model, "modes": cmd_modes, "replay": cmd_replay, "samples": cmd_samples}[args.cmd](args)


if __name__ == "__main__":
    main()
