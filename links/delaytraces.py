"""Delay traces: a propagation delay that steps over time, as a LEO satellite path's does.

A delay trace file (`.delays`) has one line per step, `DURATION_MS EXTRA_US`: for that long,
every frame entering the path's delay gets that much more than the profile's fixed one-way
delay. `#` starts a comment line; the file loops. The delay line replays it per direction
(`--delay-trace-D`, links/delayline/src/delaytrace.rs) from an epoch startlab gives it, so
the extra delay at any moment of a run is known here and recorded with the run. A step down
never reorders: frames wait behind their predecessors, as on a FIFO path.

startlab generates its own delay traces from stated, seeded models, listed in
links/traces/delays.yaml (`python -m links.delaytraces` writes them):
- slots: the extra delay is redrawn, uniformly in [low_ms, high_ms], at the start of every
  `slot_s` slot, each direction on its own: Starlink's terminals are reassigned to satellites
  every 15 s, and the path's delay steps at those boundaries.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from config import yamlfile
from config.yamlfile import Fields
from machine.errors import UserError

TRACES_DIR = Path(__file__).with_name("traces")
CATALOGUE_FILE = TRACES_DIR / "delays.yaml"
MAX_EXTRA_US = 10_000_000            # as the delay line: 10 s


@dataclass(frozen=True)
class DelayTrace:
    """Steps of (duration in ms, extra one-way delay in µs), looping."""
    steps: tuple[tuple[int, int], ...]

    @property
    def period_ms(self) -> int:
        return sum(d for d, _ in self.steps)

    @functools.cached_property
    def _starts_ms(self) -> list[int]:
        starts, at = [], 0
        for duration, _ in self.steps:
            starts.append(at)
            at += duration
        return starts

    def extra_ms(self, t_s: float) -> float:
        """The extra one-way delay `t_s` seconds after the epoch (before it: the first step's)."""
        within = (max(t_s, 0.0) * 1000.0) % self.period_ms
        return self.steps[bisect.bisect_right(self._starts_ms, within) - 1][1] / 1000.0

    def next_step_s(self, t_s: float) -> float:
        """Seconds from `t_s` (after the epoch) to the next step boundary."""
        t_ms = max(t_s, 0.0) * 1000.0
        loops, within = divmod(t_ms, self.period_ms)
        i = bisect.bisect_right(self._starts_ms, within)
        boundary = self._starts_ms[i] if i < len(self.steps) else self.period_ms
        return (loops * self.period_ms + boundary - t_ms) / 1000.0

    @property
    def low_ms(self) -> float:
        return min(us for _, us in self.steps) / 1000.0

    @property
    def high_ms(self) -> float:
        return max(us for _, us in self.steps) / 1000.0

    def text(self, header: str = "") -> str:
        lines = [f"# {line}" for line in header.splitlines()]
        return "".join(f"{line}\n" for line in [*lines, *(f"{d} {us}" for d, us in self.steps)])


def parse(text: str, where: str = "delay trace") -> DelayTrace:
    """The format above; errors name the file and line."""
    steps = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        try:
            duration, extra = (int(w) for w in words) if len(words) == 2 else (None, None)
        except ValueError:
            duration = extra = None
        if duration is None or duration <= 0 or not 0 <= extra <= MAX_EXTRA_US:
            raise UserError(f"{where}, line {number}: {line!r} is not `DURATION_MS EXTRA_US` "
                            f"(a duration above 0 ms, an extra delay in 0..{MAX_EXTRA_US} µs)")
        steps.append((duration, extra))
    if not steps:
        raise UserError(f"{where}: no step (lines `DURATION_MS EXTRA_US`)")
    return DelayTrace(tuple(steps))


def read(path: Path) -> DelayTrace:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UserError(f"cannot read the delay trace {path}: {e.strerror}") from None
    return parse(text, str(path))


def slots(slot_s: float, low_ms: float, high_ms: float, duration_s: float, seed: int) -> DelayTrace:
    """The extra delay redrawn uniformly in [low_ms, high_ms] at every slot's start."""
    if not 0 <= low_ms <= high_ms:
        raise UserError(f"slots: need 0 ≤ low_ms ≤ high_ms, got {low_ms} and {high_ms}")
    n = max(1, round(duration_s / slot_s))
    draws = np.random.default_rng(seed).uniform(low_ms, high_ms, n)
    return DelayTrace(tuple((round(slot_s * 1000), round(float(v) * 1000)) for v in draws))


# -- the catalogue of startlab's own delay traces (links/traces/delays.yaml) ---------------

@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    params: dict
    source: str

    def generate(self) -> DelayTrace:
        return slots(**self.params)

    @property
    def path(self) -> Path:
        return TRACES_DIR / f"{self.name}.delays"


def catalogue(path: Path = CATALOGUE_FILE) -> dict[str, CatalogueEntry]:
    top = Fields(path, yamlfile.load(path), "")
    top.unknown({"format", "delays"})
    table = top.sub("delays")
    entries = {}
    for name in table.data:
        f = table.sub(name)
        f.unknown({"model", "slot_s", "low_ms", "high_ms", "duration_s", "seed", "source"})
        f.text("model", choices=["slots"])
        params = {"slot_s": f.number("slot_s", low=0.001, high=3600), "low_ms": f.number("low_ms", low=0, high=10000),
                  "high_ms": f.number("high_ms", low=0, high=10000), "duration_s": f.number("duration_s", low=0.001, high=86400),
                  "seed": int(f.number("seed", low=0, high=2 ** 32, integer=True))}
        entries[name] = CatalogueEntry(name, params, f.text("source", ""))
    return entries


def write_catalogue(path: Path = CATALOGUE_FILE) -> list[Path]:
    """(Re)generate every catalogue delay trace into links/traces/."""
    written = []
    for entry in catalogue(path).values():
        header = f"startlab delay trace {entry.name}: DURATION_MS EXTRA_US per line, looping " \
                 f"(links/delaytraces.py, links/traces/delays.yaml)\n{entry.source}"
        entry.path.write_text(entry.generate().text(header))
        written.append(entry.path)
    return written


if __name__ == "__main__":
    for p in write_catalogue():
        t = read(p)
        print(f"{p}: {len(t.steps)} steps over {t.period_ms / 1000:g} s, extra {t.low_ms:g}–{t.high_ms:g} ms")
