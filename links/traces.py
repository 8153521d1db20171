"""Delivery-opportunity traces in mahimahi's format: read, write, summarise and generate.

A trace is one line per delivery opportunity of one MTU-sized packet, the number being
the millisecond at which it occurs; the file loops, its last value being the period
(mahimahi's `mm-link`, and startlab's delay line with `--trace-D`). startlab generates
its own traces from stated, seeded models; users point a profile at files they have.

Models (rates in bit/s of MTU-sized packets, `mtu` bytes each):
- constant: evenly spread opportunities, exactly the rate over every millisecond boundary;
- poisson: opportunities of a Poisson process of the rate (exponential gaps), as the
  Pantheon calibrated emulators' "Poisson" paths;
- onoff: a two-state Markov chain with exponential sojourns (mean_on_s, mean_off_s),
  a Poisson process of rate_on_bps while on, of rate_off_bps (default 0) while off.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from config import yamlfile
from config.yamlfile import Fields
from machine.errors import UserError

# The bytes of one opportunity's packet (an MTU of IP), as mm-link counts them.
DEFAULT_MTU = 1500
TRACES_DIR = Path(__file__).with_name("traces")
CATALOGUE_FILE = TRACES_DIR / "catalogue.yaml"


@dataclass(frozen=True)
class Trace:
    """Opportunity times in ms within one period; `period_ms` is the last one."""
    opportunities_ms: tuple[int, ...]

    @property
    def period_ms(self) -> int:
        return self.opportunities_ms[-1]

    def mean_bps(self, packet_bytes: int = DEFAULT_MTU) -> float:
        """The rate it offers in packets of `packet_bytes` (an IP packet, or a frame)."""
        return len(self.opportunities_ms) * packet_bytes * 8 / (self.period_ms / 1e3)

    def rates_bps(self, window_ms: int, packet_bytes: int = DEFAULT_MTU) -> np.ndarray:
        """The rate the trace offers in each `window_ms` window of one period."""
        counts = np.bincount(np.asarray(self.opportunities_ms) // window_ms,
                             minlength=-(-self.period_ms // window_ms))
        return counts * packet_bytes * 8 / (window_ms / 1e3)

    def text(self) -> str:
        return "".join(f"{ms}\n" for ms in self.opportunities_ms)


def parse(text: str, where: str = "trace") -> Trace:
    """mahimahi's format; errors name the file and line."""
    words = text.split()
    if words and "".join(words).isascii() and "".join(words).isdigit():
        # The common case at numpy's speed (a trace has ~10^5-10^6 lines); anything the fast
        # path does not accept is parsed line by line below, for the error's line.
        times = np.array(words, dtype=np.int64)
        if times[-1] != 0 and (len(times) < 2 or bool(np.all(np.diff(times) >= 0))):
            return Trace(tuple(times.tolist()))
    return _parse_lines(text, where)


def _parse_lines(text: str, where: str) -> Trace:
    times: list[int] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if not line.isdigit():
            raise UserError(f"{where}, line {n}: {line!r} is not a whole number of milliseconds")
        ms = int(line)
        if times and ms < times[-1]:
            raise UserError(f"{where}, line {n}: {ms} ms comes before the previous line's {times[-1]} ms")
        times.append(ms)
    if not times:
        raise UserError(f"{where}: the trace has no delivery opportunity")
    if times[-1] == 0:
        raise UserError(f"{where}: the last opportunity is at 0 ms: the trace has no period to loop over")
    return Trace(tuple(times))


def read(path: Path) -> Trace:
    """A trace file, parsed once per process while it is unchanged (every profile list reads
    every profile's traces)."""
    try:
        st = Path(path).stat()
        return _read(str(path), st.st_mtime_ns, st.st_size)
    except OSError as e:
        raise UserError(f"cannot read the trace {path}: {e.strerror}") from None


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, size: int) -> Trace:
    return parse(Path(path).read_text(), path)


