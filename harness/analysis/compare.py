"""Comparison of two runs (the release gate): each figure's change with a bootstrap interval where
both runs have samples, against a tolerance per metric, failing on a regression, on a benchmark or
figure the base run had and the new one lacks, and on a value that is not a finite number.

The verdict is one of three (``harness.core.verdicts``): FAIL as above; INCONCLUSIVE where nothing fails
but a figure's estimate lies beyond its tolerance while its interval reaches back within it (neither
shown beyond it nor within it: more rounds per run would decide it); else PASS.

Only a figure with samples on both sides (at least ``MIN_SAMPLES`` each) can regress: a figure
without them (``load_s``, repeated on every benchmark of an engine; derived figures such as
``tkg_roofline_fraction``; a one-round timing) has no interval to tell a change from noise, so it is
shown as informational. An NxDI ``benchmark_report.json`` carries nothing but point estimates; its
fields are compared as such. A change smaller than its unit's absolute floor
(``fixtures/compare/floors.json``) is never a regression, whatever its percentage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.results import SAMPLED_FIGURES, BenchResult, ReportError
from harness.core.metrics import METRICS
from harness.core.options import parse_percent
from harness.core.paths import FIXTURES_DIR
from harness.core.stats import CONFIDENCE, change_of_ratio, median_ratio_ci
from harness.core.storage import load_json
from harness.core.verdicts import FAIL, INCONCLUSIVE, PASS

FLOORS_FILE = FIXTURES_DIR / "compare" / "floors.json"
HARDWARE_TOLERANCES_FILE = FIXTURES_DIR / "compare" / "tolerances.json"
DEFAULT_TOLERANCE = 0.05
# A figure needs this many samples on each side to carry an interval (one round has no spread).
MIN_SAMPLES = 2
UNITS = ("s", "ms", "tok/s", "bp/s", "kbp/s", "variants/s", "req/s", "fraction", "x", "tokens/step", "$", "count")
RATES = ("tok/s", "bp/s", "kbp/s", "variants/s", "req/s")
_EXPLICIT_UNITS = {
    "tokens_per_s": "tok/s", "output_throughput": "tok/s", "total_token_throughput": "tok/s",
    "throughput": "tok/s",  # NxDI benchmark_report.json
    "bp_per_s": "bp/s", "kbp_per_s": "kbp/s", "scored_kbp_per_s": "kbp/s", "variants_per_s": "variants/s",
    "request_throughput": "req/s", "request_goodput": "req/s", "spec_tokens_per_step": "tokens/step",
    "usd_per_million_variants": "$", "completed": "count", "failed": "count",
}


def unit_of(metric: str) -> str:
    """The unit a figure is in, from its name (the harness's naming is regular: ``*_ms*`` are
    milliseconds, ``*_s`` seconds, ``*_fraction`` / ``*_rate`` fractions, ``*speedup*`` ratios); ""
    for a name that says nothing (no floor applies to it)."""
    if metric in _EXPLICIT_UNITS:
        return _EXPLICIT_UNITS[metric]
    if "_ms" in metric or metric.startswith("latency_ms"):
        return "ms"
    if metric.endswith("_s"):
        return "s"
    if metric.endswith(("_fraction", "_rate")):
        return "fraction"
    if "speedup" in metric:
        return "x"
    return ""


def _data_table(path: str | Path, what: str, key: str, shape: str) -> dict[str, Any]:
    """The ``key`` table of a ``{"schema": 1, "note": ..., key: {...}}`` data file, its envelope
    checked (an unknown field, another schema or a missing table is named)."""
    data = load_json(path, ReportError, what)
    if not isinstance(data, dict):
        raise ReportError(f"{path}: must hold a JSON object with 'schema' and '{key}'")
    unknown = set(data) - {"schema", "note", key}
    if unknown:
        raise ReportError(f"{path}: unknown field {sorted(unknown)[0]!r}; fields: schema, note, {key}")
    if data.get("schema", 1) != 1:
        raise ReportError(f"{path}: schema {data.get('schema')!r}; this harness reads schema 1")
    table = data.get(key)
    if not isinstance(table, dict):
        raise ReportError(f"{path}: '{key}' must be an object of {shape}")
    return table


def load_floors(path: str | Path = FLOORS_FILE) -> dict[str, float]:
    """Unit -> the smallest absolute change that may be a regression (``{"schema": 1, "floors":
    {"ms": 0.01, ...}}``); every unit must be one of ``UNITS`` and every floor a finite number >= 0."""
    floors = _data_table(path, "floors file", "floors", f"unit -> floor, units: {', '.join(UNITS)}")
    out = {}
    for unit, value in floors.items():
        if unit not in UNITS:
            raise ReportError(f"{path}: unknown unit {unit!r}; units: {', '.join(UNITS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ReportError(f"{path}: floors.{unit}: {value!r} must be a finite number >= 0")
        out[unit] = float(value)
    return out


def load_hardware_tolerances(path: str | Path = HARDWARE_TOLERANCES_FILE) -> dict[str, float]:
    """Hardware profile -> default tolerance of a single-run compare (``{"schema": 1, "hardware":
    {"cpu": "50%"}}``): the A/A spread between two runs on that hardware, which a single run's own
    samples cannot show. Every value is a percentage in (0, 1000%]."""
    table = _data_table(path, "hardware tolerances file", "hardware",
                        'hardware profile -> tolerance (e.g. "50%")')
    out = {}
    for name, value in table.items():
        try:
            out[name] = parse_percent(value) if isinstance(value, str) else math.nan
        except ValueError as exc:
            raise ReportError(f"{path}: hardware.{name}: {exc}") from None
        if not 0 < out[name] <= 10:
            raise ReportError(f"{path}: hardware.{name}: {value!r} must be a percentage in (0%, 1000%]")
    return out


def hardware_name(manifest: dict[str, Any]) -> str | None:
    """The hardware profile a run names in its manifest (a profile object or a bare name)."""
    hardware = manifest.get("hardware")
    name = hardware.get("name") if isinstance(hardware, dict) else hardware
    return name if isinstance(name, str) else None


def default_tolerance(base_hw: str | None, new_hw: str | None, table: dict[str, float]) -> tuple[float, str]:
    """The tolerance a compare uses when none is given, and why: the hardware's A/A spread when both
    runs are on the same listed profile, else the 5% default."""
    if base_hw is not None and base_hw == new_hw and base_hw in table:
        return table[base_hw], f"hardware {base_hw!r} (A/A spread between runs, fixtures/compare/tolerances.json)"
    return DEFAULT_TOLERANCE, "default"


@dataclass(frozen=True)
class Delta:
    """One metric of one benchmark in both runs; ``low``/``high`` bound the change (positive is
    worse) at the comparison's confidence when both runs kept samples, else they are None and the
    figure is ``informational`` (the reason) unless its source has nothing but point estimates."""

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
    unit: str = ""
    floor: float = 0.0  # the smallest absolute change in ``unit`` that may be a regression
    informational: str | None = None  # why this figure is shown but never gated

    @property
    def change(self) -> float:
        """Relative change, signed so that positive is worse."""
        rel = self.relative
        return rel if self.direction == "max" else -rel

    @property
    def relative(self) -> float:
        """Relative change of the number itself (positive: it grew)."""
        if self.base == 0:
            return 0.0 if self.new == 0 else math.copysign(math.inf, self.new)
        return (self.new - self.base) / abs(self.base)

    @property
    def under_floor(self) -> bool:
        return abs(self.new - self.base) < self.floor

    @property
    def regressed(self) -> bool:
        """Gated, beyond the tolerance and the unit's floor, and (with samples) significantly so:
        the whole interval is."""
        if self.informational or self.change <= self.tolerance or self.under_floor:
            return False
        return self.low > self.tolerance if self.low is not None else True

    @property
    def undecided(self) -> bool:
        """Gated, with an interval, its estimate beyond the tolerance and the floor, but the interval
        reaching back within the tolerance: neither a regression shown nor one ruled out."""
        return (not self.informational and self.low is not None and not self.under_floor
                and self.change > self.tolerance and not self.regressed)

    def interval(self) -> tuple[float, float] | None:
        """The interval of ``relative`` (the change as measured, not as worse/better)."""
        if self.low is None:
            return None
        return (self.low, self.high) if self.direction == "max" else (-self.high, -self.low)

    def describe(self) -> str:
        """The change in words, in the figure's own terms: "slower by 20.0%", "throughput down by 18.2%"."""
        rel = self.relative
        if rel == 0:
            return "unchanged"
        size = f"{100 * abs(rel):.1f}%" if math.isfinite(rel) else "from 0"
        if self.unit in ("ms", "s"):
            return f"{'slower' if rel > 0 else 'faster'} by {size}"
        noun = "throughput" if self.unit in RATES else "cost" if self.unit == "$" else self.metric
        return f"{noun} {'up' if rel > 0 else 'down'} by {size}"


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

    @property
    def undecided(self) -> list[Delta]:
        return [d for d in self.deltas if d.undecided]

    @property
    def word(self) -> str:
        """FAIL, else INCONCLUSIVE where a figure is undecided, else PASS."""
        return FAIL if self.failed else INCONCLUSIVE if self.undecided else PASS

    @property
    def informational(self) -> list[Delta]:
        return [d for d in self.deltas if d.informational]

    def render(self) -> str:
        """The gated figures as a table (change and interval as measured, then in words), then the
        informational ones, then what failed."""
        ci = f"{100 * self.confidence:g}% CI"
        lines = [f"{'benchmark':60} {'metric':22} {'base':>12} {'new':>12} {'unit':>6} {'change':>9} {ci:>19} "
                 f"{'tol':>6}  verdict"]
        for d in self.deltas:
            if d.informational:
                continue
            span = d.interval()
            interval = f"[{100 * span[0]:+6.1f}%,{100 * span[1]:+6.1f}%]" if span else "(point estimate)"
            verdict = d.describe() + ("  REGRESSION" if d.regressed else "  INCONCLUSIVE" if d.undecided else "")
            if not d.regressed and d.change > d.tolerance and d.under_floor:
                verdict += f" (under the {d.floor:g} {d.unit} floor)"
            lines.append(f"{d.benchmark[-60:]:60} {d.metric:22} {d.base:12.4g} {d.new:12.4g} {d.unit:>6} "
                         f"{100 * d.relative:+8.1f}% {interval:>19} {100 * d.tolerance:5g}%  {verdict}")
        info = self.informational
        if info:
            lines.append(f"informational, not gated ({len(info)}):")
            lines += [f"  {d.benchmark[-60:]} {d.metric}: {d.base:.4g} -> {d.new:.4g} {d.unit} ({d.describe()}; "
                      f"{d.informational})" for d in info]
        for name in self.only_new:
            lines.append(f"new benchmark (no baseline): {name}")
        for problem in self.failures:
            lines.append(f"FAILED {problem}")
        n = len(self.regressions)
        lines.append(f"{n} regression(s) beyond tolerance (default {100 * self.tolerance:g}%, significant at "
                     f"{ci}), {len(self.undecided)} inconclusive (estimate beyond it, interval not), "
                     f"{len(self.failures)} missing or invalid, {len(info)} informational; "
                     f"change is new vs base as measured: {self.word}")
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


