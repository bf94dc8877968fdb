"""Change points over each series with Apache Otava's E-divisive means (``otava.analysis.
compute_change_points``: Matteson and James's split over sliding windows, then Fleming et al.'s merge
by a two-sided t-test). Every threshold is the series' own: a change is kept when its t-test p-value,
which scales the step by the noise of the runs around it, is below ``max_pvalue``, a false-alarm
probability (Otava's default), not a bound on any figure; and when its size is at least ``FLOOR_NOISES``
times the series' own run-to-run noise (``noise``). A series the history does not judge (a wall-clock figure,
or a typical round's time, of runs timed in CPU time: ``harness.history.clocks``) has none. Pure functions over
the store's points."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import t as student_t

from harness.history.clocks import why_not_judged
from harness.history.store import SERIES_COLUMNS

MAX_PVALUE = 0.001  # otava.analysis.compute_change_points' default false-alarm probability
# The fewest runs on each side of a change: one run apart from the rest is an outlier, not a new level (Otava
# keeps it: a first run's TKG p99 of 10.1 ms against 4.1-4.4 ms after it was a "change" at run 2 in the A/A of
# fixtures/history/cpu-time). A single new run is what ``history gate`` judges.
MIN_LEVEL_RUNS = 2
# A change is kept only when its size is at least this many times the series' run-to-run noise (``noise``). Measured
# on this project's real carbon-tiny runs (docs/history.md, "What the history judges"; fixtures/history/quiet/
# summary.json "judges"), in the figures judged: the A/As' changes by Otava's test alone were at most 2.44 noises
# (fixtures/history/random-load/aa, tkg_ms_min -4.5% at 1.8% noise; then 2.12, quiet/aa's cte_ms_min -5.9% at 2.8%),
# each significant at p < 0.001 because the box's level moves for minutes at a time; the quiet step planted from run
# 11 was 3.12 (tkg_ms_min +14.5% at 4.7%). 2.75 is about their geometric middle: 1.13 times the one, 1/1.13 the other.
FLOOR_NOISES = 2.75
# the median absolute value of a normal (its 0.75 quantile, in sigmas) times sqrt 2: a difference of two runs' spread
MASD_SIGMA = 0.6745 * math.sqrt(2)
ORDERS = ("time", "release")


@dataclass(frozen=True)
class Change:
    series: dict[str, str]
    index: int  # the first run after the change, counted from 1 in the series' order
    runs: int  # the series' length
    commit: str | None
    release: str
    time: str
    report: str
    before: float  # mean of the runs between the previous change (or the start) and this one
    after: float
    change: float  # relative: after / before - 1
    low: float  # its interval at 1 - max_pvalue (the t-test's own: it excludes 0 as the test rejects)
    high: float
    pvalue: float
    noise: float  # the series' run-to-run noise, relative (``noise``)
    floor: float  # the smallest relative change kept: FLOOR_NOISES x noise
    regression: bool  # worse in the figure's direction ("max": a time went up)
    newest: bool  # among the series' newest runs (see ``newest_runs``)

    def describe(self) -> str:
        s = self.series
        where = f"run {self.index} of {self.runs} ({self.release}; commit {(self.commit or '-')[:12]}; {self.time})"
        word = "REGRESSION" if self.regression else "improvement"
        return (f"{s['figure']} {100 * self.change:+.1f}% [{100 * self.low:+.1f}%, {100 * self.high:+.1f}%] "
                f"{word} at {where}: {self.before:.4g} -> {self.after:.4g}, p={self.pvalue:.2g}, "
                f"floor {100 * self.floor:.1f}% = {FLOOR_NOISES:g} x noise {100 * self.noise:.1f}%; "
                f"series {s['benchmark']} {s['model']}/{s['shape']} {s['backend']} {s['dtype']} on {s['hardware']}, "
                f"{s['timer']} time")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_series(points: list[dict[str, Any]], order: str = "time") -> dict[tuple, list[dict[str, Any]]]:
    """The points of each series in order: by run time, or by release (releases in the order each was
    first seen, runs within one by time)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: give one of {', '.join(ORDERS)}")
    series: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for p in points:  # the store's order: by time, then as added
        series[tuple(p[k] for k in SERIES_COLUMNS)].append(p)
    if order == "release":
        for key, pts in series.items():
            first: dict[str, int] = {}
            for i, p in enumerate(pts):
                first.setdefault(p["release"], i)
            series[key] = sorted(pts, key=lambda p: first[p["release"]])  # stable: time within a release
    return dict(series)


def newest_runs(n: int) -> int:
    """How many of a series' last runs count as "the newest" for the exit code: the last sqrt(n) of n
    (4 of 20, 10 of 100), at least one, so a change found there is one the latest runs brought, not
    one the series has carried for a while (which exited 1 when it was new)."""
    return max(1, math.isqrt(n))


