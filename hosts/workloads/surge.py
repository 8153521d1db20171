"""The SURGE web workload model, as Scharf configures it.

SURGE: P. Barford and M. Crovella, "Generating Representative Web Workloads for Network and
Server Performance Evaluation", ACM SIGMETRICS 1998, pp. 151-160.

Scharf & Strotbek ("Quick-Start TCP for Linux", §4.2 and Table 1) drive lighttpd with the
"surge" generator in two configurations, and this module reproduces both:

==========================  =============================  ==============================
parameter                   "surge default"                "large files"
==========================  =============================  ==============================
ratio base/embedded/loner   0.30 / 0.38 / 0.32             0.30 / 0.38 / 0.32
file popularity             Zipf, 2000 files               uniform, 2000 files
file size                   lognormal body + Pareto tail   lognormal μ = 11.92, σ = 1.0
embedded files per page     Pareto α = 1.245, k = 2        geometric, 1/p = 2
user think time             Pareto α = 1.4, k = 2 s        Pareto α = 1.4, k = 2 s
==========================  =============================  ==============================

Table 1 names the surge-default size law only as "mixed lognormal and Pareto". Its
parameters come from the SURGE paper's summary table: body lognormal μ = 9.357,
σ = 1.318; tail Pareto k = 133 KB, α = 1.1, the tail holding about 7 % of the files.
μ, σ, k and α are SURGE's published values as we know them; the 7 % split is our reading of
the paper's text (the tail begins near 133 KB and holds the largest few percent of files)
and the least certain of the four. Everything it affects is in `SURGE_DEFAULT.file_size`.
We splice the two: the body is the lognormal conditioned below 133 KB and the tail holds
exactly the tail share (a plain mixture with the whole lognormal would put another 3 % of
the files above 133 KB, where they would blur the tail index).

Scharf says a surge-default page is "of the order of 17 kB". These parameters do not give
that: the visited page has a median of about 43 KB and an expectation of 140–570 KB
(10–90 % over file-set seeds), because a base page has at least two embedded files
(~10 on average) and the α = 1.1 tail carries most of the bytes. 17 kB is the size of
one file of the body (median 12 KB, mean below the cut 20 KB), so the paper may mean an
object, not a page, or its surge build may differ from Table 1. We follow Table 1.

How the parts fit where Table 1 is silent (our choices, within SURGE's structure):

* The file set has `file_count` files, split into base documents, embedded objects and
  loners by `kind_shares`. Sizes are drawn independently of kind and popularity and
  rounded to whole bytes (at least one).
* Popularity: every file gets a Zipf weight rank^-s from a random rank (s = 0 is uniform).
  SURGE maps popularity onto files independently of size; so do we.
* Pages: every base file is a page with a fixed set of embedded files (their number
  ⌊Pareto⌋ or geometric from `embedded_per_page`, at most the number of embedded files;
  the files chosen without replacement by popularity among the embedded files; a page
  may therefore share objects with other pages, as real sites do).
  Every loner is a page of one file. Table 1 has 2000 files with only 760 embedded ones
  but on average ~10 embedded objects per base page, so sharing is implied.
* A user visits pages chosen by the popularity of their document and thinks between two
  pages for a Pareto-distributed time (Fig. 8: base document, embedded files, think time).
  SURGE's temporal-locality (stack distance) and active-OFF components are not in Table 1
  and are not modelled: page choices are independent.

Everything is drawn from numpy generators seeded by a `SeedSequence`, so a seed gives the
same file set, the same sessions and byte-identical files. User u's session has its own
streams (spawn keys (1, u, ·)), so adding users never changes the existing users' sessions,
and a longer run only appends pages to each.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

import numpy as np
from scipy import special

FileKind = Literal["base", "embedded", "loner"]
KINDS: tuple[FileKind, ...] = ("base", "embedded", "loner")
NAME_PREFIX = {"base": "b", "embedded": "e", "loner": "l"}
MANIFEST = "surge-manifest.json"


# --- distributions -------------------------------------------------------------------------

@dataclass(frozen=True)
class Lognormal:
    """exp(N(mu, sigma²)); mu and sigma are those of the logarithm (of bytes)."""
    mu: float
    sigma: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(self.mu, self.sigma, n)

    @property
    def mean(self) -> float:
        return math.exp(self.mu + self.sigma ** 2 / 2)

    @property
    def median(self) -> float:
        return math.exp(self.mu)


@dataclass(frozen=True)
class Pareto:
    """P(X > x) = (k/x)^alpha for x ≥ k (the classic Pareto of the SURGE paper)."""
    alpha: float
    k: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # Inverse transform with 1 - U in (0, 1]: never a division by zero.
        return self.k * (1.0 - rng.random(n)) ** (-1.0 / self.alpha)

    def sf(self, x: float) -> float:
        return 1.0 if x <= self.k else (self.k / x) ** self.alpha

    @property
    def mean(self) -> float:
        return math.inf if self.alpha <= 1 else self.alpha * self.k / (self.alpha - 1)

    @property
    def median(self) -> float:
        return self.k * 2 ** (1 / self.alpha)

    def residual_sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The equilibrium residual: the rest of the interval in progress at a random instant.

        Its density is sf(x)/mean: uniform below k (with mass k/mean), and above k
        P(R > x) = (k/x)^(alpha-1) / alpha, a tail of index alpha - 1 (infinite mean for
        alpha < 2). A renewal process started with this first gap is stationary from time 0.
        """
        if self.alpha <= 1:
            raise ValueError("no equilibrium residual for alpha <= 1 (infinite mean)")
        u = rng.random(n)
        head = u < self.k / self.mean
        tail = self.k * np.maximum(self.alpha * (1.0 - u), 1e-300) ** (-1.0 / (self.alpha - 1))
        return np.where(head, u * self.mean, tail)

    def residual_sf(self, x: float) -> float:
        return 1 - x / self.mean if x <= self.k else (self.k / x) ** (self.alpha - 1) / self.alpha


