"""A trend across releases: a slow drift (each release a little slower, every step inside a pairwise check's
power and below what a change point needs) is a monotone trend of the figure over the release order, and a
rank test sees it where no single step stands out. Mann and Kendall's test: Kendall's S between each run's
release rank and its figure (runs of one release tied in rank, so it is Jonckheere and Terpstra's test of
ordered groups), which reads only the order of the figures, so one run that a loaded machine makes 10-20% slower
moves S by its rank alone, not by its size. It decides at ``max_pvalue``, the change points' false-alarm
probability, never at a literal bound, on S's exact distribution under no trend (every order of the runs alike
likely: the q-multinomial coefficients of the releases' sizes); the normal approximation, with ties and a
continuity correction, only where figures tie or a series is longer than ``EXACT_RUNS``. Its tails are heavier
than the exact ones at a false-alarm probability of 0.001: four releases of six runs, S = 128, read p = 0.0011
by the approximation and 0.00068 exactly (fixtures/history/quiet/drift). The size is Theil and Sen's slope of
log(figure) per release (the median of the slopes between runs of different releases), with Sen's interval,
which inverts the same S at the same probability: it excludes 0 exactly where the test rejects (figures without
ties). Pure functions."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.stats import norm

from harness.history.changes import MAX_PVALUE, group_series
from harness.history.clocks import why_not_judged
from harness.history.store import SERIES_COLUMNS

MIN_RELEASES = 3  # two releases are one step, which the change points and a pairwise check judge
EXACT_RUNS = 120  # S's exact distribution up to this many runs (a few milliseconds); the normal one beyond


@dataclass(frozen=True)
class Trend:
    series: dict[str, str]
    releases: list[str]  # in the series' release order (each where it was first seen)
    runs: int
    first: float  # median of the first release's runs
    last: float  # median of the last release's runs
    per_release: float  # relative change a release: exp(Theil-Sen slope of log figure) - 1
    low: float  # Sen's interval at 1 - max_pvalue, the same relative units
    high: float
    s: int  # Kendall's S: concordant minus discordant pairs of (release rank, figure)
    pvalue: float  # two-sided: exact (``exact``), else the normal approximation with ties and a continuity correction
    exact: bool
    regression: bool  # worse in the figure's direction ("max": a time rising release by release)

    def describe(self) -> str:
        s = self.series
        word = "REGRESSION" if self.regression else "improvement"
        return (f"{s['figure']} {100 * self.per_release:+.1f}% a release [{100 * self.low:+.1f}%, "
                f"{100 * self.high:+.1f}%] {word} trend across {len(self.releases)} releases ({self.releases[0]} .. "
                f"{self.releases[-1]}; {self.runs} runs): median {self.first:.4g} -> {self.last:.4g}, "
                f"p={self.pvalue:.2g}; series {s['benchmark']} {s['model']}/{s['shape']} {s['backend']} {s['dtype']} "
                f"on {s['hardware']}, {s['timer']} time")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def s_variance(n: int, rank_ties: list[int], value_ties: list[int]) -> float:
    """Var(S) under no trend, with ties in both (Kendall, Rank Correlation Methods, 1970, eq. 4.3)."""
    v0 = n * (n - 1) * (2 * n + 5)
    vt = sum(t * (t - 1) * (2 * t + 5) for t in rank_ties)
    vu = sum(u * (u - 1) * (2 * u + 5) for u in value_ties)
    var = (v0 - vt - vu) / 18
    if n > 2:
        var += (sum(t * (t - 1) * (t - 2) for t in rank_ties) * sum(u * (u - 1) * (u - 2) for u in value_ties)
                / (9 * n * (n - 1) * (n - 2)))
    var += sum(t * (t - 1) for t in rank_ties) * sum(u * (u - 1) for u in value_ties) / (2 * n * (n - 1))
    return var


def kendall_s(ranks: np.ndarray, values: np.ndarray) -> int:
    dx = np.sign(ranks[None, :] - ranks[:, None])
    dy = np.sign(values[None, :] - values[:, None])
    return int(np.triu(dx * dy, 1).sum())


def pairwise_slopes(ranks: np.ndarray, logs: np.ndarray) -> np.ndarray:
    """The slopes between every two runs of different releases, sorted."""
    i, j = np.triu_indices(len(ranks), 1)
    dx = ranks[j] - ranks[i]
    keep = dx != 0
    return np.sort((logs[j] - logs[i])[keep] / dx[keep])


@lru_cache(maxsize=256)
def concordance_counts(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``counts[c]``: of the orders of n distinct figures over releases of these sizes, how many put ``c`` of the
    pairs of two releases in rising order: the q-multinomial coefficient [n; sizes]_q, built as [n]_q! over each
    release's [size]_q!, in exact integers ([m]_q! is the product of 1 + q + ... + q^(i-1), i = 1..m)."""
    poly = [1]
    for i in range(2, sum(sizes) + 1):  # times 1 + q + ... + q^(i-1): a running sum of i terms
        run, out = 0, []
        for k in range(len(poly) + i - 1):
            run += (poly[k] if k < len(poly) else 0) - (poly[k - i] if k >= i else 0)
            out.append(run)
        poly = out
    for size in sizes:
        for i in range(2, size + 1):  # over 1 + q + ... + q^(i-1): times (1 - q), over (1 - q^i)
            diff = [(poly[k] if k < len(poly) else 0) - (poly[k - 1] if k else 0) for k in range(len(poly) + 1)]
            out = []
            for k in range(len(diff) - i):
                out.append(diff[k] + (out[k - i] if k >= i else 0))
            poly = out
    return tuple(poly)


