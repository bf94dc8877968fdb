"""The trend across releases (harness/history/trend.py): Mann and Kendall's rank test between release order and
figure at the change points' false-alarm probability, Theil and Sen's slope a release with Sen's interval. On
random draws with this box's noise (docs/history.md: a few percent a run, and now and then one run 8-18% slower,
never faster): no trend is flagged at about the nominal rate or less; a planted 3% a release is found."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.history.needs import require

require()

from harness.history.changes import MAX_PVALUE  # noqa: E402
from harness.history.trend import (EXACT_RUNS, MIN_RELEASES, concordance_counts, critical_s, exact_tail,  # noqa: E402
                                   find_trends, kendall_s, release_trend, s_variance, sen_interval)

KEY = ("tkg_ms_min", "b", "m", "s", "hf", "fp32", "cpu", "cpu")


def points_of(values, releases, direction: str = "max", figure: str = "tkg_ms_min") -> list[dict]:
    return [{"figure": figure, "benchmark": "b", "model": "m", "shape": "s", "backend": "hf", "dtype": "fp32",
             "hardware": "cpu", "timer": "cpu", "value": float(v), "direction": direction, "release": f"r{k}",
             "commit": f"c{i}", "time": f"t{i:03d}", "report": f"run{i}.json"}
            for i, (v, k) in enumerate(zip(values, releases))]


def this_boxs_runs(rng: np.random.Generator, n: int, sigma: float = 0.02, jumps: float = 0.2) -> np.ndarray:
    """Runs of unchanged code on this box: lognormal noise, and a fifth of the runs 8-18% slower (4 of the
    A/A's 20 on 2026-11-29), a one-sided jump a t-test reads as a level."""
    jump = np.where(rng.random(n) < jumps, rng.uniform(1.08, 1.18, n), 1.0)
    return 3.0 * np.exp(sigma * rng.standard_normal(n)) * jump


def trend_of(values, releases, direction="max", max_pvalue=MAX_PVALUE):
    return release_trend(KEY, points_of(values, releases, direction), max_pvalue)


@pytest.mark.parametrize(("max_pvalue", "draws", "at_most"), [(0.05, 2000, 130), (MAX_PVALUE, 3000, 9)])
def test_no_trend_is_flagged_at_about_the_nominal_rate_or_less(max_pvalue, draws, at_most):
    """At 0.05, 100 of 2000 draws are expected (binomial sd 9.7: 130 is 3 sd over); at 0.001, 3 of 3000."""
    rng = np.random.default_rng(20261129)
    flagged = 0
    for _ in range(draws):
        per = int(rng.integers(2, 7))
        releases = np.repeat(np.arange(5), per)
        flagged += trend_of(this_boxs_runs(rng, releases.size), releases, max_pvalue=max_pvalue).pvalue < max_pvalue
    assert flagged <= at_most, (flagged, draws * max_pvalue)


@pytest.mark.parametrize(("sigma", "jumps", "releases", "at_least"),
                         [(0.02, 0.0, 4, 95), (0.02, 0.2, 4, 40), (0.02, 0.2, 5, 78)])
def test_three_percent_a_release_is_found_at_modest_noise_and_this_boxs_jumps_cost_power(sigma, jumps, releases,
                                                                                          at_least):
    """Releases of six runs (interleaved, as the quiet series'), each 3% slower: at 2% noise a run, found by the
    4th release in all of 100 draws (3% inside the interval in at least 95); with this box's one-sided jumps as
    well (a fifth of the runs 8-18% slower) in about half (55 of 100) by the 4th, 88 by the 5th: a jump is a
    rank out of place, and at 0.001 six runs a release leave little to spare."""
    rng = np.random.default_rng(59)
    found = inside = 0
    ranks = np.tile(np.arange(releases), 6)
    for _ in range(100):
        t = trend_of(this_boxs_runs(rng, ranks.size, sigma, jumps) * 1.03 ** ranks, ranks)
        found += t.pvalue < MAX_PVALUE and t.regression
        inside += t.low <= 0.03 <= t.high
    assert found >= at_least and inside >= 95, (found, inside)


@pytest.mark.parametrize(("direction", "factor", "regression"),
                         [("max", 1.03, True), ("max", 1 / 1.03, False), ("min", 1 / 1.03, True), ("min", 1.03, False)])
def test_the_size_is_relative_a_release_and_its_direction_the_figures(direction, factor, regression):
    releases = np.repeat(np.arange(5), 3)
    wobble = np.tile([1.0, 1.001, 0.999], 5)
    t = trend_of(10 * factor ** releases * wobble, releases, direction)
    assert t.pvalue < MAX_PVALUE and t.regression is regression
    assert t.per_release == pytest.approx(factor - 1, abs=1e-3) and t.low < t.per_release < t.high
    assert (t.first, t.last) == (pytest.approx(10), pytest.approx(10 * factor ** 4))
    assert t.releases == [f"r{k}" for k in range(5)] and t.runs == 15
    assert ("REGRESSION" in t.describe()) is regression and f"{100 * (factor - 1):+.1f}% a release" in t.describe()


def test_runs_of_one_release_are_tied_and_only_pairs_across_releases_count():
    """Within a release the figure's order says nothing: S and the slopes read only pairs of two releases."""
    releases = np.array([0, 0, 1, 1, 2, 2])
    values = np.array([5.0, 1.0, 6.0, 2.0, 7.0, 3.0])  # falling inside every release, rising across them
    assert kendall_s(releases.astype(float), values) == 9 - 3  # 12 pairs across releases, 3 of them falling
    t = trend_of(values, releases, max_pvalue=0.5)
    assert t.s == 6 and t.per_release > 0


@pytest.mark.parametrize("rank_ties", [[1] * 6, [2, 2, 2], [3, 3], [1, 2, 3]])
@pytest.mark.parametrize("value_ties", [[1] * 6, [2, 1, 1, 1, 1], [3, 3]])
def test_the_variance_of_s_is_its_exact_variance_over_every_order_with_ties(rank_ties, value_ties):
    ranks = np.repeat(np.arange(len(rank_ties)), rank_ties).astype(float)
    values = np.repeat(np.arange(len(value_ties)), value_ties).astype(float)
    exact = statistics.pvariance([kendall_s(ranks, values[list(p)]) for p in itertools.permutations(range(6))])
    assert s_variance(6, rank_ties, value_ties) == pytest.approx(exact)


@pytest.mark.parametrize("sizes", [(1, 1, 1), (2, 2, 2), (3, 1, 2), (1, 4, 1, 1), (2, 3, 2)])
def test_the_exact_distribution_of_s_is_every_order_of_the_runs_counted(sizes):
    ranks = np.repeat(np.arange(len(sizes)), sizes).astype(float)
    n = ranks.size
    seen = [kendall_s(ranks, np.array(p, dtype=float)) for p in itertools.permutations(range(n))]
    m = (n * n - sum(k * k for k in sizes)) // 2  # pairs of two releases
    counts = concordance_counts(sizes)
    assert len(counts) == m + 1 and sum(counts) == math.factorial(n) // math.prod(map(math.factorial, sizes))
    # each order of the distinct figures, counted once per arrangement of the runs inside each release
    per = math.prod(map(math.factorial, sizes))
    assert [seen.count(2 * c - m) for c in range(m + 1)] == [k * per for k in counts]
    for s in range(-m, m + 1):
        assert exact_tail(sizes, s) == pytest.approx(min(1, sum(abs(x) >= abs(s) for x in seen) / len(seen)))
    for alpha in (0.01, 0.05, 0.2, 1 / 3, 0.5):  # the critical S: the least |S| whose tail is below alpha
        c = critical_s(sizes, True, 0.0, alpha)
        assert all((exact_tail(sizes, s) < alpha) == (s >= c) for s in range(2 - m % 2, m + 1, 2)), (alpha, c)


def test_the_exact_test_is_used_without_ties_and_the_normal_one_with_them():
    """Four releases of six runs as the quiet drift's first four (S = 128): the normal approximation's tail reads
    p = 0.0011 there, the exact one 0.00068 (the approximation's tail is the heavier at 0.001)."""
    sizes = (6, 6, 6, 6)
    assert exact_tail(sizes, 128) == pytest.approx(0.000684, rel=1e-3)
    releases = np.repeat(np.arange(4), 6)
    values = 3.0 * 1.01 ** np.arange(24)
    assert trend_of(values, releases).exact is True
    tied = values.copy()
    tied[1] = tied[0]
    assert trend_of(tied, releases).exact is False


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 6), st.integers(1, 6), st.floats(-0.05, 0.05))
def test_the_interval_excludes_zero_exactly_as_the_test_rejects(seed, n_releases, per, drift):
    rng = np.random.default_rng(seed)
    releases = np.repeat(np.arange(n_releases), per)
    t = trend_of(this_boxs_runs(rng, releases.size) * (1 + drift) ** releases, releases)
    assert (t.pvalue < MAX_PVALUE) == (t.low > 0 or t.high < 0)
    assert t.low <= t.per_release <= t.high and 0 < t.pvalue <= 1


