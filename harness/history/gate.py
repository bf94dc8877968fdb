"""A new run judged against the recent history of the same series (Bencher's and conbench's way): each
figure against the runs since its series' last change point, by the t prediction interval of one more
run from that history, at 1 - max_pvalue. The width is the history's own noise; a series with fewer
than ``MIN_HISTORY`` runs is not judged here, and says so: the fixed thresholds gate it as before. Nor is a
figure the history does not judge (``harness.history.clocks``: a wall-clock figure, or a typical round's time,
of a run timed in CPU time): it is reported as not judged, with why."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import t as student_t

from harness.history.changes import MAX_PVALUE, group_series, series_changes
from harness.history.clocks import NotJudged, left_out, why_not_judged
from harness.history.records import Run
from harness.history.store import SERIES_COLUMNS

MIN_HISTORY = 3  # the fewest runs with a spread (two degrees of freedom) for a prediction interval
WINDOW = 50  # the most recent runs a judgement looks at: Otava's window


@dataclass(frozen=True)
class Judged:
    series: dict[str, str]
    value: float
    history: int  # runs judged against (0: none; the fixed thresholds stay)
    mean: float | None
    low: float | None  # the prediction interval of one more run from the history
    high: float | None
    regression: bool
    not_judged: str | None = None  # why the history does not judge this figure (clocks.why_not_judged)

    def describe(self) -> str:
        s = self.series
        name = (f"{s['figure']} of {s['benchmark']} {s['model']}/{s['shape']} {s['backend']} on {s['hardware']} "
                f"({s['timer']} time)")
        if self.not_judged:
            return f"{name}: {self.value:.4g}, not judged: {self.not_judged}"
        if self.history < MIN_HISTORY:
            return f"{name}: {self.value:.4g}, not judged: {self.history} runs of history (needs {MIN_HISTORY})"
        word = "REGRESSION" if self.regression else "ok"
        return (f"{name}: {self.value:.4g} vs {self.history} runs (mean {self.mean:.4g}, expected "
                f"[{self.low:.4g}, {self.high:.4g}]): {word}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prediction_interval(values: list[float], max_pvalue: float) -> tuple[float, float, float]:
    n = len(values)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = student_t.ppf(1 - max_pvalue / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    return mean, mean - half, mean + half


def recent(pts: list[dict[str, Any]], key: tuple, max_pvalue: float) -> list[float]:
    """The series' last ``WINDOW`` runs since its last change point (the level it is at now)."""
    pts = pts[-WINDOW:]
    changes = series_changes(key, pts, max_pvalue)
    start = changes[-1].index - 1 if changes else 0
    return [float(p["value"]) for p in pts[start:]]


def judge(run: Run, points: list[dict[str, Any]], max_pvalue: float = MAX_PVALUE) -> list[Judged]:
    """Each figure of ``run`` against its series' history in ``points`` (which must not hold the run); a
    figure the history does not judge is returned unjudged, ``not_judged`` saying why (its history counted as 0 runs)."""
    series = group_series(points)
    keys = {tuple(getattr(f, k) for k in SERIES_COLUMNS) for f in run.figures}
    out = []
    for f in run.figures:
        key = tuple(getattr(f, k) for k in SERIES_COLUMNS)
        why = why_not_judged(key, keys)
        if why:
            out.append(Judged(dict(zip(SERIES_COLUMNS, key)), f.value, 0, None, None, None, False, why))
            continue
        history = recent(series[key], key, max_pvalue) if key in series else []
        if len(history) < MIN_HISTORY:
            out.append(Judged(dict(zip(SERIES_COLUMNS, key)), f.value, len(history), None, None, None, False))
            continue
        mean, low, high = prediction_interval(history, max_pvalue)
        worse = f.value > high if f.direction == "max" else f.value < low
        out.append(Judged(dict(zip(SERIES_COLUMNS, key)), f.value, len(history), mean, low, high, bool(worse)))
    return out


@dataclass(frozen=True)
class Tally:
    """What a judgement of one run comes to, as ``history gate`` and ``--carbon-history`` print it."""
    judged: int  # figures judged against their history
    worse: list[Judged]  # the regressions among them
    without_history: int  # fewer than MIN_HISTORY runs: the fixed thresholds gate them
    not_judged: list[NotJudged]  # figures the history does not judge, one entry a figure and reason

    @classmethod
    def of(cls, judged: list[Judged]) -> Tally:
        left = [j for j in judged if j.not_judged]
        without = sum(j.history < MIN_HISTORY and not j.not_judged for j in judged)
        return cls(len(judged) - without - len(left), [j for j in judged if j.regression], without,
                   left_out((j.series["figure"], j.not_judged) for j in left))
