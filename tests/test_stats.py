"""Statistics against values worked out by hand, with scipy's own tests as a cross-check."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis import stats

T975_DF2 = 4.302652729911275  # Student t quantiles from tables
T975_DF3 = 3.182446305284263


def test_mean_and_median():
    assert stats.mean([1, 2, 3, 4]) == 2.5
    assert stats.median([3, 1, 2]) == 2.0
    assert stats.median([4, 1, 3, 2]) == 2.5


def test_empty_sample_is_an_error():
    with pytest.raises(ValueError):
        stats.mean([])


def test_level_interval_is_a_bootstrap_of_the_mean_inside_the_support():
    # A skewed sample whose t interval reaches below zero: the bootstrap's cannot.
    skewed = [0.1, 0.1, 5.0]
    t_low = 1.7333 - T975_DF2 * float(np.std(skewed, ddof=1)) / math.sqrt(3)
    assert t_low < 0
    low, high = stats.mean_ci(skewed)
    assert 0.1 <= low <= stats.mean(skewed) <= high <= 5.0
    # By hand: the bootstrap means of [1, 2, 3, 4] lie in [1, 4] around 2.5, and the same
    # runs always give the same interval (a fixed seed).
    low, high = stats.mean_ci([1, 2, 3, 4])
    assert 1.0 <= low < 2.5 < high <= 4.0
    assert stats.mean_ci([1, 2, 3, 4]) == (low, high)
    # A normal sample: close to the t interval of the mean (bootstrap is a bit narrower).
    rng = np.random.default_rng(7)
    x = rng.normal(10.0, 1.0, 40)
    t = sps.t.interval(0.95, x.size - 1, loc=x.mean(), scale=sps.sem(x))
    assert stats.mean_ci(x) == pytest.approx(t, abs=0.15)


def test_mean_ci_small_and_constant_samples():
    assert stats.mean_ci([7.0]) is None
    assert stats.mean_ci([7.0, 9.0]) is None          # two runs: no interval (not meaningful)
    assert stats.mean_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_paired_difference_over_the_shared_repetitions():
    d = stats.paired_difference({1: 10.0, 2: 13.0, 3: 99.0}, {1: 9.0, 2: 10.0})
    assert d.diff == pytest.approx(2.0)                    # (1 + 3) / 2; repetition 3 has no pair
    assert d.ci == pytest.approx((2.0 - 12.706, 2.0 + 12.706), rel=1e-4)     # sd √2, n 2: t × 1
    assert stats.paired_difference({1: 1.0}, {2: 1.0}) is None
    one = stats.paired_difference({1: 2.0}, {1: 1.5})
    assert one.diff == pytest.approx(0.5) and one.ci is None and not one.significant


def test_welch_difference_by_hand():
    # var 2 in each group of 2 -> se^2 = 1 + 1, df = 4 / (1 + 1) = 2
    d = stats.welch_difference([10, 12], [0, 2])
    half = T975_DF2 * math.sqrt(2)
    assert d.diff == 10
    assert d.ci == pytest.approx((10 - half, 10 + half), abs=1e-12)
    assert d.significant


def test_welch_difference_unequal_variances_degrees_of_freedom():
    a, b = [1, 2, 3, 4], [2, 4, 6, 8]
    va, vb = (5 / 3) / 4, (20 / 3) / 4
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)
    assert df == pytest.approx(4.41176, abs=1e-4)
    half = sps.t.ppf(0.975, df) * math.sqrt(va + vb)
    d = stats.welch_difference(a, b)
    assert d.diff == -2.5
    assert d.ci == pytest.approx((-2.5 - half, -2.5 + half))
    assert not d.significant  # the interval reaches past 0


def test_welch_significance_agrees_with_scipy_welch_test():
    rng = np.random.default_rng(42)
    outcomes = set()
    for shift in np.linspace(0, 2, 40):
        a, b = rng.normal(shift, 1, 8), rng.normal(0, 2, 11)
        expected = sps.ttest_ind(a, b, equal_var=False).pvalue < 0.05
        assert stats.welch_difference(a, b).significant == expected
        outcomes.add(expected)
    assert outcomes == {True, False}  # both branches were exercised


def test_welch_small_and_constant_samples():
    single = stats.welch_difference([3.0], [1.0, 2.0])
    assert single.diff == 1.5 and single.ci is None and not single.significant
    exact = stats.welch_difference([1.0, 1.0], [2.0, 2.0])
    assert exact.ci == (-1.0, -1.0) and exact.significant
    same = stats.welch_difference([1.0, 1.0], [1.0, 1.0])
    assert same.ci == (0.0, 0.0) and not same.significant


def test_anova_two_groups_equals_pooled_t_test():
    # ss_between = 13.5, ss_within = 4 -> F = 13.5 on (1, 4) degrees of freedom
    p = stats.anova_p([[1, 2, 3], [4, 5, 6]])
    assert p == pytest.approx(sps.f.sf(13.5, 1, 4))
    assert p == pytest.approx(sps.ttest_ind([1, 2, 3], [4, 5, 6]).pvalue)


def test_anova_against_scipy_for_three_groups():
    rng = np.random.default_rng(3)
    groups = [rng.normal(m, 1, n) for m, n in ((0, 5), (0.5, 7), (1.5, 6))]
    assert stats.anova_p(groups) == pytest.approx(sps.f_oneway(*groups).pvalue)


def test_anova_undefined_cases():
    assert stats.anova_p([[1.0, 2.0]]) is None  # one variant only
    assert stats.anova_p([[1.0], [2.0]]) is None  # n = 1 per variant
    assert stats.anova_p([[1.0, 1.0], [1.0, 1.0]]) is None  # all identical
    assert stats.anova_p([[1.0, 1.0], [2.0, 2.0]]) == 0.0  # constant but different


def test_ratio_of_means():
    assert stats.ratio_of_means([2, 4], [1, 2]) == 2.0
    assert stats.ratio_of_means([0, 0], [0]) == 1.0
    assert stats.ratio_of_means([1], [0, 0]) is None


def test_within_one_rtt():
    assert stats.within_one_rtt(0.049, 0.05)
    assert stats.within_one_rtt(-0.01, 0.05)
    assert not stats.within_one_rtt(-0.05, 0.05)
    assert not stats.within_one_rtt(0.2, 0.05)