@dataclass(frozen=True)
class LognormalParetoTail:
    """SURGE's hybrid file-size law: a lognormal body below `tail.k`, a Pareto tail above it.

    A size lies in the tail with probability `tail_share`; otherwise it is the body
    lognormal conditioned on being below the cut-off. The two pieces meet at the cut-off,
    so P(size > k) is exactly `tail_share` and every size above k follows the Pareto law:
    the tail index is α wherever one looks above k.
    """
    body: Lognormal
    tail: Pareto
    tail_share: float

    def _body_cdf_at_cut(self) -> float:
        return float(special.ndtr((math.log(self.tail.k) - self.body.mu) / self.body.sigma))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        in_tail = rng.random(n) < self.tail_share
        # Truncated body by inverse transform: a uniform below the body's CDF at the cut.
        u = rng.random(n) * self._body_cdf_at_cut()
        body = np.exp(self.body.mu + self.body.sigma * special.ndtri(np.maximum(u, 1e-300)))
        return np.where(in_tail, self.tail.sample(rng, n), body)

    def sf(self, x: float) -> float:
        if x >= self.tail.k:
            return self.tail_share * self.tail.sf(x)
        below = float(special.ndtr((math.log(x) - self.body.mu) / self.body.sigma)) if x > 0 else 0.0
        return 1.0 - (1.0 - self.tail_share) * below / self._body_cdf_at_cut()

    @property
    def mean(self) -> float:
        b, z = self.body, (math.log(self.tail.k) - self.body.mu) / self.body.sigma
        body_mean = b.mean * float(special.ndtr(z - b.sigma)) / float(special.ndtr(z))
        return (1 - self.tail_share) * body_mean + self.tail_share * self.tail.mean

    @property
    def median(self) -> float:
        if self.tail_share >= 0.5:
            return self.tail.k * (0.5 / self.tail_share) ** (-1 / self.tail.alpha)
        q = 0.5 / (1 - self.tail_share) * self._body_cdf_at_cut()
        return math.exp(self.body.mu + self.body.sigma * float(special.ndtri(q)))


@dataclass(frozen=True)
class ParetoCount:
    """A count ⌊X⌋ with X ~ Pareto(alpha, k): at least ⌊k⌋, heavy-tailed."""
    alpha: float
    k: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.floor(Pareto(self.alpha, self.k).sample(rng, n)).astype(np.int64)

    def sf(self, n: int) -> float:
        """P(count ≥ n)."""
        return Pareto(self.alpha, self.k).sf(n)

    @property
    def mean(self) -> float:
        # E⌊X⌋ = Σ_{n≥1} P(X ≥ n) = ⌊k⌋ + k^α ζ(α, ⌊k⌋ + 1).
        if self.alpha <= 1:
            return math.inf
        lo = math.floor(self.k)
        return lo + self.k ** self.alpha * float(special.zeta(self.alpha, lo + 1))

    @property
    def median(self) -> float:
        return float(math.floor(Pareto(self.alpha, self.k).median))