def test_the_normal_tests_critical_s_and_p_value_are_the_continuity_corrected_tail():
    from scipy.stats import norm

    for sd in (3.0, 7.5, 20.0, 38.88):
        for alpha in (MAX_PVALUE, 0.05):
            c = critical_s((2, 2, 2), False, sd, alpha)
            assert all((2 * norm.sf((s - 1) / sd) < alpha) == (s >= c) for s in range(1, 400)), (sd, alpha, c)
    releases = np.repeat(np.arange(3), 3)
    values = np.array([1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0])  # a tie: the normal approximation
    t = trend_of(values, releases, max_pvalue=0.5)
    sd = math.sqrt(s_variance(9, [3, 3, 3], [2, 1, 1, 1, 1, 1, 1, 1]))
    assert not t.exact and t.s == 27 and t.pvalue == pytest.approx(2 * norm.sf(26 / sd))


def test_sens_interval_excludes_zero_exactly_where_s_reaches_the_critical_value():
    for n in range(1, 13):
        for below in range(n + 1):
            slopes = np.array(sorted([-1.0] * below + [1.0] * (n - below)))
            for critical in range(1, n + 3):
                low, high = sen_interval(slopes, critical)
                assert (low > 0) == (n - 2 * below >= critical) and (high < 0) == (2 * below - n >= critical)
                assert low <= high


