"""Both sides' perf rounds paired by index: what each side's runs left (``SideReport``), and every figure
over the rounds both sides produced it in (``FigureChange``), with the gaps either side left.

Round ``k`` of one side is only ever compared with round ``k`` of the other: a round (or a benchmark in
a round) the baseline lacks leaves that pair out, one the candidate lacks is a reason.

Only primary timings are gated (``tkg_ms_p50``, ``cte_ms_p50``, else the benchmark's median round
``median_s``); derived figures (throughputs, roofline fraction, tails) are reported with their
interval and not gated: they restate the same samples. Engine load and compile times are compared
once per engine, with their own tolerance and floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.results import BenchResult, CaseOutcome
from harness.analysis.stacks import StackPair
from harness.core.metrics import METRICS
from harness.core.sequential import FAIL, PASS, UNRESOLVED, Decision, Series
from harness.core.stats import CONFIDENCE, PairedRatio, paired_ratio_ci

GATED = ("tkg_ms_p50", "cte_ms_p50")  # a benchmark without either is gated on its median round
ENGINE_TIMES = ("compile_s", "load_s")
ENGINE_TOLERANCE = 0.25
# Absolute changes below these never count as a regression, whatever the ratio (a 0.01 ms step
# that doubles is noise in a timer, not a release problem).
FLOORS = {"ms": 0.05, "s": 0.5}


def floor_of(metric: str) -> float | None:
    """A time's floor in its own unit; a rate (``tokens_per_s``, ``kbp_per_s``) is no time and has none."""
    if metric.endswith("_per_s"):
        return None
    if metric.endswith("_s"):
        return FLOORS["s"] if metric in ENGINE_TIMES else FLOORS["ms"] / 1000.0
    if "_ms" in metric:
        return FLOORS["ms"]
    return None