def _close(ms: list[int], period_ms: int) -> Trace:
    """A period of `period_ms`: mm-link's period is the last line, so the last opportunity
    moves to the period's last ms (or one is put there if there is none)."""
    ms = sorted(m for m in ms if 0 <= m <= period_ms)
    if ms and ms[-1] != period_ms:
        ms[-1] = period_ms
    return Trace(tuple(ms or [period_ms]))


def _from_times(times_s: np.ndarray, duration_s: float) -> Trace:
    """Opportunities at `times_s` (seconds), each in the whole ms it falls in (1-based, as
    an opportunity in the first ms is at 1), over a period of the duration."""
    period_ms = int(round(duration_s * 1e3))
    return _close([int(m) for m in np.floor(np.asarray(times_s) * 1e3) + 1], period_ms)


def constant(rate_bps: float, duration_s: float, mtu: int = DEFAULT_MTU) -> Trace:
    """Opportunities at `rate_bps` spread evenly: at each ms, as many as have fallen due."""
    per_ms = rate_bps / (mtu * 8) / 1e3
    period_ms = int(round(duration_s * 1e3))
    due = np.floor(np.arange(1, period_ms + 1) * per_ms + 1e-9).astype(np.int64)
    counts = np.diff(np.concatenate(([0], due)))
    return _close([int(t) for t in np.repeat(np.arange(1, period_ms + 1), counts)], period_ms)


def poisson(rate_bps: float, duration_s: float, seed: int, mtu: int = DEFAULT_MTU) -> Trace:
    """A Poisson process of `rate_bps` in MTU-sized packets."""
    rng = np.random.default_rng(seed)
    return _from_times(_poisson_times(rng, rate_bps / (mtu * 8), 0.0, duration_s), duration_s)


def onoff(rate_on_bps: float, mean_on_s: float, mean_off_s: float, duration_s: float, seed: int,
          rate_off_bps: float = 0.0, mtu: int = DEFAULT_MTU) -> Trace:
    """A two-state Markov-modulated Poisson process, starting in the on state."""
    rng = np.random.default_rng(seed)
    t, on, parts = 0.0, True, []
    while t < duration_s:
        end = min(duration_s, t + rng.exponential(mean_on_s if on else mean_off_s))
        rate = (rate_on_bps if on else rate_off_bps) / (mtu * 8)
        parts.append(_poisson_times(rng, rate, t, end))
        t, on = end, not on
    return _from_times(np.concatenate(parts) if parts else np.array([]), duration_s)


def offered_bytes(trace: Trace, start_ms: float, end_ms: float, packet_bytes: int = DEFAULT_MTU) -> int:
    """Bytes the looping trace offers in [start_ms, end_ms), in ms from its start: loop k
    has an opportunity at k × period + each line's value."""
    period = trace.period_ms
    opp = np.asarray(trace.opportunities_ms, dtype=np.int64)
    n, at_period = len(opp), int(np.sum(opp == period))

    def before(t: float) -> int:       # opportunities in [0, t)
        if t <= 0:
            return 0
        loops, rest = divmod(t, period)
        # every earlier loop whole, but the previous loop's last line (at exactly t) not yet
        whole = int(loops) * n - (at_period if loops >= 1 and rest == 0 else 0)
        return whole + int(np.searchsorted(opp, rest, side="left"))
    return (before(end_ms) - before(start_ms)) * packet_bytes