def require_round_data(results: list[BenchResult], source: str | Path) -> None:
    """Stop (``ReportError``) when a pytest-benchmark file timed rounds but kept none of them: files
    from ``--benchmark-save`` / ``--benchmark-autosave`` hold only ``stats`` unless
    ``--benchmark-save-data`` is given, and every figure of such a file would have no interval, be
    shown as informational and never regress: a gate that passes for lack of data."""
    bare = [r for r in results if r.rounds is not None and r.rounds >= MIN_SAMPLES and "median_s" not in r.samples]
    if bare:
        raise ReportError(f"{source}: {len(bare)} of {len(results)} benchmark(s) timed rounds but kept none "
                          f"(first: {bare[0].name}, {bare[0].rounds} rounds, no stats.data), so no change can be "
                          "told from noise; write the runs with --benchmark-json FILE, or add --benchmark-save-data "
                          "to --benchmark-save / --benchmark-autosave")


def _informational(metric: str, b: BenchResult, n: BenchResult) -> str | None:
    """Why a figure cannot regress, or None: a benchmark names it informational, or it has too few
    samples for an interval (an NxDI report's fields, point estimates only, are compared as such)."""
    for r in (b, n):
        named = r.extra.get("informational")
        if isinstance(named, (list, tuple)) and metric in named:
            return "the benchmark marks it informational"
    if metric in b.directions and metric not in METRICS:
        return None  # an NxDI benchmark_report.json: its percentiles are all it has
    sb, sn = b.samples.get(metric) or [], n.samples.get(metric) or []
    if len(sb) < MIN_SAMPLES or len(sn) < MIN_SAMPLES:
        return "no samples" if not (sb or sn) else f"under {MIN_SAMPLES} samples a side"
    return None


