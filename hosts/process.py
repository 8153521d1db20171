"""Processes started inside host namespaces, recorded so they are always stopped by PID."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from machine import registry


class NodeProcess:
    """A program running in a Mininet node, registered with the instance that owns it."""

    def __init__(self, node, argv: list[str], instance: registry.Instance, what: str,
                 log_path: Path | None = None, stdout=None):
        self.what = what
        self.node_name = node.name
        self.log_path = log_path
        self._log = open(log_path, "wb") if log_path is not None else None
        out = stdout if stdout is not None else (self._log or subprocess.DEVNULL)
        self.popen = node.popen(argv, stdout=out, stderr=subprocess.STDOUT if self._log else subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        self.pid = self.popen.pid
        self.start = registry.process_start_time(self.pid)
        instance.add_process(self.pid, f"{what} in {node.name}")

    def wait(self, timeout: float) -> int | None:
        """Exit code, or None if still running after `timeout` seconds."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float = 2.0) -> int | None:
        if self.popen.poll() is None:
            registry.terminate(self.pid, self.start, grace_s)
        try:
            rc = self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            rc = None
        if self._log:
            self._log.close()
            self._log = None
        return rc

    def signal(self, signum: int) -> None:
        """Send `signum` to the process, if it is still the one we started."""
        if self.popen.poll() is None and registry.process_start_time(self.pid) == self.start:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def output(self) -> str:
        if self.log_path is None or not Path(self.log_path).exists():
            return ""
        return Path(self.log_path).read_text(errors="replace")


def wait_until(predicate, timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll `predicate` until it is true or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