@dataclass(frozen=True)
class FigureChange:
    """One figure of one benchmark (or engine) over the complete pairs of both sides: ``rounds[i]``
    is the round whose baseline ``base[i]`` and candidate ``new[i]`` ran back to back."""

    benchmark: str
    metric: str
    base: tuple[float, ...]  # per pair
    new: tuple[float, ...]
    direction: str  # "max": lower is better
    tolerance: float
    gated: bool
    interval: PairedRatio
    floor: float | None
    interval_confidence: float = CONFIDENCE
    rounds: tuple[int, ...] = ()
    decision: Decision | None = None  # gated figures: the sequential rule's decision
    how: str = ""  # how a gated figure is judged, where not by the sequential rule

    def __post_init__(self) -> None:
        if not self.rounds:
            object.__setattr__(self, "rounds", tuple(range(1, len(self.base) + 1)))

    def _change(self, ratio: float | None) -> float | None:
        if ratio is None or not math.isfinite(ratio):
            return None
        return ratio - 1.0 if self.direction == "max" else 1.0 - ratio

    @property
    def change(self) -> float | None:
        """Relative change of the geometric-mean ratio, positive is worse."""
        return self._change(self.interval.ratio)

    @property
    def bounds(self) -> tuple[float, float] | None:
        lo, hi = self._change(self.interval.low), self._change(self.interval.high)
        return None if lo is None or hi is None else (min(lo, hi), max(lo, hi))

    @property
    def absolute(self) -> float:
        """Median candidate minus median baseline, signed so that positive is worse."""
        diff = float(median(self.new) - median(self.base))
        return diff if self.direction == "max" else -diff

    @property
    def state(self) -> str:
        return self.decision.state if self.gated and self.decision is not None else "reported"

    @property
    def regressed(self) -> bool:
        return self.state == FAIL

    @property
    def unresolved(self) -> bool:
        return self.state == UNRESOLVED

    def log_ratios(self) -> list[float]:
        """Per pair, log(candidate / baseline) signed so that positive is worse (NaN where a value is not
        a positive number: such a figure is never decided, and ends unresolved)."""
        sign = 1.0 if self.direction == "max" else -1.0
        return [sign * math.log(n / b) if b > 0 and n > 0 and math.isfinite(b) and math.isfinite(n) else math.nan
                for b, n in zip(self.base, self.new)]

    def series(self) -> Series:
        return Series(f"{self.benchmark} {self.metric}", tuple(zip(self.rounds, self.log_ratios())), self.tolerance,
                      self.floor, float(median(self.base)), self.absolute)

    def _where(self) -> str:
        bounds = self.bounds
        interval = f"{100 * bounds[0]:+.1f}% .. {100 * bounds[1]:+.1f}%" if bounds else "no interval"
        return (f"{fmt_value(median(self.base))} -> {fmt_value(median(self.new))}; {100 * self.interval_confidence:g}% "
                f"interval {interval} over {len(self.base)} pairs")

    def describe(self) -> str:
        worse = "slower" if self.direction == "max" else "lower"
        d = self.decision
        if self.unresolved and d is not None:
            upper = f"{100 * d.upper:+.1f}%" if d.upper is not None else "none"
            return (f"{self.benchmark} {self.metric}: not resolved after {len(self.base)} pairs: change "
                    f"{100 * (self.change or 0):+.1f}% ({self._where()}), one-sided upper bound {upper} does not rule "
                    f"out the change a pass must rule out, nor is it beyond the {100 * self.tolerance:g}% tolerance: "
                    "more pairs (--max-rounds) or a quieter host decide it")
        how = (f"; failed at {d.at_pairs} pairs, p {d.p_fail:.2g} <= Holm level {d.holm_level:.2g}"
               if d is not None and d.holm_level is not None else f"; {self.how}" if self.how else "")
        return (f"{self.benchmark} {self.metric}: {worse} by {100 * (self.change or 0):.1f}% ({self._where()}"
                f"{how}; tolerance {100 * self.tolerance:g}%)")

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "metric": self.metric, "baseline": list(self.base),
                "candidate": list(self.new), "rounds": list(self.rounds),
                "pairs": [{"round": k, "baseline": b, "candidate": n, "log_ratio": d}
                          for k, b, n, d in zip(self.rounds, self.base, self.new, self.log_ratios())],
                "direction": self.direction, "tolerance": self.tolerance, "gated": self.gated, "floor": self.floor,
                "change": self.change, "interval": list(self.bounds) if self.bounds else None,
                "pair_count": len(self.base), "state": self.state, "regressed": self.regressed,
                "decision": self.decision.to_dict() if self.decision is not None else None, "how": self.how or None}


@dataclass
class SideReport:
    """What one side's runs left: its versions, the conformance outcomes, and per perf round ``k``
    the results, the engines' load / compile times (``{"model/shape": {"load_s": ..., "compile":
    "compiled"}}``), the round's test outcomes and, where it left no result, why."""

    name: str
    versions: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    backend: str = "neuron"
    dtype: str | None = None  # what it computed in (its engines' report, else what the check asked; None: unknown)
    config: dict[str, Any] = field(default_factory=dict)  # the effective engine configuration it ran
    rounds: dict[int, list[BenchResult]] = field(default_factory=dict)
    engines: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    session_errors: list[str] = field(default_factory=list)  # a run that stopped before its tests: why
    ran: list[int] = field(default_factory=list)  # the perf rounds started (k = 1, 2, ...)
    round_errors: dict[int, str] = field(default_factory=dict)  # round k: its exit code and last error line
    round_outcomes: dict[int, dict[str, CaseOutcome]] = field(default_factory=dict)

    def rounds_run(self) -> list[int]:
        return sorted(set(self.ran) | set(self.rounds))

    def why(self, k: int, test: str | None = None) -> str:
        """Why round ``k`` left nothing (for ``test``): the test's own failure (for the whole round, its
        first failed test's), else the process's last error line."""
        outcomes = self.round_outcomes.get(k) or {}
        failed = [o for t, o in outcomes.items() if (test is None or t == test)
                  and o.outcome in ("failed", "error") and o.message]
        if failed:
            return f"{failed[0].outcome}: {failed[0].message.strip().splitlines()[0][:240]}"
        return self.round_errors.get(k) or "no error recorded"


