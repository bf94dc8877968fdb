"""What a release verdict says beside its reasons: the gated figures still open at the cap (the verdict
is then INCONCLUSIVE: each figure with its pairs, its interval and what would decide it) and the passed
figures that are likely slower than their tolerance.

Why the second: a figure PASSES once the change ``--resolve`` names (30%) is ruled out, not once its
tolerance (5%) is. A figure at +13% [+7%, +19%] passes, and a PASS that said nothing of it would hide
a likely slowdown. So every passed figure whose point estimate lies beyond its tolerance, or whose
interval at the look that passed it lies wholly beyond it, is named as "likely slower by X% [lo, hi]"
(above the verdict), and ``--fail-on-likely`` makes it a reason. A change under the figure's absolute
floor is never named (a 0.01 ms step that doubles is a timer's noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.analysis.pairing import FigureChange
from harness.core.sequential import PASS, Design, pairs_to_decide, spread_to_decide
from harness.core.stats import paired_ratio_ci


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def _interval(bounds: tuple[float, float] | None) -> str:
    return f"[{_pct(bounds[0])}, {_pct(bounds[1])}]" if bounds else "[no interval]"


def _sigma(logs: Sequence[float]) -> float | None:
    clean = [x for x in logs if math.isfinite(x)]
    if len(clean) < 2 or len(clean) < len(logs):
        return None
    mean = math.fsum(clean) / len(clean)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in clean) / (len(clean) - 1))


@dataclass(frozen=True)
class OpenFigure:
    """A gated figure no look decided by ``--max-rounds``: its evidence, and what would decide it."""

    key: str
    pairs: int
    change: float | None
    interval: tuple[float, float] | None
    upper: float | None  # the one-sided bound at the last look (what a PASS holds under ``ruled_out``)
    tolerance: float
    ruled_out: float  # the change a PASS must rule out
    max_pairs: int
    pairs_needed: int | None  # about how many pairs decide it at the spread seen (None: not within 1000)
    spread: float | None  # sigma of a pair's log ratio seen
    spread_needed: float | None  # the sigma under which --max-rounds pairs would decide it
    confidence: float

    def describe(self) -> str:
        upper = f"one-sided upper bound {_pct(self.upper)}" if self.upper is not None else "no upper bound"
        seen = (f"{self.key}: open after {self.pairs} pairs: change {_pct(self.change)}, "
                f"{100 * self.confidence:g}% interval {_interval(self.interval)}; {upper} does not rule out "
                f"{100 * self.ruled_out:g}%, nor is the change shown beyond the {100 * self.tolerance:g}% tolerance")
        if self.spread is None:
            return seen + ": its values are not all positive numbers, so no count of pairs decides it"
        more = (f"about {self.pairs_needed} pairs at the spread seen (--max-rounds {self.pairs_needed})"
                if self.pairs_needed is not None else "no count of pairs near this (the change sits at the "
                                                      "tolerance)")
        quieter = (f"a quieter host: a pair spread under {100 * self.spread_needed:.1f}% (seen "
                   f"{100 * self.spread:.1f}%) decides it within {self.max_pairs} pairs"
                   if self.spread_needed is not None and self.spread_needed > 0 else "")
        return seen + f". What would decide it: {more}" + (f"; or {quieter}" if quieter else "")

    def to_dict(self) -> dict[str, Any]:
        return {"figure": self.key, "pairs": self.pairs, "change": self.change,
                "interval": list(self.interval) if self.interval else None, "upper_bound": self.upper,
                "tolerance": self.tolerance, "ruled_out": self.ruled_out, "max_pairs": self.max_pairs,
                "pairs_to_decide": self.pairs_needed, "spread": self.spread, "spread_to_decide": self.spread_needed,
                "text": self.describe()}


def open_figures(figures: Sequence[FigureChange], design: Design) -> list[OpenFigure]:
    """Every gated figure left unresolved at the cap, with what would decide it (Holm's strictest level
    over the check's gated figures)."""
    gated = sum(1 for f in figures if f.gated)
    out = []
    for f in figures:
        if not f.unresolved:
            continue
        logs = f.log_ratios()
        d = f.decision
        out.append(OpenFigure(f"{f.benchmark} {f.metric}", len(f.base), f.change, f.bounds,
                              d.upper if d is not None else None, f.tolerance, max(design.resolve, f.tolerance),
                              design.max_pairs, pairs_to_decide(logs, f.tolerance, design, gated), _sigma(logs),
                              spread_to_decide(logs, f.tolerance, design, gated), f.interval_confidence))
    return out


@dataclass(frozen=True)
class Likely:
    """A passed figure whose change is likely beyond its tolerance."""

    key: str
    worse: str  # "slower", or "lower" for a figure where higher is better
    change: float
    interval: tuple[float, float] | None
    pairs: int
    tolerance: float
    ruled_out: float
    confidence: float
    at_look: int | None = None  # the look whose interval lies beyond the tolerance (None: the point estimate)

    def describe(self) -> str:
        where = (f"at the {self.at_look}-pair look that passed it" if self.at_look is not None
                 else f"over {self.pairs} pairs")
        return (f"{self.key}: likely {self.worse} by {100 * self.change:.1f}% {_interval(self.interval)} "
                f"({100 * self.confidence:g}% interval {where}; tolerance {100 * self.tolerance:g}%): it passed "
                f"because a {100 * self.ruled_out:g}% change is ruled out, not the tolerance")


def likely_worse(figures: Sequence[FigureChange], design: Design) -> list[Likely]:
    """The passed gated figures likely beyond their tolerance: the point estimate over every pair is,
    or the interval at the look that passed the figure lies wholly beyond it; above the floor."""
    out = []
    for f in figures:
        if not f.gated or f.state != PASS or f.change is None:
            continue
        if f.floor is not None and not f.absolute > f.floor:
            continue
        worse = "slower" if f.direction == "max" else "lower"
        common = {"key": f"{f.benchmark} {f.metric}", "worse": worse, "tolerance": f.tolerance,
                  "ruled_out": max(design.resolve, f.tolerance), "confidence": f.interval_confidence}
        if f.change > f.tolerance:
            out.append(Likely(change=f.change, interval=f.bounds, pairs=len(f.base), **common))
            continue
        d = f.decision
        at = [i for i, k in enumerate(f.rounds) if d is not None and d.at_round is not None and k <= d.at_round]
        if len(at) < 2 or len(at) == len(f.rounds):
            continue  # passed at its last pair: the look's interval is the one above
        look = FigureChange(f.benchmark, f.metric, tuple(f.base[i] for i in at), tuple(f.new[i] for i in at),
                            f.direction, f.tolerance, f.gated,
                            paired_ratio_ci([f.base[i] for i in at], [f.new[i] for i in at], f.interval_confidence),
                            f.floor, f.interval_confidence)
        if look.bounds is not None and look.bounds[0] > f.tolerance and look.change is not None:
            out.append(Likely(change=look.change, interval=look.bounds, pairs=len(at), at_look=len(at), **common))
    return out