def exact_tail(sizes: tuple[int, ...], s: int) -> float:
    """P(|S| >= |s|) under no trend, S = 2 C - M (C rising pairs of M across releases; symmetric about 0)."""
    counts = concordance_counts(sizes)
    m = len(counts) - 1
    if s == 0:
        return 1.0
    return min(1.0, 2 * sum(counts[(m + abs(s) + 1) // 2:]) / sum(counts))


def critical_s(sizes: tuple[int, ...], exact: bool, sd: float, max_pvalue: float) -> int:
    """The least |S| the test rejects at ``max_pvalue``: reject exactly when |S| >= it."""
    if not exact:  # (|S| - 1) / sd > z: |S| > z sd + 1
        return math.floor(float(norm.ppf(1 - max_pvalue / 2)) * sd + 1) + 1
    counts = concordance_counts(sizes)
    total, m, tail = sum(counts), len(counts) - 1, 0
    for c in range(m, m // 2, -1):  # S = 2c - m > 0, from the top down, while its two tails stay below max_pvalue
        if 2 * (tail + counts[c]) >= max_pvalue * total:
            return 2 * c - m + 2  # m + 2 where even S = m is not rejected: no S is
        tail += counts[c]
    return 2 * (m // 2 + 1) - m  # every S above 0 is rejected


def sen_interval(slopes: np.ndarray, critical: int) -> tuple[float, float]:
    """The sorted ``slopes``' interval for a test that rejects |S| >= ``critical``: S = N - 2 (slopes below 0)
    without zero slopes, so the lower end is above 0 exactly when S >= critical (0-based slope floor((N - c) / 2)),
    the upper below 0 exactly when -S >= critical; unbounded when no S is rejected."""
    lo_i = (len(slopes) - critical) // 2
    hi_i = len(slopes) - 1 - lo_i
    return (float(slopes[lo_i]), float(slopes[hi_i])) if 0 <= lo_i <= hi_i else (-math.inf, math.inf)


def release_trend(key: tuple, pts: list[dict[str, Any]], max_pvalue: float = MAX_PVALUE) -> Trend | None:
    """The trend of one series whose points are in release order (``group_series(..., "release")``); None with
    fewer than ``MIN_RELEASES`` releases or a figure that is not positive (its size is a ratio)."""
    releases = list(dict.fromkeys(p["release"] for p in pts))
    values = np.array([float(p["value"]) for p in pts])
    if len(releases) < MIN_RELEASES or not np.all(values > 0) or not np.all(np.isfinite(values)):
        return None
    rank_of = {r: k for k, r in enumerate(releases)}
    ranks = np.array([rank_of[p["release"]] for p in pts], dtype=float)
    n = len(values)
    s = kendall_s(ranks, values)
    sizes = tuple(int((ranks == k).sum()) for k in range(len(releases)))
    value_ties = list(Counter(values.tolist()).values())
    exact = n <= EXACT_RUNS and max(value_ties) == 1
    sd = math.sqrt(s_variance(n, list(sizes), value_ties))
    if exact:
        pvalue = exact_tail(sizes, s)
    else:
        pvalue = 1.0 if s == 0 else min(1.0, 2 * float(norm.sf((abs(s) - 1) / sd)))
    # Sen's interval: the slopes b for which S of (rank, log figure - b rank) is not rejected
    slopes = pairwise_slopes(ranks, np.log(values))
    low, high = sen_interval(slopes, critical_s(sizes, exact, sd, max_pvalue))
    slope = float(np.median(slopes))
    first = float(np.median(values[ranks == 0]))
    last = float(np.median(values[ranks == len(releases) - 1]))
    worse = slope > 0 if pts[0]["direction"] == "max" else slope < 0
    return Trend(dict(zip(SERIES_COLUMNS, key)), releases, n, first, last, math.expm1(slope), math.expm1(low),
                 math.expm1(high), s, pvalue, exact, bool(worse))


def find_trends(points: list[dict[str, Any]], max_pvalue: float = MAX_PVALUE, figure: str | None = None) -> list[Trend]:
    """Every series' significant trend across releases (p < ``max_pvalue``), series by series; none in a series the
    history does not judge (``clocks.why_not_judged``), as for change points."""
    out = []
    series = group_series(points, "release")
    for key, pts in sorted(series.items()):
        if (figure is None or key[0] == figure) and not why_not_judged(key, series.keys()):
            t = release_trend(key, pts, max_pvalue)
            if t is not None and t.pvalue < max_pvalue:
                out.append(t)
    return out
