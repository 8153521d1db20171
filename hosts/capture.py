"""Packet captures with tcpdump: headers only, started before traffic, flushed at the end."""
from __future__ import annotations

import re
import time
from pathlib import Path

from hosts.process import NodeProcess, wait_until

SNAPLEN = 128          # Ethernet + IPv4 + TCP with options fits; payload is not needed


class Capture:
    """One tcpdump on one interface of one node, writing `path`."""

    def __init__(self, node, intf: str, path: Path, instance, bpf_filter: str = "tcp"):
        self.path = Path(path)
        self.log = self.path.with_suffix(".log")
        self.proc = NodeProcess(node, ["tcpdump", "-i", intf, "-s", str(SNAPLEN), "-n", "-B", "16384",
                                       "--immediate-mode", "-U", "-w", str(self.path), bpf_filter],
                                instance, f"tcpdump {intf}", log_path=self.log)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        if not wait_until(lambda: "listening on" in self.proc.output() or not self.proc.running(), timeout_s):
            raise RuntimeError(f"tcpdump on {self.path.name} did not start: {self.proc.output()[-300:]}")
        if not self.proc.running():
            raise RuntimeError(f"tcpdump for {self.path.name} exited: {self.proc.output()[-300:]}")

    def stop(self) -> dict:
        """Stop and return tcpdump's own counters (a capture that dropped packets is not exact)."""
        self.proc.stop(grace_s=5.0)
        text = self.proc.output()
        def count(label: str) -> int | None:
            match = re.search(rf"(\d+) packets? {label}", text)
            return int(match.group(1)) if match else None
        return {"file": self.path.name, "captured": count("captured"),
                "dropped_by_kernel": count("dropped by kernel")}


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
