"""One verdict on a release: PASS or FAIL, reasons first, from what each side's runs left behind.

A release check runs the same suite in two environments (baseline, candidate) and its perf job in
rounds, each a fresh process, A and B interleaved. The verdict fails on, in this order:

1. a candidate that cannot run: its session stopped at start (an NxDI that does not import) or its
   engines could not be built (compile, load, the smoke generate), with NxDI's own error line;
2. tests whose outcome changed: passed on the baseline, and failed, errored, was skipped or is
   missing on the candidate (a new skip counts);
3. a benchmark of the baseline that the candidate did not produce;
4. a gated figure whose change lies beyond its tolerance with confidence: the interval comes from
   the spread between the paired rounds (``harness.core.stats.paired_ratio_ci``), never from the
   samples inside one process, and a change below the figure's absolute floor never counts.

Only primary timings are gated (``tkg_ms_p50``, ``cte_ms_p50``, else the benchmark's median round
``median_s``); derived figures (throughputs, roofline fraction, tails) are reported with their
interval and not gated: they restate the same samples. Engine load and compile times are compared
once per engine, with their own tolerance and floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.results import BenchResult, CaseOutcome
from harness.core.metrics import METRICS
from harness.core.stats import CONFIDENCE, PairedRatio, paired_ratio_ci

VERDICT_SCHEMA = 1
GATED = ("tkg_ms_p50", "cte_ms_p50")  # a benchmark without either is gated on its median round
ENGINE_TIMES = ("compile_s", "load_s")
ENGINE_TOLERANCE = 0.25
# Absolute changes below these never count as a regression, whatever the ratio (a 0.01 ms step
# that doubles is noise in a timer, not a release problem).
FLOORS = {"ms": 0.05, "s": 0.5}
DEFAULT_TOLERANCE = 0.05


def floor_of(metric: str) -> float | None:
    if metric.endswith("_s") or metric == "median_s":
        return FLOORS["s"] if metric in ENGINE_TIMES else FLOORS["ms"] / 1000.0
    if "_ms" in metric:
        return FLOORS["ms"]
    return None


@dataclass(frozen=True)
class FigureChange:
    """One figure of one benchmark (or engine) over the paired rounds of both sides."""

    benchmark: str
    metric: str
    base: tuple[float, ...]  # per round
    new: tuple[float, ...]
    direction: str  # "max": lower is better
    tolerance: float
    gated: bool
    interval: PairedRatio
    floor: float | None
    interval_confidence: float = CONFIDENCE

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
    def regressed(self) -> bool:
        bounds = self.bounds
        if not self.gated or bounds is None or bounds[0] <= self.tolerance:
            return False
        return self.floor is None or self.absolute > self.floor

    def describe(self) -> str:
        worse = "slower" if self.direction == "max" else "lower"
        bounds = self.bounds
        interval = (f"{100 * bounds[0]:+.1f}% .. {100 * bounds[1]:+.1f}%" if bounds else "no interval")
        return (f"{self.benchmark} {self.metric}: {worse} by {100 * (self.change or 0):.1f}% "
                f"({_fmt(median(self.base))} -> {_fmt(median(self.new))}; {100 * self.interval_confidence:g}% "
                f"interval {interval} over {self.interval.pairs} rounds; tolerance {100 * self.tolerance:g}%)")


@dataclass
class SideReport:
    """What one side's runs left: its versions, the conformance outcomes, and per perf round the
    results and the engines' load / compile times (``{"model/shape": {"load_s": ...}}``)."""

    name: str
    versions: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    rounds: list[list[BenchResult]] = field(default_factory=list)
    engines: list[dict[str, dict[str, float]]] = field(default_factory=list)
    session_errors: list[str] = field(default_factory=list)  # a run that stopped before its tests: why


