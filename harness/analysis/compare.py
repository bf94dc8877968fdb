"""Comparison of two runs (the release gate): each figure's change with a bootstrap interval where
both runs have samples, against a tolerance per metric, failing on a regression, on a benchmark or
figure the base run had and the new one lacks, and on a value that is not a finite number."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.results import SAMPLED_FIGURES, BenchResult, ReportError
from harness.core.metrics import METRICS
from harness.core.options import parse_percent
from harness.core.stats import CONFIDENCE, change_of_ratio, median_ratio_ci
from harness.core.storage import load_json


@dataclass(frozen=True)
class Delta:
    """One metric of one benchmark in both runs; ``low``/``high`` bound the change (positive is
    worse) at the comparison's confidence when both runs kept samples, else they equal it."""

    benchmark: str
    metric: str
    base: float
    new: float
    direction: str  # "max": lower is better; "min": higher is better
    tolerance: float = 0.05
    low: float | None = None
    high: float | None = None
    n_base: int = 0
    n_new: int = 0

    @property
    def change(self) -> float:
        """Relative change, signed so that positive is worse."""
        if self.base == 0:
            return 0.0 if self.new == 0 else math.inf
        rel = (self.new - self.base) / abs(self.base)
        return rel if self.direction == "max" else -rel

    @property
    def has_ci(self) -> bool:
        return self.low is not None

    @property
    def regressed(self) -> bool:
        """Beyond the tolerance, and (with samples) significantly so: the whole interval is."""
        if self.change <= self.tolerance:
            return False
        return self.low > self.tolerance if self.low is not None else True


@dataclass
class Comparison:
    deltas: list[Delta]
    only_base: list[str]
    only_new: list[str]
    tolerance: float
    problems: list[str] = field(default_factory=list)  # missing metrics, NaN / non-numeric values
    confidence: float = CONFIDENCE

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regressed]

    @property
    def failures(self) -> list[str]:
        """Everything that fails the gate besides regressions: a benchmark or metric of the base run
        that the new run lacks, or a value that is not a finite number."""
        return [f"benchmark missing in new run: {n}" for n in self.only_base] + self.problems

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.failures)

    def render(self) -> str:
        ci = f"{100 * self.confidence:g}% CI"
        lines = [f"{'benchmark':60} {'metric':22} {'base':>12} {'new':>12} {'change':>9} {ci:>19} {'tol':>6}"]
        for d in self.deltas:
            flag = "  REGRESSION" if d.regressed else ""
            interval = (f"[{100 * d.low:+6.1f}%,{100 * d.high:+6.1f}%]" if d.has_ci else "(no samples)")
            lines.append(f"{d.benchmark[-60:]:60} {d.metric:22} {d.base:12.4g} {d.new:12.4g} "
                         f"{100 * d.change:+8.1f}% {interval:>19} {100 * d.tolerance:5g}%{flag}")
        for name in self.only_new:
            lines.append(f"new benchmark (no baseline): {name}")
        for problem in self.failures:
            lines.append(f"FAILED {problem}")
        n = len(self.regressions)
        lines.append(f"{n} regression(s) beyond tolerance (default {100 * self.tolerance:g}%, significant at "
                     f"{ci}), {len(self.failures)} missing or invalid; positive change is worse")
        return "\n".join(lines)


@dataclass(frozen=True)
class Tolerances:
    """Allowed regression per metric and per benchmark group; the most specific applies:
    group + metric, group, metric, default.

    File format (``compare --tolerances FILE``)::

        {"default": "5%", "metrics": {"tkg_ms_p50": "8%"},
         "groups": {"batch-suite-carbon-3b": "10%", "e2e-smoke": {"tokens_per_s": "7%"}}}
    """

    default: float = 0.05
    metrics: dict[str, float] = field(default_factory=dict)
    groups: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> metric or "*" -> tolerance

    def get(self, group: str | None, metric: str) -> float:
        per_group = self.groups.get(group or "", {})
        for value in (per_group.get(metric), per_group.get("*"), self.metrics.get(metric)):
            if value is not None:
                return value
        return self.default


