"""FTP transfers at scheduled times with curl: the client side of web sessions' FTP traffic.

    ftp_client.py --schedule FILE --start-at EPOCH --out FILE [--max-time S]

`--schedule` is a JSON list of [offset, url, local_port]: at start-at + offset one curl
fetches the url (passive FTP) with its local ports pinned to local_port (the control
connection) and local_port + 1 (the data connection: curl binds it from the same range),
so the analysis finds each transfer's data connection in a capture by its port. The
ports come from a range below the kernel's ephemeral one, so nothing else takes them.
Like the HTTP client this launcher is open loop: a transfer starts on time whether or not
earlier ones finished. It sleeps (nanosleep) until SPIN_S before the start and spins the
rest: a launcher that slept for a second is woken late by whatever else the host's CPU
runs, and spinning moves that wake-up off the deadline. Then it forks curl.

The report (JSON) lists per transfer: the schedule, the actual start and when curl's
process was running (wall clock), the ports, curl's exit code, FTP response code and bytes
downloaded.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional


SPIN_S = 0.002


def wait_until(deadline: float) -> None:
    """Return at `deadline` (time.monotonic()): sleep to SPIN_S before it, spin the rest."""
    rest = deadline - time.monotonic()
    if rest > SPIN_S:
        time.sleep(rest - SPIN_S)
    while time.monotonic() < deadline:
        pass


def run(entries: list, start_at: float, max_time_s: float) -> dict:
    mono0 = time.monotonic() + (start_at - time.time())
    outdir = Path(tempfile.mkdtemp(prefix="startlab-ftp-"))
    jobs = []
    try:
        for i, (offset, url, port) in sorted(enumerate(entries), key=lambda e: e[1][0]):
            out = open(outdir / f"{i}.json", "w")
            wait_until(mono0 + float(offset))
            started = time.time()
            proc = subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--ftp-pasv", "--local-port",
                                     f"{port}-{port + 1}", "--max-time", f"{max_time_s:g}", "-w", "%{json}", url],
                                    stdout=out, stderr=subprocess.DEVNULL)
            spawned = time.time()
            out.close()
            jobs.append((i, float(offset), url, int(port), started, spawned, proc))
        transfers = []
        for i, offset, url, port, started, spawned, proc in sorted(jobs):
            rc = proc.wait()
            try:
                w = json.loads((outdir / f"{i}.json").read_text() or "{}")
            except ValueError:
                w = {}
            transfers.append({"index": i, "url": url, "scheduled": start_at + offset, "started": started,
                              "spawned": spawned,
                              "local_port": int(w.get("local_port") or 0), "data_port": port + 1, "exit": rc,
                              "code": int(w.get("response_code") or 0),
                              "bytes": int(w.get("size_download") or 0)})
    finally:
        for f in outdir.iterdir():
            f.unlink()
        outdir.rmdir()
    return {"transfers": transfers, "start_at": start_at}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedule", required=True)
    ap.add_argument("--start-at", type=float, required=True)
    ap.add_argument("--max-time", type=float, default=300.0, help="curl's limit per transfer (s)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    with open(a.schedule) as fh:
        entries = json.load(fh)
    print(f"scheduled {len(entries)} transfers", flush=True)
    report = run(entries, a.start_at, a.max_time)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh)
    os.replace(tmp, a.out)
    bad = [t for t in report["transfers"] if t["exit"] != 0 or t["code"] != 226]
    print(f"done: {len(report['transfers']) - len(bad)} ok, {len(bad)} failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
