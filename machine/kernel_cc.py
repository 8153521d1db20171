"""Congestion controls a child network namespace may choose.

A namespace other than the root one may only make a congestion control its default if
the root namespace lists it in net.ipv4.tcp_allowed_congestion_control (the kernel
answers EPERM otherwise, even for root). startlab adds what a variant needs, records
the original list in the instance's registry entry, and teardown or `clean` puts it back.
"""
from __future__ import annotations

from pathlib import Path

from machine.registry import Instance

ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
KEY = "net.ipv4.tcp_allowed_congestion_control"


def allow_congestion_control(name: str, instance: Instance) -> None:
    current = ALLOWED.read_text().split()
    if name in current:
        return
    instance.add_sysctl_restore(KEY, " ".join(current))
    ALLOWED.write_text(" ".join(current + [name]))
