"""Which clock a run is on, as the process running it sees it.

On the real clock startlab runs on the host and its timing is as good as the host's: it is
calibrated, monitored and flagged (machine/host.py, links/hostfit.py). On the virtual clock
the same code runs inside a guest under QEMU's instruction-counted time (machine/vm/icount.py):
timers fire exactly, so there is nothing to calibrate or monitor, but the guest's CPU is
finite, so what a run can exceed is its CPU. The host writes the clock's record into the
bundle the guest boots with; STARTLAB_CLOCK_FILE names it there.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

REAL = "real"
VIRTUAL = "virtual"
CHOICES = (REAL, VIRTUAL)
# A run whose guest CPU was busier than this was limited by it (measured in guest time, so
# the verdict is the same on every host): the emulated path then is not the declared one.
SATURATED_BUSY = 0.9


@lru_cache(maxsize=1)
def record() -> dict:
    """The clock's record for meta.json: {"clock": "real"}, or the virtual clock's shift,
    seed, QEMU, machine, kernel, image and bundle (machine/vm/icount.make_bundle)."""
    path = os.environ.get("STARTLAB_CLOCK_FILE")
    if not path:
        return {"clock": REAL}
    return {"clock": VIRTUAL, **json.loads(Path(path).read_text())}


def is_virtual() -> bool:
    return record()["clock"] == VIRTUAL


def cpu_times(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs. In a guest these count guest time: on the virtual
    clock they are exact."""
    fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
    total = sum(fields[:8])                                         # guest time is inside user
    return total - idle, total


USER_HZ = os.sysconf("SC_CLK_TCK")


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(busy / total, 4) if total > 0 else None


def guest_cpu(before: tuple[int, int], after: tuple[int, int]) -> dict:
    """The guest CPU over an interval: busy fraction and busy seconds. At icount shift 0 one
    instruction is one ns, so busy seconds × 1e9 is the instructions the guest executed."""
    return {"busy_fraction": busy_fraction(before, after), "busy_s": round((after[0] - before[0]) / USER_HZ, 2),
            "seconds": round((after[1] - before[1]) / USER_HZ, 2)}


def interrupts(path: Path = Path("/proc/interrupts")) -> dict[str, int]:
    """Every interrupt source's count over all CPUs, keyed by its row and what the row names
    ("24 PCI-MSI 49153-edge virtio1-config", "LOC Local timer interrupts")."""
    lines = path.read_text().splitlines()
    ncpu = len(lines[0].split()) if lines else 0
    counts: dict[str, int] = {}
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        fields = rest.split()
        n = 0
        while n < min(ncpu, len(fields)) and fields[n].isdigit():
            n += 1
        counts[" ".join([label.strip(), *fields[n:]])] = sum(int(f) for f in fields[:n])
    return counts


def interrupt_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The interrupts a run took, by source (those it took any of). On the virtual clock two
    boots of the same run take the same ones: where runs differ, the first source that
    differs names what reached the guest at a time the host decided."""
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


def saturation_flags(busy: float | None) -> list[str]:
    """A run's flag when the guest's CPU, not the path, set its pace."""
    if busy is None or busy < SATURATED_BUSY:
        return []
    return [f"the guest's CPU was busy {busy:.0%} of the run (≥ {SATURATED_BUSY:.0%}): the virtual "
            "clock's CPU, not the path, may have set the pace; use a lower-rate profile"]


def failure_note(cpu0: tuple[int, int]) -> str:
    """What a failed run's message adds on the virtual clock: the guest CPU's busy fraction
    from the run's start (`cpu0`) to its failure. A run whose CPU was saturated failed for
    want of instructions (a long flow that never fills a fast link), not because of its path."""
    if not is_virtual():
        return ""
    busy = busy_fraction(cpu0, cpu_times())
    if busy is None:
        return ""
    note = f" (the guest's CPU was busy {busy:.0%} of the run until it failed"
    if busy >= SATURATED_BUSY:
        note += ": saturated, so the virtual clock's CPU, not the path, may have set the pace; use a lower-rate profile"
    return note + ")"