def load_tolerances(path: str | Path, default: float) -> Tolerances:
    data = load_json(path, ReportError, "tolerances file")
    if not isinstance(data, dict):
        raise ReportError(f"{path}: must hold a JSON object with 'default', 'metrics' and/or 'groups'")
    unknown = set(data) - {"default", "metrics", "groups"}
    if unknown:
        raise ReportError(f"{path}: unknown field {sorted(unknown)[0]!r}; fields: default, metrics, groups")

    def pct(value: Any, where: str) -> float:
        try:
            return parse_percent(value)
        except ValueError as exc:
            raise ReportError(f"{path}: {where}: {exc}") from None

    known = set(METRICS) | {"median_s"}

    def metric_map(raw: Any, where: str, wildcard: bool) -> dict[str, float]:
        if not isinstance(raw, dict):
            raise ReportError(f"{path}: {where} must be an object of metric -> tolerance")
        for k in raw:
            if k not in known and not (wildcard and k == "*"):
                raise ReportError(f"{path}: {where}: unknown metric {k!r}; known: {', '.join(sorted(known))}")
        return {k: pct(v, f"{where}.{k}") for k, v in raw.items()}

    groups = {}
    for g, v in (data.get("groups") or {}).items():
        groups[g] = {"*": pct(v, f"groups.{g}")} if not isinstance(v, dict) else metric_map(v, f"groups.{g}", True)
    return Tolerances(pct(data["default"], "default") if "default" in data else default,
                      metric_map(data.get("metrics") or {}, "metrics", False), groups)


def _delta(name: str, metric: str, b: BenchResult, n: BenchResult, tolerance: float, confidence: float) -> Delta:
    direction = METRICS.get(metric) or b.directions.get(metric) or n.directions.get(metric) or "max"
    base, new = b.figures[metric], n.figures[metric]
    sb, sn = b.samples.get(metric), n.samples.get(metric)
    if not (sb and sn):
        return Delta(name, metric, base, new, direction, tolerance)
    ci = median_ratio_ci(sb, sn, confidence)
    inverse = metric in SAMPLED_FIGURES and SAMPLED_FIGURES[metric][1]
    lo, hi = (1 / ci.high, 1 / ci.low) if inverse else (ci.low, ci.high)  # ratio of the metric itself
    changes = sorted((change_of_ratio(lo, direction), change_of_ratio(hi, direction)))
    return Delta(name, metric, base, new, direction, tolerance, changes[0], changes[1], ci.n_base, ci.n_new)


def compare(base: list[BenchResult], new: list[BenchResult], tolerance: float | Tolerances,
            confidence: float = CONFIDENCE) -> Comparison:
    """Every figure of the base run (plus pytest-benchmark's median time) per benchmark, against
    the new run. A benchmark or metric the base has and the new run lacks, or a value that is not a
    finite number on either side, is a failure, never a silent pass."""
    tolerances = tolerance if isinstance(tolerance, Tolerances) else Tolerances(default=tolerance)
    by_base = {r.name: r for r in base}
    by_new = {r.name: r for r in new}
    deltas, problems = [], []
    for name in sorted(set(by_base) & set(by_new)):
        b, n = by_base[name], by_new[name]
        for metric in sorted(set(b.figures) | set(b.invalid)):
            if metric in b.invalid:
                problems.append(f"{name} {metric}: base value {b.invalid[metric]!r} is not a finite number")
            elif metric in n.invalid:
                problems.append(f"{name} {metric}: new value {n.invalid[metric]!r} is not a finite number")
            elif metric not in n.figures:
                problems.append(f"{name} {metric}: missing in new run")
            else:
                deltas.append(_delta(name, metric, b, n, tolerances.get(b.group, metric), confidence))
        for metric in sorted(set(n.invalid) - set(b.figures) - set(b.invalid)):
            problems.append(f"{name} {metric}: new value {n.invalid[metric]!r} is not a finite number")
    if not by_base:
        problems.append("the base run has no benchmarks: nothing to compare against")
    return Comparison(deltas, sorted(set(by_base) - set(by_new)), sorted(set(by_new) - set(by_base)),
                      tolerances.default, problems, confidence)
