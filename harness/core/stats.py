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
