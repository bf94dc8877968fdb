"""The statistics a verdict rests on (``harness.core.stats``): the bootstrap interval of a ratio of medians as
the module doc defines it, Student's t (CDF and quantile) against published table values, the paired
between-round interval, and the refusals of samples that are not times. A user reads these figures as the
change between two runs: a wrong quantile, a wrong sign or a silently accepted zero time misleads them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.core.stats import (
    PairedRatio,
    RatioCI,
    change_of_ratio,
    median_ratio_ci,
    paired_ratio_ci,
    student_t_cdf,
    student_t_quantile,
)

pytestmark = pytest.mark.unit

BASE = [10.0, 10.4, 9.8, 10.1, 10.9, 9.7, 10.2]
NEW = [11.0, 10.8, 11.6, 10.9, 11.3]


def bootstrap(base, new, confidence, resamples, seed):
    """The percentile bootstrap as the module doc states it, written out independently: each side resampled
    with replacement by PCG64(seed), the ratio of the resampled medians, its two tail percentiles."""
    rng = np.random.Generator(np.random.PCG64(seed))
    b, n = np.asarray(base), np.asarray(new)
    draws_b = rng.integers(0, len(b), size=(resamples, len(b)))
    draws_n = rng.integers(0, len(n), size=(resamples, len(n)))
    mb = np.median(b[draws_b], axis=1)
    mn = np.median(n[draws_n], axis=1)
    alpha = (1 - confidence) / 2
    return tuple(np.quantile(mn / mb, [alpha, 1 - alpha]))


def test_median_ratio_ci_is_the_documented_seeded_percentile_bootstrap():
    ci = median_ratio_ci(BASE, NEW)
    assert isinstance(ci, RatioCI)
    assert ci.ratio == pytest.approx(np.median(NEW) / np.median(BASE), rel=1e-12)
    assert (ci.n_base, ci.n_new) == (7, 5)
    low, high = bootstrap(BASE, NEW, 0.95, 2000, 0)  # the defaults: 95%, 2000 resamples, seed 0
    assert (ci.low, ci.high) == pytest.approx((low, high), rel=1e-12)
    assert ci.low < ci.ratio < ci.high
    assert median_ratio_ci(BASE, NEW) == ci  # seeded: the same inputs give the same interval
    other = median_ratio_ci(BASE, NEW, confidence=0.8, resamples=300, seed=7)
    assert (other.low, other.high) == pytest.approx(bootstrap(BASE, NEW, 0.8, 300, 7), rel=1e-12)
    assert ci.low < other.low and other.high < ci.high  # a lower confidence, a narrower interval


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5])
def test_median_ratio_ci_refuses_a_confidence_outside_0_1(confidence):
    with pytest.raises(ValueError, match=rf"^confidence={confidence} must be between 0 and 1$"):
        median_ratio_ci(BASE, NEW, confidence=confidence)


@pytest.mark.parametrize("side, samples, message", [
    ("base", [], "base run: no samples"),
    ("new", [], "new run: no samples"),
    ("base", [1.0, math.nan], "base run: samples contain NaN or infinity"),
    ("new", [1.0, math.inf], "new run: samples contain NaN or infinity"),
    ("base", [1.0, 0.0], "base run: samples must be positive (times)"),
    ("new", [2.0, -1.0], "new run: samples must be positive (times)"),
])
def test_median_ratio_ci_refuses_samples_that_are_not_times(side, samples, message):
    base, new = (samples, NEW) if side == "base" else (BASE, samples)
    with pytest.raises(ValueError) as err:
        median_ratio_ci(base, new)
    assert str(err.value) == message


def test_median_ratio_ci_of_continuous_samples_depends_on_the_seed_alone():
    """Forty-one samples a side: the resampled medians take many values, so the interval shows its seed."""
    draw = np.random.Generator(np.random.PCG64(12345))
    base, new = list(draw.lognormal(0.0, 0.1, 41)), list(draw.lognormal(0.05, 0.1, 41))
    ci = median_ratio_ci(base, new)
    assert (ci.low, ci.high) == pytest.approx(bootstrap(base, new, 0.95, 2000, 0), rel=1e-12)
    other = median_ratio_ci(base, new, seed=1)
    assert (ci.low, ci.high) != (other.low, other.high)


def test_median_ratio_ci_takes_times_under_a_second():
    ci = median_ratio_ci([0.004, 0.005, 0.0045], [0.006, 0.0055])
    assert ci.ratio == pytest.approx(0.00575 / 0.0045)


def test_median_ratio_ci_refuses_a_missing_sample_as_not_a_number():
    with pytest.raises(ValueError, match=r"^base run: samples contain NaN or infinity$"):
        median_ratio_ci([1.0, None], NEW)


def test_median_ratio_ci_accepts_any_iterable_and_a_single_sample():
    ci = median_ratio_ci(iter([2.0]), (x for x in [3.0]))
    assert (ci.ratio, ci.low, ci.high, ci.n_base, ci.n_new) == (1.5, 1.5, 1.5, 1, 1)


@pytest.mark.parametrize("ratio, direction, change", [
    (1.10, "max", 0.10), (0.90, "max", -0.10),  # a time: growing is worse
    (0.90, "min", 0.10), (1.10, "min", -0.10),  # a throughput: shrinking is worse
])
def test_change_of_ratio_is_positive_when_worse(ratio, direction, change):
    assert change_of_ratio(ratio, direction) == pytest.approx(change, abs=1e-12)


@pytest.mark.parametrize("ratio", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("direction", ["max", "min"])
def test_change_of_ratio_of_no_ratio_is_infinitely_worse(ratio, direction):
    assert change_of_ratio(ratio, direction) == math.inf


# Student's t, two-sided 95% (the 0.975 quantile) and one-sided 95%, from the published tables (exact digits
# from the closed forms where they exist: df 1 is tan(0.475 pi), df 2 is 0.95 * (2 / (4 * 0.975 * 0.025)) ** 0.5)
T_TABLE = [(0.975, 1, 12.706204736174696), (0.975, 2, 4.302652729749464), (0.975, 5, 2.570581835636314),
           (0.975, 10, 2.228138851986274), (0.975, 30, 2.042272456301238), (0.95, 4, 2.131846786326649),
           (0.025, 3, -3.1824463052837086)]


@pytest.mark.parametrize("p, df, t", T_TABLE)
def test_student_t_quantile_matches_the_table(p, df, t):
    assert student_t_quantile(p, df) == pytest.approx(t, abs=1e-8)


@pytest.mark.parametrize("p, df, t", T_TABLE)
def test_student_t_cdf_inverts_the_table(p, df, t):
    assert student_t_cdf(t, df) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("t, df, p", [
    (1.0, 1, 0.75), (-1.0, 1, 0.25),  # Cauchy: 1/2 + atan(t)/pi
    (2.0, 3, 0.9303370157205784), (-2.0, 3, 1 - 0.9303370157205784),
    (0.3, 4, 0.6104392858612702),  # df 4: 1/2 + 3/4 x (1 - x^2/3), x = t / (4 + t^2) ** 0.5
    (25.0, 2, 0.9992019148942948), (-25.0, 2, 1 - 0.9992019148942948),  # df 2: 1/2 + t / (2 (2 + t^2) ** 0.5)
    (0.0, 6, 0.5), (math.inf, 5, 1.0), (-math.inf, 5, 0.0),
])
def test_student_t_cdf_matches_closed_forms(t, df, p):
    assert student_t_cdf(t, df) == pytest.approx(p, abs=1e-12)


def test_student_t_cdf_of_a_change_of_a_millionth():
    """x = df / (df + t^2) a hair under 1: the reflected branch, to the precision x itself keeps (1e-12)."""
    assert student_t_cdf(1e-6, 1) == pytest.approx(0.5 + math.atan(1e-6) / math.pi, abs=1e-10)
    assert student_t_cdf(-1e-6, 1) == pytest.approx(0.5 - math.atan(1e-6) / math.pi, abs=1e-10)


@pytest.mark.parametrize("p, df", [(0.0, 3), (1.0, 3), (-0.1, 3), (1.2, 3), (0.5, 0)])
def test_student_t_quantile_refuses_p_outside_0_1_or_df_below_1(p, df):
    with pytest.raises(ValueError, match=rf"^p={p} must be in \(0, 1\) and df={df} at least 1$"):
        student_t_quantile(p, df)


def test_student_t_quantile_accepts_df_1():
    assert student_t_quantile(0.975, 1) > 12


def test_paired_ratio_ci_is_the_t_interval_of_the_mean_log_ratio():
    base, new = [100.0, 104.0, 98.0, 101.0], [110.0, 112.0, 109.0, 115.0]
    logs = np.log(np.array(new) / np.array(base))
    half = 3.1824463052837078 * logs.std(ddof=1) / 2  # t(0.975, 3) * s / sqrt(4)
    pr = paired_ratio_ci(base, new)
    assert isinstance(pr, PairedRatio) and pr.pairs == 4
    assert pr.ratio == pytest.approx(math.exp(logs.mean()), rel=1e-12)
    assert (pr.low, pr.high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)),
                                              rel=1e-8)
    narrow = paired_ratio_ci(base, new, confidence=0.9)  # t(0.95, 3)
    half90 = 2.353363434801823 * logs.std(ddof=1) / 2
    assert (narrow.low, narrow.high) == pytest.approx((math.exp(logs.mean() - half90),
                                                       math.exp(logs.mean() + half90)), rel=1e-8)


def test_paired_ratio_ci_of_two_pairs_uses_df_1():
    pr = paired_ratio_ci([1.0, 1.0], [1.0, math.e ** 0.2])
    s = math.sqrt(2 * 0.1 ** 2)  # logs 0 and 0.2: mean 0.1, sample sd 0.1 * sqrt(2)
    half = 12.706204736174696 * s / math.sqrt(2)
    assert (pr.ratio, pr.pairs) == (pytest.approx(math.exp(0.1)), 2)
    assert (pr.low, pr.high) == pytest.approx((math.exp(0.1 - half), math.exp(0.1 + half)), rel=1e-8)


def test_paired_ratio_ci_of_one_pair_has_a_ratio_and_no_interval():
    assert paired_ratio_ci([4.0], [5.0]) == PairedRatio(pytest.approx(1.25), None, None, 1)


@pytest.mark.parametrize("base, new", [
    ([], []), ([1.0, math.nan], [1.0, 1.0]), ([1.0, 1.0], [math.inf, 1.0]),
    ([0.0, 1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, -2.0]), ([1.0, 1.0], [0.0, 1.0]),
    ([1.0, None], [1.0, 1.0]), ([1.0, 1.0], [None, 1.0]),  # a round's figure missing (JSON null)
])
def test_paired_ratio_ci_without_a_usable_value_has_no_ratio(base, new):
    pr = paired_ratio_ci(base, new)
    assert math.isnan(pr.ratio) and (pr.low, pr.high, pr.pairs) == (None, None, len(base))


def test_paired_ratio_ci_refuses_rounds_that_do_not_pair_up():
    with pytest.raises(ValueError, match=r"^3 baseline rounds and 2 candidate rounds: the rounds must pair up$"):
        paired_ratio_ci([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("confidence", [0.0, 1.0])
def test_paired_ratio_ci_refuses_a_confidence_outside_0_1(confidence):
    with pytest.raises(ValueError, match=rf"^confidence={confidence} must be between 0 and 1$"):
        paired_ratio_ci([1.0, 2.0], [1.0, 2.0], confidence=confidence)