@dataclass(frozen=True)
class GeometricCount:
    """Geometric on {1, 2, …} with success probability 1/mean (Table 1's "1/p = 2")."""
    mean: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.geometric(1.0 / self.mean, n).astype(np.int64)

    def sf(self, n: int) -> float:
        return 1.0 if n <= 1 else (1 - 1 / self.mean) ** (n - 1)

    @property
    def median(self) -> float:
        return float(max(1, math.ceil(math.log(0.5) / math.log(1 - 1 / self.mean))))


SizeLaw = Union[Lognormal, LognormalParetoTail]
CountLaw = Union[ParetoCount, GeometricCount]


# --- the model -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SurgeModel:
    name: str
    file_count: int
    kind_shares: tuple[float, float, float]   # base, embedded, loner
    zipf_exponent: float                      # popularity ∝ rank^-s; 0 is uniform
    file_size: SizeLaw                        # bytes
    embedded_per_page: CountLaw               # embedded files of a base page
    think_time: Pareto                        # seconds between pages (the user's OFF time)

    def kind_counts(self) -> dict[FileKind, int]:
        """Files per kind, rounded so that they add up to file_count (largest remainder)."""
        raw = [share * self.file_count for share in self.kind_shares]
        counts = [math.floor(r) for r in raw]
        for i in sorted(range(3), key=lambda i: raw[i] - counts[i], reverse=True)[:self.file_count - sum(counts)]:
            counts[i] += 1
        return dict(zip(KINDS, counts))


SURGE_DEFAULT = SurgeModel(
    name="surge-default",
    file_count=2000,
    kind_shares=(0.30, 0.38, 0.32),
    zipf_exponent=1.0,
    file_size=LognormalParetoTail(body=Lognormal(9.357, 1.318), tail=Pareto(1.1, 133_000), tail_share=0.07),
    embedded_per_page=ParetoCount(alpha=1.245, k=2),
    think_time=Pareto(alpha=1.4, k=2.0),
)

LARGE_FILES = SurgeModel(
    name="large-files",
    file_count=2000,
    kind_shares=(0.30, 0.38, 0.32),
    zipf_exponent=0.0,
    file_size=Lognormal(11.92, 1.0),
    embedded_per_page=GeometricCount(mean=2.0),
    think_time=Pareto(alpha=1.4, k=2.0),
)

MODELS: dict[str, SurgeModel] = {m.name: m for m in (SURGE_DEFAULT, LARGE_FILES)}


def model(name: str) -> SurgeModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown web model {name!r}: one of {', '.join(MODELS)}") from None


# --- the file set ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WebFile:
    name: str            # file name in the docroot; the URL path is "/" + name
    size: int            # bytes
    kind: FileKind
    weight: float        # share of requests under the popularity law (all files sum to 1)


@dataclass(frozen=True)
class Page:
    files: tuple[int, ...]   # indices into FileSet.files: the document first, then its embedded files
    weight: float            # probability that a visit picks this page

    @property
    def document(self) -> int:
        return self.files[0]

    @property
    def embedded(self) -> tuple[int, ...]:
        return self.files[1:]


