"""The SURGE web model: distributions against their laws, file-set structure, sessions, seeds.

Heavy tails make sample means of Pareto laws with α < 2 unreliable, so those are checked
through medians, survival functions at fixed points, truncated means E[min(X, c)] and the
Hill estimate of the tail index on large samples. Every sample is seeded.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import zlib

import numpy as np
import pytest

from hosts.workloads import surge
from hosts.workloads.surge import (LARGE_FILES, SURGE_DEFAULT, GeometricCount, Lognormal, Pareto, ParetoCount,
                                   Session, Visit)


def rng(seed: int = 12345) -> np.random.Generator:
    return np.random.default_rng(seed)


def hill(x: np.ndarray, k: int) -> float:
    """Hill's estimate of the tail index from the k largest values."""
    top = np.sort(x)[::-1][:k + 1]
    return 1.0 / float(np.mean(np.log(top[:k] / top[k])))


def truncated_pareto_mean(p: Pareto, c: float) -> float:
    """E[min(X, c)] for X ~ Pareto(α, k), c > k."""
    return p.k + p.k ** p.alpha * (p.k ** (1 - p.alpha) - c ** (1 - p.alpha)) / (p.alpha - 1)


# --- the laws --------------------------------------------------------------------------------

def test_file_size_hybrid_tail_share_body_and_tail_index():
    law = SURGE_DEFAULT.file_size
    x = law.sample(rng(), 400_000)
    assert law.tail.k == 133_000 and law.tail.alpha == 1.1 and law.tail_share == 0.07
    assert (x > law.tail.k).mean() == pytest.approx(0.07, abs=0.002)
    assert np.median(x) == pytest.approx(law.median, rel=0.02)
    # The body is the lognormal below the cut: compare its mean and a quantile.
    body = x[x <= law.tail.k]
    b, z = law.body, (math.log(law.tail.k) - law.body.mu) / law.body.sigma
    from scipy import special
    assert body.mean() == pytest.approx(b.mean * special.ndtr(z - b.sigma) / special.ndtr(z), rel=0.01)
    assert (x <= 5000).mean() == pytest.approx(1 - law.sf(5000), abs=0.003)
    # Every size above the cut follows the Pareto tail.
    assert hill(x, 5000) == pytest.approx(1.1, abs=0.06)
    tail = x[x > law.tail.k]
    assert (tail > 1e6).mean() == pytest.approx(law.tail.sf(1e6), abs=0.01)


def test_large_files_lognormal_mean_median_and_log_moments():
    law = LARGE_FILES.file_size
    x = law.sample(rng(), 400_000)
    assert x.mean() == pytest.approx(math.exp(11.92 + 0.5), rel=0.01)
    assert np.median(x) == pytest.approx(math.exp(11.92), rel=0.01)
    assert np.log(x).mean() == pytest.approx(11.92, abs=0.005)
    assert np.log(x).std() == pytest.approx(1.0, abs=0.005)


def test_embedded_files_per_page_pareto_count():
    law = SURGE_DEFAULT.embedded_per_page
    assert (law.alpha, law.k) == (1.245, 2)
    n = law.sample(rng(), 1_000_000)
    assert n.min() == 2
    assert np.median(n) == law.median == 3
    for v in (3, 5, 10, 50):
        assert (n >= v).mean() == pytest.approx(law.sf(v), abs=0.003)
    assert hill(n.astype(float), 10_000) == pytest.approx(1.245, abs=0.08)
    # The mean is finite but unstable in a sample; check the closed form by summation.
    assert law.mean == pytest.approx(sum(law.sf(v) for v in range(1, 2_000_000)) + 2e6 ** (1 - 1.245) * 2 ** 1.245
                                     / 0.245, rel=1e-3)


def test_embedded_files_per_page_geometric():
    law = LARGE_FILES.embedded_per_page
    n = law.sample(rng(), 400_000)
    assert n.min() == 1
    assert n.mean() == pytest.approx(2.0, rel=0.01)
    assert (n == 1).mean() == pytest.approx(0.5, abs=0.003)
    assert law.median == 1 and law.sf(3) == 0.25


@pytest.mark.parametrize("m", [SURGE_DEFAULT, LARGE_FILES])
def test_think_time_pareto(m):
    law = m.think_time
    assert (law.alpha, law.k) == (1.4, 2.0)
    t = law.sample(rng(), 1_000_000)
    assert t.min() >= 2.0
    assert law.mean == pytest.approx(7.0) and law.median == pytest.approx(2 * 2 ** (1 / 1.4))
    assert np.median(t) == pytest.approx(law.median, rel=0.01)
    assert np.minimum(t, 60).mean() == pytest.approx(truncated_pareto_mean(law, 60), rel=0.01)
    assert (t > 30).mean() == pytest.approx(law.sf(30), rel=0.03)
    assert hill(t, 20_000) == pytest.approx(1.4, abs=0.04)


