"""The FTP launcher's timing and report (pure logic): transfers start on their schedule
(open loop: a slow transfer does not hold the next), each report line comes from its own
curl. curl is replaced on PATH by a stand-in that prints what curl's `-w %{json}` would and
sleeps, so nothing touches the network."""
from __future__ import annotations

import os
import time
from pathlib import Path

from hosts import ftp_client

STAND_IN = """#!/bin/sh
# The arguments as the launcher passes them: ... --local-port P-P+1 ... URL (last).
port=""
prev=""
for a in "$@"; do
    [ "$prev" = "--local-port" ] && port=${a%-*}
    prev=$a
done
sleep 0.3
printf '{"local_port":%s,"response_code":226,"size_download":150000}' "$port"
"""


def test_wait_until_returns_at_the_deadline_not_before():
    for ahead in (0.0005, 0.004, 0.02):
        deadline = time.monotonic() + ahead
        ftp_client.wait_until(deadline)
        late = time.monotonic() - deadline
        assert 0 <= late < 0.05, late                    # generous: the machine is shared


def test_transfers_start_on_schedule_and_overlap(tmp_path: Path, monkeypatch):
    curl = tmp_path / "curl"
    curl.write_text(STAND_IN)
    curl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    start = time.time() + 0.2
    entries = [[0.1, "ftp://10.0.0.1/a", 20000], [0.0, "ftp://10.0.0.1/a", 20002], [0.15, "ftp://10.0.0.1/a", 20004]]
    report = ftp_client.run(entries, start, max_time_s=10)
    t = report["transfers"]
    assert [x["index"] for x in t] == [0, 1, 2]
    for x, (offset, url, port) in zip(t, entries):
        assert x["scheduled"] == start + offset and x["url"] == url
        # Each 0.3 s transfer overlaps the next one's start: open loop.
        assert 0 <= x["started"] - x["scheduled"] < 0.05
        assert x["started"] <= x["spawned"]
        assert (x["local_port"], x["data_port"], x["exit"], x["code"], x["bytes"]) == (port, port + 1, 0, 226, 150000)