def window_rates_bps(trace: Trace, window_ms: float, packet_bytes: int = DEFAULT_MTU) -> np.ndarray:
    """The rate offered in each `window_ms` window that starts on a whole ms of one period
    (every start, looping): what a flow starting at a random moment may meet."""
    period = trace.period_ms
    counts = np.bincount(np.asarray(trace.opportunities_ms) % period, minlength=period)
    w = max(1, int(round(window_ms)))
    cum = np.concatenate(([0], np.cumsum(np.concatenate([counts] * (w // period + 2)))))
    sums = cum[np.arange(period) + w] - cum[np.arange(period)]
    return sums * packet_bytes * 8 / (w / 1e3)


@dataclass(frozen=True)
class TraceClock:
    """A running trace link's trace against the host's CLOCK_MONOTONIC (Python's
    time.monotonic()): what it offers between two moments of a run."""
    trace: Trace
    epoch_s: float            # when the trace's ms 0 was, on CLOCK_MONOTONIC
    packet_bytes: int         # what one opportunity carries (the line's opportunity bytes)

    def offered_bytes(self, t0: float, t1: float) -> int:
        return offered_bytes(self.trace, (t0 - self.epoch_s) * 1e3, (t1 - self.epoch_s) * 1e3, self.packet_bytes)

    def rate_bps(self, t0: float, t1: float) -> float:
        return self.offered_bytes(t0, t1) * 8 / (t1 - t0) if t1 > t0 else 0.0


def departures_against(trace: Trace, left_s: np.ndarray, backlogged: tuple[float, float],
                       window_s: float = 0.1, horizon_s: float = 0.1) -> dict:
    """How full-size frames that left a trace link follow its opportunities.

    `left_s`: when each frame left the queue, in seconds from the trace's start (a capture
    after the link, less its delay). Frames are taken in the order they left, and each is
    matched to the latest opportunity at or before it (to the millisecond) that no earlier
    frame used, at most `horizon_s` back; its lateness is the time since. A frame with no
    such opportunity was `overdrawn`: it left before its own (early), or the link sent more
    than the trace allows (found where the opportunities before it were used, as while the
    queue is backlogged; an idle link's unused ones could hide it). Frames a stall held back
    and released together take the opportunities they missed, so they read as late, not
    early. Within `backlogged` (start, end) seconds, when the queue never ran empty, each
    `window_s` window carries as many frames as the trace has opportunities in it (windows
    start on whole ms, as opportunities do)."""
    left = np.sort(np.asarray(left_s, dtype=float))
    frame_ms = np.floor(left * 1e3 + 1e-6).astype(np.int64)
    horizon_ms = int(math.ceil(horizon_s * 1e3))
    matched = frame_ms.copy()                     # an unmatched frame is counted in its own ms
    late: list[float] = []
    overdrawn = 0
    if len(left):
        slots = _looped_ms(trace, int(frame_ms[0]) - horizon_ms, int(frame_ms[-1]))
        free = _LatestFree(len(slots))
        at = np.searchsorted(slots, frame_ms, side="right") - 1
        lowest = np.searchsorted(slots, frame_ms - horizon_ms)
        for j in range(len(left)):
            k = free.take(int(at[j]), int(lowest[j]))
            if k < 0:
                overdrawn += 1
                continue
            matched[j] = slots[k]
            late.append((left[j] - slots[k] / 1e3) * 1e6)
    n = int(round((backlogged[1] - backlogged[0]) / window_s))
    edges = np.round((backlogged[0] + window_s * np.arange(n + 1)) * 1e3) - 0.5      # in ms
    offered_ms = _looped_ms(trace, math.floor(edges[0]), math.ceil(edges[-1]))
    sent = np.histogram(matched, bins=edges)[0]
    offered = np.histogram(offered_ms, bins=edges)[0]
    return {"frames": int(len(left)), "overdrawn": overdrawn,
            "lateness_p50_us": float(np.percentile(late, 50)) if late else None,
            "lateness_p99_us": float(np.percentile(late, 99)) if late else None,
            "lateness_max_us": float(max(late)) if late else None,
            "windows": n, "window_mismatch_max": int(np.max(np.abs(sent - offered))) if n else 0,
            "window_offered_max": int(offered.max()) if n else 0}


def _looped_ms(trace: Trace, first_ms: int, last_ms: int) -> np.ndarray:
    """Every opportunity, in ms from the trace's start as the file loops, of the loops that
    cover [first_ms, last_ms] (one more each side), sorted; the last line is the next loop's 0."""
    period = trace.period_ms
    loops = np.arange(first_ms // period - 1, last_ms // period + 2)
    opp = np.asarray(trace.opportunities_ms, dtype=np.int64)
    return np.sort((opp[None, :] + loops[:, None] * period).ravel())


class _LatestFree:
    """Slots 0..n-1, each used once: the latest free slot at or below an index in
    near-constant time. A disjoint-set forest over nodes 0..n, node i + 1 for slot i and node
    0 a root that stands for "none"; a used slot's node points at the node below it."""

    def __init__(self, n: int):
        self.parent = list(range(n + 1))

    def take(self, i: int, lowest: int) -> int:
        """Use and return the latest free slot in [lowest, i], or -1 if there is none."""
        node = i + 1
        root = node
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[node] != root:                 # path compression
            self.parent[node], node = root, self.parent[node]
        if root == 0 or root - 1 < lowest:
            return -1
        self.parent[root] = root - 1
        return root - 1


def _poisson_times(rng: np.random.Generator, per_s: float, start: float, end: float) -> np.ndarray:
    if per_s <= 0 or end <= start:
        return np.array([])
    n = rng.poisson(per_s * (end - start))
    return np.sort(rng.uniform(start, end, n))


MODELS: dict[str, Callable[..., Trace]] = {"constant": constant, "poisson": poisson, "onoff": onoff}


# -- the catalogue of startlab's own traces (links/traces/catalogue.yaml) ------------------

# Each model's fields in the catalogue: (field, converted keyword, factor); rates in Mbit/s.
MODEL_FIELDS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "constant": (("rate_mbps", "rate_bps", 1e6), ("duration_s", "duration_s", 1.0)),
    "poisson": (("rate_mbps", "rate_bps", 1e6), ("duration_s", "duration_s", 1.0), ("seed", "seed", 1)),
    "onoff": (("rate_on_mbps", "rate_on_bps", 1e6), ("mean_on_s", "mean_on_s", 1.0),
              ("mean_off_s", "mean_off_s", 1.0), ("duration_s", "duration_s", 1.0), ("seed", "seed", 1),
              ("rate_off_mbps", "rate_off_bps", 1e6)),
}
OPTIONAL_FIELDS = {"rate_off_mbps": 0.0}


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    model: str
    params: dict[str, Any]        # the model function's keywords
    source: str

    def generate(self) -> Trace:
        return MODELS[self.model](**self.params)

    @property
    def path(self) -> Path:
        return TRACES_DIR / f"{self.name}.trace"


def catalogue(path: Path = CATALOGUE_FILE) -> dict[str, CatalogueEntry]:
    top = Fields(path, yamlfile.load(path), "")
    top.unknown({"format", "traces"})
    table = top.sub("traces")
    entries = {}
    for name in table.data:
        f = table.sub(name)
        model = f.text("model", choices=list(MODELS))
        fields = MODEL_FIELDS[model]
        f.unknown({"model", "source", *(k for k, _, _ in fields)})
        params = {}
        for key, keyword, factor in fields:
            integer = key == "seed"
            value = f.number(key, OPTIONAL_FIELDS.get(key), low=0, high=2 ** 32 if integer else 1e6, integer=integer)
            params[keyword] = int(value) if integer else value * factor
        entries[name] = CatalogueEntry(name, model, params, f.text("source", ""))
    return entries


def write_catalogue(path: Path = CATALOGUE_FILE) -> list[Path]:
    """(Re)generate every catalogue trace into links/traces/."""
    written = []
    for entry in catalogue(path).values():
        entry.path.write_text(entry.generate().text())
        written.append(entry.path)
    return written


if __name__ == "__main__":
    for p in write_catalogue():
        t = read(p)
        print(f"{p}: {len(t.opportunities_ms)} opportunities over {t.period_ms} ms, {t.mean_bps() / 1e6:.3f} Mbit/s")
