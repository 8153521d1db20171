"""Statistics for comparing startup schemes, as the Blitzstart evaluation does (§4, Table 1).

A variant is compared with the baseline at the same (profile, size): the difference of
the means with its 95 % Welch confidence interval (significant when the interval
excludes 0; paired by repetition where every variant replays the same traffic), the ratio of the means (the paper's "x1.3"), whether an FCT change stays
within one RTT, and a one-way ANOVA across all variants as the paper's second test.

A level's interval (mean_ci) is a bootstrap that respects the level's support; see CI_METHOD.

Small samples are normal here (a quick campaign may have one repetition), so every
function returns None where a figure is undefined instead of raising or returning NaN,
and zero-variance samples (identical runs) give degenerate but finite intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
from scipy import stats as sps

LEVEL = 0.95  # confidence level used throughout, as in the paper


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; the sample must not be empty."""
    return float(np.mean(_array(values)))


def median(values: Sequence[float]) -> float:
    """Median; the sample must not be empty."""
    return float(np.median(_array(values)))


# A level's interval (an FCT, a goodput, a drop rate: never negative) is a percentile
# bootstrap of the mean, which stays inside the sample's range, so no bound falls below
# zero; below MIN_CI_RUNS runs none is given, since two runs say nothing about the spread.
# Differences keep their Welch t intervals (a difference may be negative).
MIN_CI_RUNS = 3
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 1              # fixed: the same runs always give the same interval
CI_METHOD = (f"{LEVEL:.0%} percentile bootstrap interval of the mean ({BOOTSTRAP_RESAMPLES:,} resamples); "
             f"none below {MIN_CI_RUNS} runs")


def mean_ci(values: Sequence[float], level: float = LEVEL) -> Optional[tuple[float, float]]:
    """Interval of the mean of a level (CI_METHOD); None for fewer than MIN_CI_RUNS values."""
    x = _array(values)
    if x.size < MIN_CI_RUNS:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = x[rng.integers(0, x.size, size=(BOOTSTRAP_RESAMPLES, x.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def t_interval(values: Sequence[float], level: float = LEVEL) -> Optional[tuple[float, float]]:
    """Student-t interval of the mean, for differences (which may be negative); None for
    fewer than two values."""
    x = _array(values)
    if x.size < 2:
        return None
    m = float(np.mean(x))
    half = float(sps.t.ppf(0.5 + level / 2, x.size - 1)) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    return m - half, m + half


@dataclass(frozen=True)
class Difference:
    """mean(variant) - mean(baseline) with its Welch interval (None when a side has n < 2)."""

    diff: float
    ci: Optional[tuple[float, float]]

    @property
    def significant(self) -> bool:
        """True when the interval excludes 0; without an interval nothing is significant."""
        return self.ci is not None and (self.ci[0] > 0 or self.ci[1] < 0)


def welch_difference(variant: Sequence[float], baseline: Sequence[float],
                     level: float = LEVEL) -> Difference:
    """Difference of means with a Welch (unequal variances) t interval.

    When both samples have zero variance the difference is exact, so the interval
    collapses to the point (Welch's degrees of freedom are 0/0 there).
    """
    a, b = _array(variant), _array(baseline)
    diff = float(np.mean(a) - np.mean(b))
    if a.size < 2 or b.size < 2:
        return Difference(diff, None)
    va, vb = float(np.var(a, ddof=1)) / a.size, float(np.var(b, ddof=1)) / b.size
    se2 = va + vb
    if se2 == 0.0:
        return Difference(diff, (diff, diff))
    df = se2 ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = float(sps.t.ppf(0.5 + level / 2, df)) * math.sqrt(se2)
    return Difference(diff, (diff - half, diff + half))


def paired_difference(variant: Mapping[int, float], baseline: Mapping[int, float],
                      level: float = LEVEL) -> Optional[Difference]:
    """Mean of the per-repetition differences variant − baseline over the repetitions both
    have, with its Student-t interval; None when they share none.

    For workloads that replay the same traffic in every variant at one repetition (web
    sessions, scheduled arrivals): the load's own run-to-run variation, which dominates a
    Welch interval of heavy-tailed traffic, cancels in each pair."""
    reps = sorted(set(variant) & set(baseline))
    if not reps:
        return None
    d = [variant[k] - baseline[k] for k in reps]
    return Difference(mean(d), t_interval(d, level))


def anova_p(groups: Sequence[Sequence[float]]) -> Optional[float]:
    """One-way ANOVA p-value across the groups (one group per variant).

    None when undefined: fewer than two groups, no degrees of freedom within the
    groups (every group a single run), or all values identical. When the groups
    differ but each is constant, the difference is certain and p is 0.
    """
    arrays = [_array(g) for g in groups if len(g) > 0]
    k, n = len(arrays), sum(a.size for a in arrays)
    if k < 2 or n - k < 1:
        return None
    grand = float(np.mean(np.concatenate(arrays)))
    ss_between = sum(a.size * (float(np.mean(a)) - grand) ** 2 for a in arrays)
    ss_within = sum(float(np.sum((a - np.mean(a)) ** 2)) for a in arrays)
    if ss_within == 0.0:
        return None if ss_between == 0.0 else 0.0
    f = (ss_between / (k - 1)) / (ss_within / (n - k))
    return float(sps.f.sf(f, k - 1, n - k))


def ratio_of_means(variant: Sequence[float], baseline: Sequence[float]) -> Optional[float]:
    """mean(variant) / mean(baseline); 1 when both are 0, None when only the baseline is 0."""
    num, den = mean(variant), mean(baseline)
    if den == 0.0:
        return 1.0 if num == 0.0 else None
    return num / den


def within_one_rtt(fct_diff_s: float, rtt_s: float) -> bool:
    """True when an FCT change is smaller than one RTT (the paper's orange arrows)."""
    return abs(fct_diff_s) < rtt_s


def _array(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("empty sample")
    return x