def _delta(name: str, metric: str, b: BenchResult, n: BenchResult, tolerance: float, confidence: float,
           floors: dict[str, float]) -> Delta:
    direction = METRICS.get(metric) or b.directions.get(metric) or n.directions.get(metric) or "max"
    base, new = b.figures[metric], n.figures[metric]
    unit = unit_of(metric)
    common = {"unit": unit, "floor": floors.get(unit, 0.0)}
    why = _informational(metric, b, n)
    if why is not None or metric in b.directions:
        return Delta(name, metric, base, new, direction, tolerance, informational=why, **common)
    sb, sn = b.samples[metric], n.samples[metric]
    ci = median_ratio_ci(sb, sn, confidence)
    inverse = metric in SAMPLED_FIGURES and SAMPLED_FIGURES[metric][1]
    lo, hi = (1 / ci.high, 1 / ci.low) if inverse else (ci.low, ci.high)  # ratio of the metric itself
    changes = sorted((change_of_ratio(lo, direction), change_of_ratio(hi, direction)))
    return Delta(name, metric, base, new, direction, tolerance, changes[0], changes[1], ci.n_base, ci.n_new,
                 **common)


def compare(base: list[BenchResult], new: list[BenchResult], tolerance: float | Tolerances,
            confidence: float = CONFIDENCE, floors: dict[str, float] | None = None) -> Comparison:
    """Every figure of the base run (plus pytest-benchmark's median time) per benchmark, against
    the new run. A benchmark or metric the base has and the new run lacks, or a value that is not a
    finite number on either side, is a failure, never a silent pass. ``floors`` (unit -> absolute
    change, ``load_floors``): a smaller change is never a regression."""
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
                deltas.append(_delta(name, metric, b, n, tolerances.get(b.group, metric), confidence, floors or {}))
        for metric in sorted(set(n.invalid) - set(b.figures) - set(b.invalid)):
            problems.append(f"{name} {metric}: new value {n.invalid[metric]!r} is not a finite number")
    if not by_base:
        problems.append("the base run has no benchmarks: nothing to compare against")
    return Comparison(deltas, sorted(set(by_base) - set(by_new)), sorted(set(by_new) - set(by_base)),
                      tolerances.default, problems, confidence)