@dataclass(frozen=True)
class FileSet:
    model: SurgeModel
    seed: int
    files: tuple[WebFile, ...]
    pages: tuple[Page, ...]
    max_file_bytes: int | None = None
    _page_bytes: np.ndarray = field(init=False, repr=False, compare=False)
    _page_weights: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = np.array([f.size for f in self.files], dtype=np.int64)
        object.__setattr__(self, "_page_bytes", np.array([sizes[list(p.files)].sum() for p in self.pages]))
        object.__setattr__(self, "_page_weights", np.array([p.weight for p in self.pages]))

    def page_bytes(self, page: int) -> int:
        return int(self._page_bytes[page])

    def urls(self, page: int) -> list[str]:
        return ["/" + self.files[i].name for i in self.pages[page].files]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def expected_page_bytes(self) -> float:
        """Mean bytes of a visited page, exact for this file set."""
        return float(self._page_weights @ self._page_bytes)

    @property
    def page_bytes_sd(self) -> float:
        """Standard deviation of a visited page's bytes (finite: the file set is finite)."""
        mean = self.expected_page_bytes
        return float(math.sqrt(self._page_weights @ (self._page_bytes - mean) ** 2))

    @property
    def expected_files_per_page(self) -> float:
        return float(self._page_weights @ np.array([len(p.files) for p in self.pages]))

    def offered_bps(self, page_time_s: float = 0.0) -> float:
        """One user's expected bits per second: mean page bytes over one page-think cycle.

        page_time_s is the mean time a page takes to load (the user's ON time), which the
        network decides; with 0 this is the upper bound of an infinitely fast path.
        """
        return 8 * self.expected_page_bytes / (self.model.think_time.mean + page_time_s)

    def pick_pages(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n independent page choices by popularity."""
        cdf = np.cumsum(self._page_weights)
        return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), len(self.pages) - 1)


def _stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def popularity_weights(count: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Request shares for `count` files: rank^-exponent over a random assignment of ranks."""
    ranks = rng.permutation(count) + 1
    w = ranks.astype(float) ** -exponent
    return w / w.sum()


def make_file_set(m: SurgeModel, seed: int, max_file_bytes: int | None = None) -> FileSet:
    """The model's file set for `seed`.

    max_file_bytes caps single files (None: the model as it is). The Pareto tail of
    surge-default makes a file of hundreds of megabytes likely somewhere among 2000
    files; a cap bounds the docroot and a run's duration at the price of the tail's
    extreme. The cap, when set, is part of the file set's identity.
    """
    rng = _stream(seed, 0)
    counts = m.kind_counts()
    kinds: list[FileKind] = [k for k in KINDS for _ in range(counts[k])]
    sizes = np.maximum(1, np.rint(m.file_size.sample(rng, m.file_count))).astype(np.int64)
    if max_file_bytes is not None:
        sizes = np.minimum(sizes, max_file_bytes)
    weights = popularity_weights(m.file_count, m.zipf_exponent, rng)
    serial = {k: 0 for k in KINDS}
    files = []
    for kind, size, weight in zip(kinds, sizes, weights):
        files.append(WebFile(f"{NAME_PREFIX[kind]}{serial[kind]:04d}.bin", int(size), kind, float(weight)))
        serial[kind] += 1

    embedded = np.array([i for i, k in enumerate(kinds) if k == "embedded"])
    emb_w = weights[embedded] / weights[embedded].sum()
    doc_total = sum(weights[i] for i, k in enumerate(kinds) if k != "embedded")
    pages = []
    for i, kind in enumerate(kinds):
        if kind == "embedded":
            continue
        members: tuple[int, ...] = ()
        if kind == "base" and len(embedded):
            n = int(min(m.embedded_per_page.sample(rng, 1)[0], len(embedded)))
            members = tuple(int(j) for j in rng.choice(embedded, size=n, replace=False, p=emb_w))
        pages.append(Page(files=(i, *members), weight=float(weights[i] / doc_total)))
    return FileSet(model=m, seed=seed, files=tuple(files), pages=tuple(pages), max_file_bytes=max_file_bytes)


def file_content(seed: int, index: int, size: int) -> bytes:
    """A file's bytes: seeded random, so incompressible, and the same for the same seed."""
    return _stream(seed, 2, index).bytes(size)


def file_set_digest(fs: FileSet) -> str:
    """Identifies a file set's contents: model, seed, cap and every name and size."""
    h = hashlib.sha256(json.dumps([fs.model.name, fs.seed, fs.max_file_bytes,
                                   [(f.name, f.size) for f in fs.files]]).encode())
    return h.hexdigest()


def write_docroot(fs: FileSet, directory: Path) -> int:
    """Write the file set into `directory`; returns the bytes written.

    Files already there with the right size are kept when the manifest says they came
    from the same file set, so a campaign writes its docroot once. A file is written to
    a temporary name and renamed, so an interrupted write never leaves a short file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / MANIFEST
    digest = file_set_digest(fs)
    same = False
    if manifest.exists():
        try:
            same = json.loads(manifest.read_text()).get("digest") == digest
        except (OSError, ValueError):
            same = False
    written = 0
    for i, f in enumerate(fs.files):
        path = directory / f.name
        if same and path.exists() and path.stat().st_size == f.size:
            continue
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            # In chunks, so a file of hundreds of megabytes never sits in memory at once.
            rng = _stream(fs.seed, 2, i)
            left = f.size
            while left > 0:
                chunk = min(left, 1 << 22)
                out.write(rng.bytes(chunk))
                left -= chunk
        os.replace(tmp, path)
        written += f.size
    manifest.write_text(json.dumps({"model": fs.model.name, "seed": fs.seed, "digest": digest,
                                    "files": len(fs.files), "bytes": fs.total_bytes}, indent=1) + "\n")
    return written


# --- user sessions ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Visit:
    page: int          # index into FileSet.pages
    think_s: float     # the user's think time after this page has loaded


@dataclass(frozen=True)
class Session:
    user: int
    visits: tuple[Visit, ...]
    start_offset_s: float = 0.0   # think time before the first page (stationary start)


def user_session(fs: FileSet, user: int, duration_s: float, seed: int | None = None,
                 stationary: bool = False) -> Session:
    """User `user`'s visits for a run of duration_s seconds.

    Page i starts, on the think-time clock (page loads taking no time), at the sum of the
    think times before it; the session holds every page that starts before duration_s, so
    the think times cover at least duration_s. Loads take time on a real path, so a
    replay lasts longer than duration_s; stop it at the run's end or let it finish.
    `seed` (default: the file set's) selects a different but reproducible set of users.

    A user that starts with a page (stationary=False) makes the first minutes busier
    than the long run: with think times of infinite variance (α = 1.4) a renewal process
    started at a renewal approaches its rate 1/E[think] only slowly (pages per user-second
    +27 % over a 60 s run, +13 % over 10 min, +7 % over an hour). With stationary=True
    the first page comes after an equilibrium residual of the think time, so every
    user is in steady state from time 0 and the expected page rate is 1/E[think] at
    every instant. The residual has a tail of index α - 1 = 0.4: about one user in
    five then makes no request in the first minute, as at a random instant in the long
    run. The session may then hold no page at all (start_offset_s ≥ duration_s).
    """
    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    # Think times, pages and the offset come from three streams of their own, each drawn
    # from its start, so a longer duration extends a session without changing its beginning.
    root = fs.seed if seed is None else seed
    think_rng, page_rng = _stream(root, 1, user, 0), _stream(root, 1, user, 1)
    offset = float(fs.model.think_time.residual_sample(_stream(root, 1, user, 2), 1)[0]) if stationary else 0.0
    thinks: list[np.ndarray] = []
    covered = offset
    while covered < duration_s:
        t = fs.model.think_time.sample(think_rng, 64)
        thinks.append(t)
        covered += float(t.sum())
    think = np.concatenate(thinks) if thinks else np.zeros(0)
    starts = offset + np.concatenate(([0.0], np.cumsum(think)[:-1]))
    n = int(np.searchsorted(starts, duration_s, side="left")) if len(think) else 0
    pages = fs.pick_pages(page_rng, n)
    return Session(user=user, visits=tuple(Visit(int(p), round(float(t), 6)) for p, t in zip(pages, think[:n])),
                   start_offset_s=round(offset, 6))


def session_requests(fs: FileSet, s: Session) -> int:
    return sum(len(fs.pages[v.page].files) for v in s.visits)


def session_bytes(fs: FileSet, s: Session) -> int:
    return sum(fs.page_bytes(v.page) for v in s.visits)


def model_summary(fs: FileSet) -> dict:
    """The figures of a model and its file set that a report or a sanity check wants."""
    m = fs.model
    return {
        "model": m.name,
        "seed": fs.seed,
        "files": len(fs.files),
        "pages": len(fs.pages),
        "kind_counts": m.kind_counts(),
        "file_size_mean_model": m.file_size.mean,
        "file_size_median_model": m.file_size.median,
        "file_size_mean_set": fs.total_bytes / len(fs.files),
        "docroot_bytes": fs.total_bytes,
        "largest_file_bytes": max(f.size for f in fs.files),
        "embedded_per_page_mean_model": m.embedded_per_page.mean,
        "files_per_page_mean": fs.expected_files_per_page,
        "page_bytes_mean": fs.expected_page_bytes,
        "page_bytes_sd": fs.page_bytes_sd,
        "think_mean_s": m.think_time.mean,
        "think_median_s": m.think_time.median,
        "offered_bps_per_user_upper": fs.offered_bps(0.0),
    }
