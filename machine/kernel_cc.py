"""Congestion controls a child network namespace may choose.

A namespace other than the root one may only make a congestion control its default if
the root namespace lists it in net.ipv4.tcp_allowed_congestion_control (the kernel
answers EPERM otherwise, even for root). startlab adds what a variant needs and records
the name in the instance's registry entry; teardown or `clean` takes a name out again when
no other instance of ours still lists it. Names the machine allowed before are never
recorded, so never removed. (A saved copy of the list would not do: instances running at
once, lanes, would restore each other's additions or remove what the other still uses.)
"""
from __future__ import annotations

from machine.registry import ALLOWED_CC as ALLOWED
from machine.registry import Instance, allowed_cc_lock, load_instances


def allow_congestion_control(name: str, instance: Instance) -> None:
    with allowed_cc_lock():
        current = ALLOWED.read_text().split()
        ours = {n for inst in load_instances() for n in inst.allowed_cc}
        if name in current and name not in ours:
            return                      # the machine's own: not ours to add or remove
        instance.add_allowed_cc(name)
        if name not in current:
            ALLOWED.write_text(" ".join(current + [name]))
