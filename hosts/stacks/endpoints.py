"""A stack's server and client on a network's nodes: started, waited for, and read back.

`popen(node, argv, **kw)` starts a process on a node and registers it with whoever owns
the network (QuicNet.popen, a run's session), so every process is stopped by PID."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

from hosts.stacks.contract import Fetched, Stack, Tls

Popen = Callable[..., subprocess.Popen]


def bound(node, port: int) -> bool:
    """Is a UDP socket bound to `port` in the node's namespace?"""
    return bool(node.cmd(f"ss -Hlun 'sport = :{port}'").strip())


def start_server(popen: Popen, node, stack: Stack, ip: str, port: int, cc: str, tls: Tls,
                 qlog_dir: Optional[Path], workdir: Path, timeout_s: float = 10.0) -> subprocess.Popen:
    """The stack's server on ip:port, returned once its port is bound."""
    log = workdir / f"{stack.name}-server.log"
    proc = popen(node, stack.server_argv(ip, port, cc, tls, qlog_dir, workdir),
                 stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    deadline = time.monotonic() + timeout_s
    while not bound(node, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{stack.name}'s server did not bind {ip}:{port} "
                               f"(exit {proc.poll()}): {log.read_text(errors='replace')[-400:]}")
        time.sleep(0.02)
    return proc


def fetch(popen: Popen, node, stack: Stack, ip: str, port: int, size: int, cc: str,
          qlog_dir: Optional[Path], workdir: Path, timeout_s: float) -> Fetched:
    """One object of `size` bytes fetched by the stack's client."""
    proc = popen(node, stack.client_argv(ip, port, size, cc, qlog_dir, workdir, timeout_s),
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return stack.fetched(out or "", proc.returncode, size, workdir)
