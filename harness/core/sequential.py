"""Sequential paired rounds: when a release check has seen enough A B / B A pairs to decide every
gated figure, and what it decides.

Why sequential: the pairs a fixed count needs are set by the noisiest host and the smallest change
worth catching, while most checks (an A/A on a quiet host, a 60% regression) are decided in a few
pairs. A check therefore adds pairs until each gated figure is decided, between ``min_pairs`` and
``max_pairs``, looking at the evidence every ``step`` pairs.

Per gated figure, from its complete pairs (round ``k`` of both sides; a round either side lacks is
left out, never shifted), ``d_k = log(candidate_k / baseline_k)`` signed so positive is worse, with
Student's t on ``n - 1`` degrees of freedom at each look ``n``:

- **FAIL** needs the change to lie beyond the figure's tolerance: the one-sided p-value of "the true
  change is at most the tolerance", multiplied by the number of planned looks (Bonferroni over looks,
  so peeking costs nothing), smallest so far; then Holm across the check's gated figures at
  ``alpha / legs`` (``legs``: checks merged into one verdict, such as one per model). So the whole
  check (every figure, every look, every leg) calls identical code a regression at most ``alpha`` of
  the time, whatever the noise. The median change must also pass the figure's absolute floor.
- **PASS** needs a large change to be ruled out: the one-sided upper bound at ``1 - beta / looks``
  lies under ``resolve`` (default 30%), or under the figure's absolute floor.
- A decided figure stays decided. The check stops at the first look where none is open; a figure
  still open at ``max_pairs`` is **unresolved**, and the verdict is INCONCLUSIVE saying so (and what
  would decide it, ``pairs_to_decide`` / ``spread_to_decide``): a gate never passes for lack of
  evidence, nor calls the lack of it a regression.
- A figure that lost pairs gets a last look at the final round with what it has, if that is at least
  ``min_pairs`` (no look, early or late, stands on fewer pairs than the design's first).

Pure numbers (no I/O): ``harness.release.rounds`` asks it after every pair whether to go on,
``harness.analysis.verdict`` replays it on the evidence, and ``python -m harness.release.power``
simulates it at measured noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from harness.core.stats import student_t_cdf, student_t_quantile

OPEN, FAIL, PASS, UNRESOLVED = "open", "fail", "pass", "unresolved"


@dataclass(frozen=True)
class Design:
    """The looks and the error budget of a sequential check (``min_pairs == max_pairs``: a fixed
    count, one look)."""

    min_pairs: int = 4
    max_pairs: int = 16
    step: int = 4  # looks at 4, 8, 12, 16: fewer looks spend less of alpha (docs/release-check.md: gate power)
    alpha: float = 0.05  # family-wise false-alarm rate of the whole verdict (all legs)
    beta: float = 0.05  # chance of passing a change as large as ``resolve``, per figure
    resolve: float = 0.30  # the change every PASS must rule out
    legs: int = 1

    def __post_init__(self) -> None:
        if not 3 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"min_pairs={self.min_pairs}, max_pairs={self.max_pairs}: need 3 <= min <= max (an "
                             "interval from the spread between rounds needs at least two degrees of freedom)")
        if self.step < 1:
            raise ValueError(f"step={self.step} must be at least 1")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name}={value} must be between 0 and 1")
        if not self.resolve > 0:
            raise ValueError(f"resolve={self.resolve} must be a positive fraction (0.30 for 30%)")
        if self.legs < 1:
            raise ValueError(f"legs={self.legs} must be at least 1")

    @property
    def looks(self) -> tuple[int, ...]:
        looks = list(range(self.min_pairs, self.max_pairs + 1, self.step))
        if looks[-1] != self.max_pairs:
            looks.append(self.max_pairs)
        return tuple(looks)

    @property
    def fail_alpha(self) -> float:
        """The family-wise level of one check (one leg)."""
        return self.alpha / self.legs

    def describe(self) -> str:
        fixed = self.min_pairs == self.max_pairs
        pairs = f"{self.max_pairs} pairs" if fixed else (f"looks at {', '.join(map(str, self.looks))} pairs")
        legs = f" over {self.legs} legs" if self.legs > 1 else ""
        return (f"{pairs}; FAIL: beyond tolerance, family-wise false alarm <= {100 * self.alpha:g}%{legs} (Holm "
                f"across figures, Bonferroni across looks); PASS: a {100 * self.resolve:g}% change ruled out "
                f"at {100 * (1 - self.beta):g}%")


@dataclass(frozen=True)
class Series:
    """One gated figure's complete pairs, in round order: ``(round k, d_k)`` with ``d_k`` the log
    ratio signed so positive is worse."""

    key: str
    pairs: tuple[tuple[int, float], ...]
    tolerance: float
    floor: float | None = None  # absolute change that never counts (same unit as base_median)
    base_median: float = math.nan
    absolute: float = 0.0  # median candidate minus median baseline, positive worse


@dataclass
class Decision:
    key: str
    state: str = OPEN
    at_pairs: int | None = None  # the look that decided it
    at_round: int | None = None
    p_fail: float = 1.0  # look-adjusted (Bonferroni) one-sided p of "within tolerance", smallest so far
    holm_level: float | None = None  # the Holm level it was held to when it failed
    upper: float | None = None  # change (not log) at the last look: one-sided upper bound at 1 - beta/looks
    looks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state, "at_pairs": self.at_pairs, "at_round": self.at_round, "p_fail": self.p_fail,
                "holm_level": self.holm_level, "upper_bound": self.upper, "looks": list(self.looks)}


@lru_cache(maxsize=4096)
def _t_quantile(p: float, df: int) -> float:
    return student_t_quantile(p, df)


def _moments(logs: Sequence[float]) -> tuple[float, float]:
    n = len(logs)
    mean = math.fsum(logs) / n
    var = math.fsum((x - mean) ** 2 for x in logs) / (n - 1)
    return mean, math.sqrt(var)


def p_within_tolerance(logs: Sequence[float], tolerance: float) -> float:
    """One-sided p-value of H0 "the true change is at most ``tolerance``" (small: a regression)."""
    mean, sd = _moments(logs)
    excess = mean - math.log1p(tolerance)
    if sd == 0.0:
        return 0.0 if excess > 0 else 1.0
    return 1.0 - student_t_cdf(excess / (sd / math.sqrt(len(logs))), len(logs) - 1)


def upper_change(logs: Sequence[float], level: float) -> float:
    """The one-sided upper bound of the change (``ratio - 1``) at ``level``."""
    mean, sd = _moments(logs)
    return math.expm1(mean + _t_quantile(level, len(logs) - 1) * sd / math.sqrt(len(logs)))


def decide(series: Sequence[Series], design: Design, rounds_done: int, final: bool | None = None) -> list[Decision]:
    """Replay the looks over rounds ``1..rounds_done``: each figure's decision, in ``series`` order.
    ``final`` (default: ``rounds_done >= design.max_pairs``) turns figures still open into unresolved."""
    looks = design.looks
    k_looks = len(looks)
    m = len(series)
    decisions = [Decision(s.key) for s in series]
    counts = [0] * m
    pass_level = 1.0 - design.beta / k_looks
    last = final if final is not None else rounds_done >= design.max_pairs
    for k in range(1, rounds_done + 1):
        for i, s in enumerate(series):
            d = decisions[i]
            if d.state != OPEN:
                continue
            counts[i] += any(kk == k for kk, _ in s.pairs)
            # a figure that lost pairs (a round that left nothing) gets its last look at the final round,
            # with what it has: it never reaches max_pairs, and must not be left open for that
            late = (last and k == rounds_done and counts[i] >= design.min_pairs
                    and (not d.looks or d.looks[-1] != counts[i]))
            if not (counts[i] in looks and (not d.looks or d.looks[-1] != counts[i])) and not late:
                continue
            logs = [x for kk, x in s.pairs if kk <= k]
            d.looks.append(counts[i])
            d.p_fail = min(d.p_fail, min(1.0, k_looks * p_within_tolerance(logs, s.tolerance)))
            d.upper = upper_change(logs, pass_level)
        # Holm across every figure of the check, on the look-adjusted p-values so far
        order = sorted(range(m), key=lambda j: decisions[j].p_fail)
        for rank, j in enumerate(order):
            level = design.fail_alpha / (m - rank)
            if decisions[j].p_fail > level:
                break
            d, s = decisions[j], series[j]
            if d.state == OPEN and (s.floor is None or s.absolute > s.floor):
                d.state, d.at_pairs, d.at_round, d.holm_level = FAIL, counts[j], k, level
        for i, s in enumerate(series):
            d = decisions[i]
            if d.state != OPEN or d.upper is None or not d.looks or d.looks[-1] != counts[i]:
                continue
            ruled_out = max(design.resolve, s.tolerance)
            under_floor = s.floor is not None and s.base_median * d.upper < s.floor
            if d.upper < ruled_out or under_floor:
                d.state, d.at_pairs, d.at_round = PASS, counts[i], k
    if last:
        for d in decisions:
            if d.state == OPEN:
                d.state = UNRESOLVED
    return decisions


def settled(decisions: Sequence[Decision]) -> bool:
    """No figure is still open: the check can stop adding pairs."""
    return all(d.state != OPEN for d in decisions)


def _decides(mean: float, sd: float, n: int, tolerance: float, design: Design, figures: int) -> bool:
    """Whether a figure whose pairs keep this mean log ratio and spread is decided at ``n`` pairs, by the
    looks of the design capped at ``n``: FAIL beyond the tolerance at Holm's strictest level, or PASS."""
    capped = Design(design.min_pairs, max(n, design.min_pairs), design.step, design.alpha, design.beta,
                    design.resolve, design.legs)
    k_looks = len(capped.looks)
    se = sd / math.sqrt(n)
    ruled_out = math.log1p(max(design.resolve, tolerance))
    if student_t_cdf((ruled_out - mean) / se, n - 1) > 1.0 - design.beta / k_looks:
        return True
    p_fail = 1.0 - student_t_cdf((mean - math.log1p(tolerance)) / se, n - 1)
    return k_looks * p_fail <= design.fail_alpha / max(figures, 1)