def test_equilibrium_residual_of_the_think_time():
    law = SURGE_DEFAULT.think_time
    r = law.residual_sample(rng(), 1_000_000)
    for x in (1.0, 2.0, 5.0, 60.0, 3600.0):
        assert (r > x).mean() == pytest.approx(law.residual_sf(x), abs=0.002)
    with pytest.raises(ValueError):
        Pareto(0.9, 1).residual_sample(rng(), 1)


def test_lognormal_and_pareto_closed_forms():
    assert Lognormal(1.0, 0.5).mean == pytest.approx(math.exp(1.125))
    assert Pareto(1.0, 2).mean == math.inf and Pareto(2.0, 3).mean == 6.0
    assert ParetoCount(1.0, 2).mean == math.inf
    assert GeometricCount(4.0).sf(2) == pytest.approx(0.75)


# --- the file set ----------------------------------------------------------------------------

@pytest.mark.parametrize("m", [SURGE_DEFAULT, LARGE_FILES])
def test_file_set_structure_and_kind_ratio(m):
    fs = surge.make_file_set(m, 3)
    kinds = [f.kind for f in fs.files]
    assert m.kind_counts() == {"base": 600, "embedded": 760, "loner": 640}
    assert (kinds.count("base"), kinds.count("embedded"), kinds.count("loner")) == (600, 760, 640)
    assert len({f.name for f in fs.files}) == 2000
    assert len(fs.pages) == 600 + 640
    assert sum(f.weight for f in fs.files) == pytest.approx(1.0)
    assert sum(p.weight for p in fs.pages) == pytest.approx(1.0)
    least = 2 if m is SURGE_DEFAULT else 1
    for p in fs.pages:
        doc = fs.files[p.document]
        if doc.kind == "loner":
            assert p.embedded == ()
        else:
            assert doc.kind == "base" and len(p.embedded) >= least
            assert len(set(p.embedded)) == len(p.embedded)
            assert all(fs.files[i].kind == "embedded" for i in p.embedded)
        assert p.weight == pytest.approx(doc.weight / sum(f.weight for f in fs.files if f.kind != "embedded"))
    assert all(f.size >= 1 for f in fs.files)


def test_kind_counts_add_up_for_any_file_count():
    for n in (1, 7, 10, 333, 2001):
        assert sum(dataclasses.replace(SURGE_DEFAULT, file_count=n).kind_counts().values()) == n


def test_zipf_popularity_rank_frequency_slope():
    fs = surge.make_file_set(SURGE_DEFAULT, 7)
    w = np.sort([f.weight for f in fs.files])[::-1]
    ranks = np.arange(1, len(w) + 1)
    assert np.allclose(w * ranks, w[0])                 # weight ∝ rank^-1 exactly
    # Page choices, ranked by how often they were picked, fall off with rank^-1 too.
    counts = np.sort(np.bincount(fs.pick_pages(rng(3), 300_000), minlength=len(fs.pages)))[::-1]
    r = np.arange(1, 201)
    slope = np.polyfit(np.log(r), np.log(counts[:200]), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)


def test_uniform_popularity_of_large_files():
    from scipy import stats
    fs = surge.make_file_set(LARGE_FILES, 7)
    assert np.ptp([f.weight for f in fs.files]) == pytest.approx(0, abs=1e-15)
    counts = np.bincount(fs.pick_pages(rng(3), 200_000), minlength=len(fs.pages))
    assert stats.chisquare(counts).pvalue > 1e-3


def test_page_bytes_of_visits_match_the_expectation():
    fs = surge.make_file_set(SURGE_DEFAULT, 5, max_file_bytes=20_000_000)
    n = 300_000
    picks = fs.pick_pages(rng(9), n)
    mean = float(np.mean([fs.page_bytes(int(p)) for p in picks]))
    assert abs(mean - fs.expected_page_bytes) < 5 * fs.page_bytes_sd / math.sqrt(n)
    assert fs.offered_bps(1.0) == pytest.approx(8 * fs.expected_page_bytes / 8.0)
    assert max(f.size for f in fs.files) <= 20_000_000


# --- seeds, docroot --------------------------------------------------------------------------

def small_model() -> surge.SurgeModel:
    return dataclasses.replace(SURGE_DEFAULT, name="surge-small", file_count=40)


def test_same_seed_same_file_set_other_seed_other_file_set():
    a, b, c = (surge.make_file_set(SURGE_DEFAULT, s) for s in (11, 11, 12))
    assert a == b and surge.file_set_digest(a) == surge.file_set_digest(b)
    assert a != c and surge.file_set_digest(a) != surge.file_set_digest(c)