def fmt_value(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "-"


def gated_figures(result: BenchResult) -> list[str]:
    """What a benchmark is gated on: its CTE / TKG p50 where that figure is the median of the
    benchmark's own timed rounds (so it is taken with the run's timer: process CPU time in NxDI's
    CPU mode), else the median round itself (``median_s``). A p50 an engine timed inside a
    generation (``test_e2e``'s) is reported: its clock is the engine's, not the check's."""
    median = result.figures.get("median_s")
    if median is None:
        return []
    timed = [m for m in GATED if m in result.figures and math.isclose(result.figures[m], median * 1000.0, rel_tol=1e-9)]
    return timed or ["median_s"]


def _direction(metric: str, results: Sequence[BenchResult]) -> str:
    if metric == "median_s" or metric in ENGINE_TIMES:
        return "max"
    return METRICS.get(metric) or next((r.directions[metric] for r in results if metric in r.directions), "max")


def _span(rounds: Sequence[int]) -> str:
    return ", ".join(map(str, rounds))


@dataclass
class Pairing:
    """Both sides' rounds matched by their index: the figures over complete pairs, the candidate's
    gaps (reasons: the candidate did not run what the baseline ran) and the baseline's (left out)."""

    figures: list[FigureChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)


def pair_rounds(base: SideReport, new: SideReport, tolerances: Tolerances, confidence: float,
                stacks: StackPair | None = None) -> Pairing:
    """Every figure of every benchmark of the baseline over the rounds ``k`` both sides produced it
    in. A round (or a benchmark in a round) the baseline lacks leaves that pair out, named with the
    process's error; one the candidate lacks where the baseline has it is a reason."""
    out = Pairing()
    ran = sorted(set(base.rounds_run()) | set(new.rounds_run()))  # a round either side ran: both owe it
    for k in ran:
        if k not in base.rounds:
            out.left_out.append(f"baseline perf round {k} produced no results ({base.why(k)}): pair {k} is left out "
                                "of every figure")
        if k not in new.rounds:
            out.reasons.append(f"the candidate's perf round {k} produced no results ({new.why(k)})")
    both = [k for k in ran if k in base.rounds and k in new.rounds]
    by_b = {k: {r.name: r for r in base.rounds[k]} for k in both}
    by_n = {k: {r.name: r for r in new.rounds[k]} for k in both}
    names = sorted(set().union(*(set(by_b[k]) for k in both))) if both else []
    stacks = stacks or StackPair(base.backend, new.backend)
    for name in names:
        lacking_b = [k for k in both if name not in by_b[k]]
        lacking_n = [k for k in both if name in by_b[k] and name not in by_n[k]]
        for k in lacking_b:
            out.left_out.append(f"baseline perf round {k} did not produce {name} ({base.why(k, name)}): its pair {k} "
                                "is left out")
        if lacking_n:
            out.reasons.append(f"benchmark {name} was not produced by the candidate in round(s) {_span(lacking_n)} "
                               f"({new.why(lacking_n[0], name)})")
        pairs = [k for k in both if name in by_b[k] and name in by_n[k]]
        if not pairs:
            continue
        first = by_b[pairs[0]][name]
        gated_metrics = stacks.gated(first.figures, gated_figures(first))
        own = sorted(m for m in first.figures if not stacks.pairable(m))
        if own:
            out.not_measured.append(f"{name}: {', '.join(own)} are each stack's own ({base.backend} / {new.backend}): "
                                    "shown in each side's benchmark JSON, not paired")
        for metric in sorted(m for m in first.figures if stacks.pairable(m)):
            have = [k for k in pairs if by_b[k][name].figures.get(metric) is not None]
            missing = [k for k in have if by_n[k][name].figures.get(metric) is None]
            if missing and metric in gated_metrics:
                out.reasons.append(f"{name} {metric}: missing on the candidate in round(s) {_span(missing)}")
            ks = [k for k in have if k not in missing]
            if not ks:
                continue
            b_vals = [by_b[k][name].figures[metric] for k in ks]
            n_vals = [by_n[k][name].figures[metric] for k in ks]
            out.figures.append(FigureChange(name, metric, tuple(b_vals), tuple(n_vals), _direction(metric, [first]),
                                            tolerances.get(first.group, metric), metric in gated_metrics,
                                            paired_ratio_ci(b_vals, n_vals, confidence), floor_of(metric), confidence,
                                            rounds=tuple(ks)))
    if stacks.served or stacks.mixed:
        out.not_measured.append(f"engine load_s: {base.backend} / {new.backend} load different things (a served "
                                "engine only resolves its endpoint; the server's start is each side's vllm_start_s)")
    else:
        _engine_figures(base, new, tolerances, confidence, both, out)
    return out


def _engine_figures(base: SideReport, new: SideReport, tolerances: Tolerances, confidence: float,
                    both: Sequence[int], out: Pairing) -> None:
    """Load seconds of each engine, paired by round; compile seconds where both sides compiled in the
    same round (a compile is once per side and per cache: each such pair's own ratio is gated, no
    interval), else said to be not measured and why."""
    engines = sorted(set().union(*(set(base.engines.get(k, {})) for k in both))) if both else []
    for engine in engines:
        b_rec = {k: base.engines.get(k, {}).get(engine, {}) for k in both}
        n_rec = {k: new.engines.get(k, {}).get(engine, {}) for k in both}
        ks = [k for k in both if isinstance(b_rec[k].get("load_s"), (int, float))
              and isinstance(n_rec[k].get("load_s"), (int, float))]
        if ks:
            b_vals, n_vals = [float(b_rec[k]["load_s"]) for k in ks], [float(n_rec[k]["load_s"]) for k in ks]
            out.figures.append(FigureChange(f"engine {engine}", "load_s", tuple(b_vals), tuple(n_vals), "max",
                                            tolerances.metrics.get("load_s", ENGINE_TOLERANCE), True,
                                            paired_ratio_ci(b_vals, n_vals, confidence), floor_of("load_s"),
                                            confidence, rounds=tuple(ks)))
        compiled = [k for k in both if b_rec[k].get("compile") == "compiled" and n_rec[k].get("compile") == "compiled"
                    and isinstance(b_rec[k].get("compile_s"), (int, float))
                    and isinstance(n_rec[k].get("compile_s"), (int, float))]
        if compiled:
            b_vals = [float(b_rec[k]["compile_s"]) for k in compiled]
            n_vals = [float(n_rec[k]["compile_s"]) for k in compiled]
            tolerance = tolerances.metrics.get("compile_s", ENGINE_TOLERANCE)
            change = FigureChange(f"engine {engine}", "compile_s", tuple(b_vals), tuple(n_vals), "max", tolerance,
                                  True, paired_ratio_ci(b_vals, n_vals, confidence), floor_of("compile_s"),
                                  confidence, rounds=tuple(compiled),
                                  how="compiled once per side: each pair's own ratio against the tolerance")
            slower = all(n / b - 1.0 > tolerance for b, n in zip(b_vals, n_vals))
            state = FAIL if slower and change.absolute > (change.floor or 0.0) else PASS
            out.figures.append(replace(change, decision=Decision(change.series().key, state, len(compiled),
                                                                 compiled[-1])))
            continue
        statuses = {side.name: sorted({str(r.get("compile")) for r in recs.values() if r.get("compile")})
                    for side, recs in ((base, b_rec), (new, n_rec))}
        if any(statuses.values()):
            said = "; ".join(f"{side}: {', '.join(s) or 'not recorded'}" for side, s in statuses.items())
            out.not_measured.append(f"engine {engine} compile_s: not measured in the same round on both sides ({said})"
                                    "; for a compile-time comparison run the check with an empty --cache-dir and "
                                    "--no-conformance, so that each side's first perf round compiles")