def pairs_to_decide(logs: Sequence[float], tolerance: float, design: Design, figures: int = 1,
                    limit: int = 1000) -> int | None:
    """About how many pairs would decide a figure still open, were its pairs to keep the mean and
    spread they have (a rough guide for ``--max-rounds``, not a promise: both move as pairs come).
    Holm's level is taken as its strictest (``alpha / figures``). None: not within ``limit`` pairs (the
    change sits at the tolerance, where no count decides it), or the pairs have no spread to go by."""
    clean = [x for x in logs if math.isfinite(x)]
    if len(clean) < 2 or len(clean) < len(logs):
        return None
    mean, sd = _moments(clean)
    if sd == 0.0:
        return None
    for n in range(max(len(clean) + 1, design.min_pairs), limit + 1):
        if _decides(mean, sd, n, tolerance, design, figures):
            return n
    return None


def spread_to_decide(logs: Sequence[float], tolerance: float, design: Design, figures: int = 1) -> float | None:
    """The spread (sigma of a pair's log ratio) under which a figure with this mean change would be
    decided at ``design.max_pairs``: what a quieter host must reach. None: no spread decides it (the
    mean sits exactly at the tolerance), or the pairs have no finite mean."""
    clean = [x for x in logs if math.isfinite(x)]
    if len(clean) < 2 or len(clean) < len(logs):
        return None
    mean, _ = _moments(clean)
    n = design.max_pairs
    k_looks = len(design.looks)
    ruled_out = math.log1p(max(design.resolve, tolerance))
    candidates = []
    if ruled_out > mean:  # PASS: mean + t * sd / sqrt(n) under the change ruled out
        candidates.append((ruled_out - mean) * math.sqrt(n) / _t_quantile(1.0 - design.beta / k_looks, n - 1))
    excess = mean - math.log1p(tolerance)
    level = design.fail_alpha / max(figures, 1) / k_looks
    if excess > 0 and level < 1:  # FAIL: beyond the tolerance at the Holm-Bonferroni level
        candidates.append(excess * math.sqrt(n) / _t_quantile(1.0 - level, n - 1))
    return max(candidates) if candidates else None
