"""The web traffic model of the Quick-Start simulations (Allman, Floyd, Sarolahti §4), as
ns-2's web traffic generator (WebTraf) draws it, and the hosts' access delays.

A session is a client fetching pages from one server; sessions arrive open loop: `count`
Poisson arrivals over a span (uniform order statistics), so the offered load is about
stationary over a run. A session has `pages` pages; the next page starts `interpage_s`
(exponential mean) after the previous page started, whether or not it finished (WebTraf
schedules pages by timer). A page has `objects` objects (the paper: "an average page size of
10 objects"; this model draws it as 1 + Poisson(objects − 1), so it is never 0), each started
an exponential inter-object time after the previous one (ns-2's default interObj; the paper
does not give it), each on its own TCP connection (HTTP/1.0-like). Object sizes are ParetoII
(Lomax) in packets, with the paper's mean and shape (400 packets, 1.002; 60 for Figs. 4-5),
rounded up to whole packets.

A shape of 1.002 puts almost all of the mean in a tail a run can never sample: the scale is
mean × (shape − 1) = 0.8 packets, the median object is one packet, and the mean of objects
capped at c packets is about 0.8 · ln(1 + c / 0.8) (8 packets for c = 20,000). ns-2 drew
such objects uncapped, and a 150 s run simply never finished its largest ones; an emulated
run must end, so objects are capped at `max_object_pkts` (the run's model and its capped
mean are recorded, the cap's share of objects too).

Access delays: each end host gets a one-way access-link delay, exponential with mean
`access_mean_ms`, redrawn above `access_max_ms` (the paper: mean 12 ms, maximum 110 ms,
"a range of round-trip times that roughly matches those from measurements", after Floyd &
Kohler, HotNets 2002, whose exact process it does not give), or uniform up to
`access_max_ms` where a figure wants a narrow range of RTTs (§6.2, Fig. 10: 80-120 ms). A pair's base RTT is the core's
RTT plus twice both hosts' access delays, applied in the core, never on an end host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WebModel:
    pages: int = 30
    interpage_s: float = 0.8
    objects: float = 10.0
    interobject_s: float = 0.05
    object_mean_pkts: float = 400.0
    object_shape: float = 1.002
    max_object_pkts: int = 20000

    @property
    def scale_pkts(self) -> float:
        """The ParetoII (Lomax) scale that gives the configured mean: mean × (shape − 1)."""
        return self.object_mean_pkts * (self.object_shape - 1.0)

    def capped_mean_pkts(self) -> float:
        """E[min(ceil(X), cap)] of the object size in packets (numerically, the ceiling
        adds between 0 and 1 packet: counted exactly by summing the survival function)."""
        k = np.arange(0, self.max_object_pkts, dtype=float)
        return float(np.sum((1.0 + k / self.scale_pkts) ** -self.object_shape))


@dataclass(frozen=True)
class Fetch:
    """One object fetch: when (s from the run's start), which session, page and object, and its size."""
    t: float
    session: int
    page: int
    obj: int
    pkts: int


def object_sizes(model: WebModel, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` ParetoII object sizes in whole packets, capped at max_object_pkts."""
    u = 1.0 - rng.random(n)                               # (0, 1]
    x = model.scale_pkts * (u ** (-1.0 / model.object_shape) - 1.0)
    return np.minimum(np.maximum(1, np.ceil(x)), model.max_object_pkts).astype(np.int64)


def session_starts(count: int, span_s: float, seed: int) -> np.ndarray:
    """Arrival times of `count` sessions over [0, span_s): Poisson arrivals given their
    number are uniform order statistics."""
    rng = np.random.default_rng([seed, 0])
    return np.sort(rng.uniform(0.0, span_s, count)) if span_s > 0 else np.zeros(count)


def sessions(model: WebModel, count: int, span_s: float, seed: int) -> list[Fetch]:
    """The fetches of `count` sessions arriving over [0, span_s), in time order,
    deterministic per seed."""
    rng = np.random.default_rng([seed, 1])
    out: list[Fetch] = []
    starts = session_starts(count, span_s, seed)
    for s in range(count):
        t_page = float(starts[s])
        for p in range(model.pages):
            if p:
                t_page += float(rng.exponential(model.interpage_s))
            n_obj = 1 + int(rng.poisson(max(0.0, model.objects - 1.0)))
            sizes = object_sizes(model, rng, n_obj)
            t_obj = t_page
            for o in range(n_obj):
                if o:
                    t_obj += float(rng.exponential(model.interobject_s))
                out.append(Fetch(round(t_obj, 6), s, p, o, int(sizes[o])))
    out.sort(key=lambda f: f.t)
    return out


@dataclass(frozen=True)
class Transfer:
    """One FTP transfer of a session: when (s from the run's start) and which session."""
    t: float
    session: int


def ftp_transfers(model: WebModel, count: int, span_s: float, per_session: int, seed: int) -> list[Transfer]:
    """`per_session` FTP transfers per session at uniformly random times within the
    session's mean length from its start (the paper: "ten FTP transfers ... starting at
    random times" per web session), in time order."""
    rng = np.random.default_rng([seed, 2])
    starts = session_starts(count, span_s, seed)
    length = session_length_s(model)
    out = [Transfer(round(float(starts[s] + rng.uniform(0.0, length)), 6), s)
           for s in range(count) for _ in range(per_session)]
    out.sort(key=lambda t: t.t)
    return out


ACCESS_DISTRIBUTIONS = ("exponential", "uniform")


def access_delays_ms(hosts: int, mean_ms: float, max_ms: float, seed: int, dist: str = "exponential") -> list[float]:
    """One-way access delays of `hosts` hosts: exponential with `mean_ms`, redrawn above
    `max_ms` (§4's paths), or uniform between 0 and `max_ms` (a narrow range of RTTs, as
    §6.2's Fig. 10: 80-120 ms from an 80 ms core and at most 10 ms per host)."""
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        return [round(float(d), 3) for d in rng.uniform(0.0, max_ms, hosts)]
    if dist != "exponential":
        raise ValueError(f"unknown access-delay distribution '{dist}': choose from {', '.join(ACCESS_DISTRIBUTIONS)}")
    out = []
    while len(out) < hosts:
        d = float(rng.exponential(mean_ms))
        if d <= max_ms:
            out.append(round(d, 3))
    return out


def pair_rtt_ms(core_rtt_ms: float, client_access_ms: float, server_access_ms: float) -> float:
    return round(core_rtt_ms + 2.0 * (client_access_ms + server_access_ms), 3)


def session_length_s(model: WebModel) -> float:
    """The mean time from a session's first page to its last page's start."""
    return (model.pages - 1) * model.interpage_s


def arrival_span_s(model: WebModel, duration_s: float) -> float:
    """Sessions arrive over the run less one session's length, so the last ones end in it."""
    return max(0.0, duration_s - session_length_s(model))


def lomax_tail_index(sizes: np.ndarray, above: float) -> float:
    """Hill estimate of the tail index of the sizes above `above` (for tests)."""
    x = np.asarray(sizes, dtype=float)
    x = x[x > above]
    return len(x) / float(np.sum(np.log(x / above))) if len(x) else math.nan