@dataclass
class Verdict:
    passed: bool
    reasons: list[str]
    figures: list[FigureChange]
    outcome_changes: list[dict[str, str]]
    sides: dict[str, dict[str, Any]]
    rounds: int
    confidence: float
    tolerance: float
    mode: str
    improvements: list[str] = field(default_factory=list)
    wall_s: float | None = None

    @property
    def word(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        return {"schema": VERDICT_SCHEMA, "verdict": self.word, "reasons": self.reasons, "mode": self.mode,
                "rounds": self.rounds, "confidence": self.confidence, "tolerance": self.tolerance,
                "wall_s": self.wall_s, "sides": self.sides, "outcome_changes": self.outcome_changes,
                "improvements": self.improvements,
                "figures": [{"benchmark": f.benchmark, "metric": f.metric, "baseline": list(f.base),
                             "candidate": list(f.new), "direction": f.direction, "tolerance": f.tolerance,
                             "gated": f.gated, "floor": f.floor, "change": f.change,
                             "interval": list(f.bounds) if f.bounds else None, "pairs": f.interval.pairs,
                             "regressed": f.regressed} for f in self.figures]}

    def markdown(self) -> str:
        lines = [f"## Release check: {self.word}", ""]
        base, cand = self.sides.get("baseline", {}), self.sides.get("candidate", {})
        lines += ["| | baseline | candidate |", "|---|---|---|"]
        for key in sorted(set(base.get("versions", {})) | set(cand.get("versions", {}))):
            b, c = base.get("versions", {}).get(key, "-"), cand.get("versions", {}).get(key, "-")
            lines.append(f"| {key} | {b} | {c} |")
        lines += ["", f"Mode: {self.mode}; perf rounds (fresh processes, interleaved): {base.get('rounds', 0)} baseline, "
                      f"{cand.get('rounds', 0)} candidate; tolerance {100 * self.tolerance:g}% at "
                      f"{100 * self.confidence:g}% confidence.", ""]
        if self.reasons:
            lines += ["### Reasons", ""] + [f"{i}. {r}" for i, r in enumerate(self.reasons, 1)] + [""]
        if self.outcome_changes:
            lines += ["### Tests whose outcome changed", "", "| test | baseline | candidate | message |",
                      "|---|---|---|---|"]
            lines += [f"| `{c['test']}` | {c['baseline']} | {c['candidate']} | {c['message'][:160]} |"
                      for c in self.outcome_changes[:50]]
            if len(self.outcome_changes) > 50:
                lines.append(f"| ... {len(self.outcome_changes) - 50} more in verdict.json | | | |")
            lines.append("")
        gated = [f for f in self.figures if f.gated]
        reported = [f for f in self.figures if not f.gated]
        if gated:
            lines += ["### Gated figures", ""] + _figure_table(gated) + [""]
        if reported:
            lines += ["<details><summary>Reported, not gated (derived from the same samples, or timed by the "
                      f"engine): {len(reported)} figures</summary>", ""]
            lines += _figure_table(reported) + ["", "</details>", ""]
        return "\n".join(lines)


def _figure_table(figures: Sequence[FigureChange]) -> list[str]:
    lines = ["| benchmark | metric | baseline | candidate | change | interval | gate |",
             "|---|---|---|---|---|---|---|"]
    for f in figures:
        bounds = f.bounds
        interval = f"{100 * bounds[0]:+.1f}% .. {100 * bounds[1]:+.1f}%" if bounds else "-"
        gate = ("**FAIL**" if f.regressed else f"pass (tol {100 * f.tolerance:g}%)") if f.gated else "reported"
        change = f"{100 * f.change:+.1f}%" if f.change is not None else "-"
        lines.append(f"| `{f.benchmark}` | {f.metric} | {_fmt(median(f.base))} | {_fmt(median(f.new))} | {change} | "
                     f"{interval} | {gate} |")
    return lines


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "-"


def cannot_run(side: SideReport) -> list[str]:
    """Why a side could not run at all: its session errors, then the first engine error of its
    tests (an NxDI build that cannot compile, load or generate fails every engine test alike)."""
    reasons = list(side.session_errors)
    for test, outcome in side.outcomes.items():
        if outcome.outcome in ("error", "failed") and "BackendError" in outcome.message:
            reasons.append(outcome.message.split("BackendError: ", 1)[-1].rstrip('"') + f" (first seen in {test})")
            break
    return reasons


def outcome_changes(base: Mapping[str, CaseOutcome],
                    new: Mapping[str, CaseOutcome]) -> tuple[list[dict[str, str]], list[str]]:
    """Tests that passed on the baseline and did not on the candidate (missing counts), and the
    tests that newly pass (reported, never failing)."""
    changed, improved = [], []
    for test in sorted(base):
        b, n = base[test], new.get(test)
        if b.outcome == "passed" and (n is None or n.outcome != "passed"):
            changed.append({"test": test, "baseline": "passed", "candidate": n.outcome if n else "missing",
                            "message": n.message if n else "not collected on the candidate"})
        elif b.outcome != "passed" and n is not None and n.outcome == "passed":
            improved.append(test)
    return changed, improved


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


def figure_changes(base: Sequence[Sequence[BenchResult]], new: Sequence[Sequence[BenchResult]],
                   tolerances: Tolerances, confidence: float) -> tuple[list[FigureChange], list[str]]:
    """Every figure of every benchmark present in all rounds of both sides, paired by round; and
    the benchmarks or gated figures the baseline has and the candidate lacks."""
    rounds = min(len(base), len(new))
    by_round_b = [{r.name: r for r in results} for results in base[:rounds]]
    by_round_n = [{r.name: r for r in results} for results in new[:rounds]]
    missing: list[str] = []
    changes: list[FigureChange] = []
    names = sorted(set().union(*(set(d) for d in by_round_b))) if by_round_b else []
    for name in names:
        if not all(name in d for d in by_round_b):
            continue  # the baseline itself did not produce it every round: nothing to pair
        if not all(name in d for d in by_round_n):
            missing.append(f"benchmark {name} was not produced by the candidate in every round")
            continue
        first = by_round_b[0][name]
        gated_metrics = gated_figures(first)
        for metric in sorted(first.figures):
            b_vals = [d[name].figures.get(metric) for d in by_round_b]
            n_vals = [d[name].figures.get(metric) for d in by_round_n]
            if any(v is None for v in b_vals):
                continue
            if any(v is None for v in n_vals):
                if metric in gated_metrics:
                    missing.append(f"{name} {metric}: missing on the candidate")
                continue
            changes.append(FigureChange(name, metric, tuple(b_vals), tuple(n_vals),
                                        _direction(metric, [first]), tolerances.get(first.group, metric),
                                        metric in gated_metrics, paired_ratio_ci(b_vals, n_vals, confidence),
                                        floor_of(metric), confidence))
    return changes, missing


def engine_changes(base: Sequence[Mapping[str, Mapping[str, float]]], new: Sequence[Mapping[str, Mapping[str, float]]],
                   tolerances: Tolerances, confidence: float) -> list[FigureChange]:
    """Load and compile seconds, once per engine, paired by round, with the engine tolerance."""
    rounds = min(len(base), len(new))
    out = []
    engines = sorted(set().union(*(set(e) for e in base[:rounds]))) if rounds else []
    for engine in engines:
        for metric in ENGINE_TIMES:
            b_vals = [r.get(engine, {}).get(metric) for r in base[:rounds]]
            n_vals = [r.get(engine, {}).get(metric) for r in new[:rounds]]
            if any(v is None for v in b_vals + n_vals):
                continue
            tolerance = tolerances.metrics.get(metric, ENGINE_TOLERANCE)
            out.append(FigureChange(f"engine {engine}", metric, tuple(b_vals), tuple(n_vals), "max", tolerance,
                                    True, paired_ratio_ci(b_vals, n_vals, confidence), floor_of(metric), confidence))
    return out


def decide(baseline: SideReport, candidate: SideReport, tolerances: Tolerances | None = None,
           confidence: float = CONFIDENCE, mode: str = "") -> Verdict:
    tolerances = tolerances or Tolerances(default=DEFAULT_TOLERANCE)
    reasons = [f"the candidate cannot run: {r}" for r in cannot_run(candidate)]
    changed, improved = outcome_changes(baseline.outcomes, candidate.outcomes)
    if changed:
        shown = ", ".join(f"{c['test']} ({c['candidate']})" for c in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        reasons.append(f"{len(changed)} test(s) passed on the baseline and not on the candidate: {shown}{more}")
    if len(candidate.rounds) < len(baseline.rounds):
        reasons.append(f"the candidate's perf job produced results in {len(candidate.rounds)} of the "
                       f"{len(baseline.rounds)} rounds the baseline's did")
    figures, missing = figure_changes(baseline.rounds, candidate.rounds, tolerances, confidence)
    figures += engine_changes(baseline.engines, candidate.engines, tolerances, confidence)
    reasons += missing
    reasons += [f.describe() for f in figures if f.regressed]
    sides = {side.name: {"versions": side.versions, "tests": len(side.outcomes), "rounds": len(side.rounds),
                         "session_errors": side.session_errors} for side in (baseline, candidate)}
    return Verdict(not reasons, reasons, figures, changed, sides, min(len(baseline.rounds), len(candidate.rounds)),
                   confidence, tolerances.default, mode, improved)


def merge(verdicts: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> dict[str, Any]:
    """Several legs' ``verdict.json`` (one per model, say) as one: FAIL if any leg failed, each
    reason prefixed with its leg."""
    reasons = [f"{label}: {r}" for label, v in zip(labels, verdicts) for r in v.get("reasons", [])]
    failed = [label for label, v in zip(labels, verdicts) if v.get("verdict") != "PASS"]
    return {"schema": VERDICT_SCHEMA, "verdict": "FAIL" if failed else "PASS", "reasons": reasons,
            "legs": {label: {"verdict": v.get("verdict"), "sides": v.get("sides"), "rounds": v.get("rounds")}
                     for label, v in zip(labels, verdicts)}}


def merged_markdown(merged: Mapping[str, Any]) -> str:
    lines = [f"## Release check (all legs): {merged['verdict']}", "", "| leg | verdict |", "|---|---|"]
    lines += [f"| {leg} | {v['verdict']} |" for leg, v in merged["legs"].items()]
    if merged["reasons"]:
        lines += ["", "### Reasons", ""] + [f"{i}. {r}" for i, r in enumerate(merged["reasons"], 1)]
    return "\n".join(lines) + "\n"