def digest_dir(d) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_docroot_byte_identical_per_seed_exact_sizes_incompressible(tmp_path):
    fs = surge.make_file_set(small_model(), 4, max_file_bytes=300_000)
    written = surge.write_docroot(fs, tmp_path / "a")
    surge.write_docroot(surge.make_file_set(small_model(), 4, max_file_bytes=300_000), tmp_path / "b")
    assert written == fs.total_bytes
    assert digest_dir(tmp_path / "a") == digest_dir(tmp_path / "b")
    for f in fs.files:
        assert (tmp_path / "a" / f.name).stat().st_size == f.size
    big = max(fs.files, key=lambda f: f.size)
    data = (tmp_path / "a" / big.name).read_bytes()
    assert data == surge.file_content(fs.seed, fs.files.index(big), big.size)
    assert len(zlib.compress(data, 9)) > 0.99 * len(data)
    other = surge.make_file_set(small_model(), 5, max_file_bytes=300_000)
    surge.write_docroot(other, tmp_path / "c")
    assert digest_dir(tmp_path / "a") != digest_dir(tmp_path / "c")


def test_docroot_written_once_and_repaired(tmp_path):
    fs = surge.make_file_set(small_model(), 4, max_file_bytes=100_000)
    surge.write_docroot(fs, tmp_path)
    assert surge.write_docroot(fs, tmp_path) == 0
    victim = tmp_path / fs.files[3].name
    victim.write_bytes(b"short")
    assert surge.write_docroot(fs, tmp_path) == fs.files[3].size
    assert victim.stat().st_size == fs.files[3].size
    assert not list(tmp_path.glob("*.tmp"))


# --- sessions --------------------------------------------------------------------------------

def test_session_covers_the_duration_and_is_reproducible():
    fs = surge.make_file_set(SURGE_DEFAULT, 2)
    for user in range(50):
        s = surge.user_session(fs, user, 300.0)
        starts = np.concatenate(([0.0], np.cumsum([v.think_s for v in s.visits])))
        assert s.visits and starts[len(s.visits) - 1] < 300.0 <= starts[-1]
        assert all(v.think_s >= 2.0 for v in s.visits)
        assert all(0 <= v.page < len(fs.pages) for v in s.visits)
        assert s == surge.user_session(fs, user, 300.0)
    assert surge.user_session(fs, 3, 300.0) != surge.user_session(fs, 4, 300.0)
    assert surge.user_session(fs, 3, 300.0) != surge.user_session(fs, 3, 300.0, seed=99)
    with pytest.raises(ValueError):
        surge.user_session(fs, 0, 0)


def test_a_longer_run_extends_a_session_without_changing_it():
    fs = surge.make_file_set(SURGE_DEFAULT, 2)
    short, long = surge.user_session(fs, 1, 100.0), surge.user_session(fs, 1, 1000.0)
    assert long.visits[:len(short.visits) - 1] == short.visits[:-1]
    assert long.visits[len(short.visits) - 1].page == short.visits[-1].page


def test_session_bytes_and_requests():
    fs = surge.make_file_set(SURGE_DEFAULT, 2)
    s = Session(0, (Visit(0, 2.0), Visit(5, 3.0)))
    assert surge.session_requests(fs, s) == len(fs.pages[0].files) + len(fs.pages[5].files)
    assert surge.session_bytes(fs, s) == fs.page_bytes(0) + fs.page_bytes(5)
    assert fs.page_bytes(5) == sum(fs.files[i].size for i in fs.pages[5].files)


def test_page_rate_of_a_start_at_a_page_and_of_a_stationary_start():
    """Started at a page, a 60 s window is busier than 1/E[think]; stationary it is not."""
    fs = surge.make_file_set(SURGE_DEFAULT, 1)
    users, T = 6000, 60.0

    def rate(stationary: bool) -> float:
        n = 0
        for u in range(users):
            s = surge.user_session(fs, u, T, stationary=stationary)
            t = s.start_offset_s
            for v in s.visits:
                n += t < T
                t += v.think_s
        return n / users / T

    assert rate(True) == pytest.approx(1 / 7.0, rel=0.04)
    assert rate(False) > 1.15 / 7.0


def test_stationary_session_starts_after_its_offset():
    fs = surge.make_file_set(SURGE_DEFAULT, 1)
    sessions = [surge.user_session(fs, u, 60.0, stationary=True) for u in range(300)]
    assert all(s.start_offset_s > 0 for s in sessions)
    empty = [s for s in sessions if not s.visits]
    assert empty and all(s.start_offset_s >= 60.0 for s in empty)
    assert 0.12 < len(empty) / len(sessions) < 0.25       # P(residual > 60 s) = 0.18


def test_model_lookup_and_summary():
    assert surge.model("large-files") is LARGE_FILES
    with pytest.raises(ValueError):
        surge.model("nope")
    s = surge.model_summary(surge.make_file_set(SURGE_DEFAULT, 1))
    assert s["files"] == 2000 and s["pages"] == 1240 and s["think_mean_s"] == pytest.approx(7.0)
