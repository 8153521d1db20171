"""Packet captures with tcpdump: headers only, started before traffic, flushed at the end."""
from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from hosts.process import NodeProcess, wait_until

SNAPLEN = 128          # Ethernet + IPv4 + TCP with options fits; payload is not needed


class Capture:
    """One tcpdump on one interface of one node, writing `path`."""

    # Packets that reached the socket before libpcap attached the kernel filter: the kernel
    # counts them as received by the filter, and libpcap then filters them in user space, so
    # a packet of another protocol in that window (an ICMP or ARP frame, say) stays counted
    # and never captured. Measured: two ICMP packets of a ping running while tcpdump started
    # left "0 captured, 2 received by filter" for good. Counted once tcpdump listens, before
    # any traffic of the run, and subtracted from what is still to write.
    before_filter: int = 0
    # What its filter had taken when drain() found it caught up, after the run's processes
    # had stopped (None: never found so). Packets after that are the stopped flows' tail
    # still in the path — a slow trace link's deep queue drains for most of a second — and
    # a stop may leave some unwritten without losing anything of the run.
    drained_at: int | None = None

    def __init__(self, node, intf: str, path: Path, instance, bpf_filter: str = "tcp"):
        self.path = Path(path)
        self.log = self.path.with_suffix(".log")
        self.proc = NodeProcess(node, ["tcpdump", "-i", intf, "-s", str(SNAPLEN), "-n", "-B", "16384",
                                       "--immediate-mode", "-U", "-w", str(self.path), bpf_filter],
                                instance, f"tcpdump {intf}", log_path=self.log)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait until tcpdump listens, then take its counters once (see `before_filter`)."""
        if not wait_until(lambda: "listening on" in self.proc.output() or not self.proc.running(), timeout_s):
            raise RuntimeError(f"tcpdump on {self.path.name} did not start: {self.proc.output()[-300:]}")
        if not self.proc.running():
            raise RuntimeError(f"tcpdump for {self.path.name} exited: {self.proc.output()[-300:]}")
        self.proc.signal(signal.SIGUSR1)
        if not wait_until(lambda: self.counters()["received_by_filter"] is not None, timeout_s):
            raise RuntimeError(f"tcpdump on {self.path.name} did not report its counters: "
                               f"{self.proc.output()[-300:]}")
        c = self.counters()
        self.before_filter = max(0, c["received_by_filter"] - (c["captured"] or 0))

    def counters(self) -> dict[str, int | None]:
        """tcpdump's latest counters (printed at its exit, and on SIGUSR1 while it runs)."""
        text = self.proc.output()
        def count(label: str) -> int | None:
            found = re.findall(rf"(\d+) packets? {label}", text)
            return int(found[-1]) if found else None
        return {"captured": count("captured"), "received_by_filter": count("received by filter"),
                "dropped_by_kernel": count("dropped by kernel")}

    def caught_up(self) -> bool:
        """Has tcpdump written every packet its filter took, as of its last report?"""
        c = self.counters()
        behind = self.behind(c)
        if behind is not None and behind <= 0:
            self.drained_at = c["received_by_filter"]
            return True
        return False

    def behind(self, c: dict[str, int | None]) -> int | None:
        """Packets its filter took of the run's and tcpdump has not written, by counters `c`."""
        if c["captured"] is None or c["received_by_filter"] is None:
            return None
        return c["received_by_filter"] - c["captured"] - self.before_filter

    def stop(self) -> dict:
        """Stop and return tcpdump's own counters. A capture is not exact when the kernel
        dropped packets (its buffer was full) or when tcpdump had not written every packet
        its filter took when it stopped (`unwritten`: a slow host's tcpdump falls behind,
        and what is still in its buffer at the stop is lost; drain() waits for it first)."""
        self.proc.stop(grace_s=5.0)
        c = self.counters()
        run, tail = unwritten(self.behind(c), c["received_by_filter"], self.drained_at)
        return {"file": self.path.name, "captured": c["captured"], "dropped_by_kernel": c["dropped_by_kernel"],
                "received_by_filter": c["received_by_filter"], "before_filter": self.before_filter,
                "unwritten": run, "unwritten_after_traffic": tail}


def unwritten(behind: int | None, received: int | None, drained_at: int | None) -> tuple[int | None, int]:
    """(packets of the run left unwritten, packets of the tail after it left unwritten).

    tcpdump writes in the order its filter takes packets, so what it had not written at the
    stop is the last `behind` it took; of those, the ones taken after the drain found it
    caught up (received - drained_at) came after the run's processes had stopped."""
    if behind is None:
        return None, 0
    behind = max(0, behind)
    tail = max(0, received - drained_at) if drained_at is not None and received is not None else 0
    return max(0, behind - tail), min(behind, tail)


def drain(captures: list[Capture], max_s: float = 60.0) -> float:
    """Wait until every tcpdump has written every packet its filter took, at most `max_s`;
    return the time waited. Called after the traffic, before stopping them: tcpdump reports
    its counters on SIGUSR1 without stopping, and a slow host's tcpdump can be tens of
    thousands of packets behind when the traffic ends (measured under software emulation:
    25,865 of 73,506), which a stop would lose."""
    t0 = time.monotonic()
    waiting = [c for c in captures if c.proc.running()]
    while waiting and time.monotonic() - t0 < max_s:
        for c in waiting:
            c.proc.signal(signal.SIGUSR1)
        time.sleep(0.1)
        waiting = [c for c in waiting if c.proc.running() and not c.caught_up()]
    return time.monotonic() - t0


def not_exact(stats: list[dict | None]) -> list[dict]:
    """The captures whose counters say they miss packets (see Capture.stop)."""
    return [s for s in stats if s and (s.get("dropped_by_kernel") or s.get("unwritten"))]


def start_captures(specs: list[tuple], instance, bpf_filter: str = "tcp") -> list[Capture]:
    """Start [(node, intf, path), ...] and wait until every tcpdump is listening."""
    captures = []
    try:
        for node, intf, path in specs:
            captures.append(Capture(node, intf, path, instance, bpf_filter))
        for cap in captures:
            cap.wait_ready()
        time.sleep(0.05)   # the "listening" line precedes the socket being fully armed by a hair
    except BaseException:
        for cap in captures:
            cap.stop()
        raise
    return captures