def interval(stats: Any, n1: int, n2: int, max_pvalue: float) -> tuple[float, float]:
    """The relative change's interval from the t-test Otava decides with (Student's, pooled variance,
    its std values), at confidence 1 - max_pvalue, as a fraction of the mean before."""
    df = n1 + n2 - 2
    diff = stats.mean_2 - stats.mean_1
    if df <= 0 or stats.mean_1 == 0:
        return (-math.inf, math.inf)
    pooled = ((n1 - 1) * stats.std_1 ** 2 + (n2 - 1) * stats.std_2 ** 2) / df
    half = student_t.ppf(1 - max_pvalue / 2, df) * math.sqrt(pooled * (1 / n1 + 1 / n2))
    return ((diff - half) / stats.mean_1, (diff + half) / stats.mean_1)


def noise(values: list[float]) -> float:
    """The series' run-to-run noise relative to its median: the median absolute difference of successive runs,
    scaled to a standard deviation (MASD_SIGMA). A step moves one difference only, so it does not inflate the
    estimate, as a standard deviation of the whole series would; a level moving slowly moves each difference by
    little. 0 for fewer than two runs or a median of 0."""
    middle = statistics.median(values) if values else 0.0
    if len(values) < 2 or middle == 0:
        return 0.0
    return statistics.median(abs(b - a) for a, b in zip(values, values[1:])) / MASD_SIGMA / abs(middle)


def relative(stats: Any) -> float:
    return stats.mean_2 / stats.mean_1 - 1 if stats.mean_1 else math.inf


def levels(values: list[float], found: list[int], max_pvalue: float, floor: float = 0.0) -> list[tuple[int, Any]]:
    """Otava's change points with every level at least ``MIN_LEVEL_RUNS`` runs long: a change next to a shorter
    level is dropped (of the two around it, the one Otava's own t-test finds weaker on its neighbours), then a change
    smaller than ``floor`` (relative), the smallest first, and each change left is tested again, by the same test,
    between the levels now around it; one that is no longer significant at ``max_pvalue`` is dropped too, the
    weakest first. Returns each change's index and stats. (Otava's own ``min_magnitude`` is not this floor: its
    merge keeps a change that passes either the p-value or the magnitude, it measures the larger of the change
    forward and backward, and the changes this loop re-tests after dropping a short level would escape it.)"""
    from otava.analysis import TTestSignificanceTester

    tester, n, cps = TTestSignificanceTester(max_pvalue), len(values), sorted(found)

    def tested() -> list[tuple[int, Any]]:
        bounds = [0, *cps, n]
        return [(i, tester.compare(values[bounds[k]:i], values[i:bounds[k + 2]])) for k, i in enumerate(cps)]

    while cps:
        bounds, stats = [0, *cps, n], dict(tested())
        short = next((k for k in range(len(bounds) - 1) if bounds[k + 1] - bounds[k] < MIN_LEVEL_RUNS), None)
        if short is not None:
            around = [i for i in (bounds[short], bounds[short + 1]) if i in stats]
            cps.remove(max(around, key=lambda i: stats[i].pvalue))
            continue
        small = [i for i in cps if abs(relative(stats[i])) < floor]
        if small:
            cps.remove(min(small, key=lambda i: abs(relative(stats[i]))))
            continue
        weakest = max(cps, key=lambda i: stats[i].pvalue)
        if stats[weakest].pvalue < max_pvalue:
            break
        cps.remove(weakest)
    return tested()


def series_changes(key: tuple, pts: list[dict[str, Any]], max_pvalue: float = MAX_PVALUE) -> list[Change]:
    from otava.analysis import compute_change_points

    values = [float(p["value"]) for p in pts]
    n = len(values)
    if n < 3:
        return []
    found, _ = compute_change_points(values, max_pvalue=max_pvalue)  # Otava's window (50 runs); the floor: levels
    spread = noise(values)
    kept = levels(values, [int(c.index) for c in found], max_pvalue, FLOOR_NOISES * spread)
    bounds = [0, *(i for i, _ in kept), n]
    out = []
    for k, (i, st) in enumerate(kept):
        n1, n2 = i - bounds[k], bounds[k + 2] - i
        low, high = interval(st, n1, n2, max_pvalue)
        change = relative(st)
        worse = change > 0 if pts[i]["direction"] == "max" else change < 0
        p = pts[i]
        out.append(Change(dict(zip(SERIES_COLUMNS, key)), i + 1, n, p["commit"], p["release"], p["time"], p["report"],
                          float(st.mean_1), float(st.mean_2), float(change), float(low), float(high),
                          float(st.pvalue), spread, FLOOR_NOISES * spread, bool(worse), i >= n - newest_runs(n)))
    return out


def find_changes(points: list[dict[str, Any]], order: str = "time", max_pvalue: float = MAX_PVALUE,
                 figure: str | None = None) -> list[Change]:
    """Every change point of every series (of one figure where given), series by series; none in a series the
    history does not judge (``clocks.why_not_judged``: ``clocks.unjudged`` reports those)."""
    out = []
    series = group_series(points, order)
    for key, pts in sorted(series.items()):
        if (figure is None or key[0] == figure) and not why_not_judged(key, series.keys()):
            out += series_changes(key, pts, max_pvalue)
    return out