@pytest.mark.parametrize("direction", ["max", "min"])
def test_a_flat_series_is_neither_a_regression_nor_an_improvement(direction):
    t = trend_of(np.full(9, 2.0), np.repeat(np.arange(3), 3), direction)
    assert t.per_release == 0 and t.s == 0 and t.pvalue == 1 and t.regression is False


@pytest.mark.parametrize("seed", range(12))
def test_beyond_the_exact_runs_the_normal_test_and_its_interval_agree_too(seed):
    rng = np.random.default_rng(seed)
    releases = np.repeat(np.arange(5), EXACT_RUNS // 5 + 1)
    t = trend_of(this_boxs_runs(rng, releases.size) * (1 + 0.004 * (seed % 4)) ** releases, releases)
    assert t.exact is False and (t.pvalue < MAX_PVALUE) == (t.low > 0 or t.high < 0)
    assert t.low <= t.per_release <= t.high


@pytest.mark.parametrize("n_releases", [1, 2])
def test_fewer_than_three_releases_have_no_trend_test(n_releases):
    releases = np.repeat(np.arange(n_releases), 10)
    assert MIN_RELEASES == 3 and trend_of(1.5 ** releases * np.linspace(1, 1.01, releases.size), releases) is None
    three = np.repeat(np.arange(3), 10)
    assert trend_of(1.5 ** three * np.linspace(1, 1.01, three.size), three) is not None


def test_a_figure_that_is_not_positive_has_no_relative_size_and_no_trend():
    releases = np.repeat(np.arange(4), 4)
    assert trend_of(np.r_[0.0, np.ones(15)] * 1.5 ** releases, releases) is None


def test_find_trends_keeps_only_the_significant_ones_of_the_named_figure():
    rng = np.random.default_rng(3)
    releases = np.repeat(np.arange(5), 4)
    rising = points_of(3 * 1.1 ** releases * (1 + 0.01 * rng.standard_normal(20)), releases)
    flat = points_of(3 * (1 + 0.01 * rng.standard_normal(20)), releases, figure="cte_ms_min")
    (t,) = find_trends(rising + flat)
    assert t.series["figure"] == "tkg_ms_min" and t.regression and math.isfinite(t.low)
    assert find_trends(rising + flat, figure="cte_ms_min") == []
    assert find_trends(rising + flat, max_pvalue=1e-12) == []  # S's exact tail at n = 20 is above that
    assert find_trends(rising + flat, max_pvalue=t.pvalue) == []  # below it, not at it
