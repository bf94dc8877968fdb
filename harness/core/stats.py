"""Is a change between two runs real? A bootstrap confidence interval of the ratio of medians.

Method (chosen over Mann-Whitney U so the harness needs no scipy and the answer is an interval,
not just a p-value): resample each run's samples with replacement, ``RESAMPLES`` times, each side
independently, with numpy's PCG64 seeded with ``SEED`` (so the same inputs always give the same
interval); the ratio of the two resampled medians, new / base, gives a distribution whose
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles are the interval (the percentile
bootstrap). ``compare`` calls a regression only when the whole interval of the change lies beyond
the tolerance: the point estimate is worse than the tolerance AND that is significant at the
one-sided level ``(1 - confidence) / 2`` (2.5% at the default 95%). A true change exactly at the
tolerance is then flagged at most about 2.5% of the time; tests/unit/analysis/test_report.py measures the
false-alarm rate of a 3% change under a 5% tolerance and the detection rate of a 10% one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class RatioCI:
    """new / base ratio of medians: point estimate and confidence interval."""

    ratio: float
    low: float
    high: float
    n_base: int
    n_new: int


def _clean(samples: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(list(samples), dtype=float)
    if arr.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what}: samples contain NaN or infinity")
    if (arr <= 0).any():
        raise ValueError(f"{what}: samples must be positive (times)")
    return arr


def median_ratio_ci(base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE,
                    resamples: int = RESAMPLES, seed: int = SEED) -> RatioCI:
    """Percentile-bootstrap interval of median(new) / median(base), seeded (see the module doc)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be between 0 and 1")
    b, n = _clean(base, "base run"), _clean(new, "new run")
    rng = np.random.Generator(np.random.PCG64(seed))
    mb = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    mn = np.median(n[rng.integers(0, n.size, size=(resamples, n.size))], axis=1)
    ratios = mn / mb
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return RatioCI(float(np.median(n) / np.median(b)), float(low), float(high), int(b.size), int(n.size))


def change_of_ratio(ratio: float, direction: str) -> float:
    """Relative change signed so that positive is worse: a time (``max``) that grows, a
    throughput (``min``) that shrinks."""
    if not math.isfinite(ratio):
        return math.inf
    return ratio - 1.0 if direction == "max" else 1.0 - ratio


# ---------------------------------------------------------------------------------------------
# Between-round intervals: a release check's rounds are fresh processes, A and B interleaved
# ---------------------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
            if aa < 0 and abs(d * c - 1.0) < 1e-14:
                return h
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: int) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF:
    exact to 1e-10, and no scipy)."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"p={p} must be in (0, 1) and df={df} at least 1")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class PairedRatio:
    """Candidate / baseline ratio over paired rounds: geometric mean of the per-round ratios and its
    Student-t interval (None with fewer than two pairs, or a non-positive value)."""

    ratio: float
    low: float | None
    high: float | None
    pairs: int


def paired_ratio_ci(base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE) -> PairedRatio:
    """Rounds ``i`` of the two sides ran back to back (interleaved, each a fresh process), so
    machine drift hits both sides of a pair alike: the interval is of the mean log ratio of the
    pairs, from the spread between rounds, not from the samples inside one process."""
    if len(base) != len(new):
        raise ValueError(f"{len(base)} baseline rounds and {len(new)} candidate rounds: the rounds must pair up")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be between 0 and 1")
    b, n = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    if b.size == 0 or not (np.isfinite(b).all() and np.isfinite(n).all()) or (b <= 0).any() or (n <= 0).any():
        return PairedRatio(math.nan, None, None, int(b.size))
    logs = np.log(n / b)
    mean = float(logs.mean())
    if logs.size < 2:
        return PairedRatio(math.exp(mean), None, None, 1)
    half = student_t_quantile((1 + confidence) / 2, logs.size - 1) * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), int(logs.size))
