"""Reading pytest-benchmark JSON back: the reference tables, a throughput plot, and comparison
of two runs (the release gate)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.cost import cost
from harness.gates import METRICS
from harness.stats import CONFIDENCE, change_of_ratio, median_ratio_ci
from harness.storage import load_json

# Version of what the plugin writes into pytest-benchmark JSON (machine_info.carbon_harness.schema):
# 1 adds extra_info.samples (per-round e2e/cte/tkg ms) next to pytest-benchmark's stats.data.
RESULTS_SCHEMA = 1

TABLE_COLUMNS = [("model", "model"), ("shape", "shape"), ("cte_ms_p50", "CTE p50 ms"), ("tkg_ms_p50", "TKG p50 ms"),
                 ("e2e_ms_p50", "E2E p50 ms"), ("tokens_per_s", "tok/s"), ("kbp_per_s", "kbp/s"),
                 ("valid_dna_fraction", "valid DNA"), ("tkg_roofline_fraction", "roofline"),
                 ("compile_s", "compile s"), ("load_s", "load s"),
                 # scoring workloads (harness.scoring); columns no benchmark has are dropped
                 ("workload", "workload"), ("variants_per_s", "variants/s"), ("scored_kbp_per_s", "scored kbp/s"),
                 ("usd_per_million_variants", "$/M variants")]
COST_COLUMNS = [("usd_per_gbp", "$/Gbp"), ("mbp_per_usd", "Mbp/$")]


class ReportError(ValueError):
    """A file is not pytest-benchmark JSON; the message names it."""


@dataclass
class BenchResult:
    name: str
    group: str | None
    extra: dict[str, Any]
    median_s: float | None
    price_per_hour: float | None = None
    figures: dict[str, float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # metric -> per-round values
    invalid: dict[str, Any] = field(default_factory=dict)  # metric -> a value that is not a finite number
    directions: dict[str, str] = field(default_factory=dict)  # for metrics outside METRICS (NxDI reports)


def optional_object(parent: dict, key: str, where: str, label: str | None = None) -> dict:
    """``parent[key]`` as a dict: absent or null is empty, anything else but an object is one error."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ReportError(f"{where}: '{label or key}' must be an object, got {type(value).__name__}")
    return value


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sample_list(value: Any, where: str) -> list[float]:
    if not isinstance(value, list) or not all(_finite(v) for v in value):
        raise ReportError(f"{where} must be a list of finite numbers")
    return [float(v) for v in value]


# Figures whose per-round samples a harness benchmark keeps in extra_info["samples"] (see
# harness.figures.generation_figures): metric -> (sample key, figure is the inverse of the sample).
SAMPLED_FIGURES = {"e2e_ms_p50": ("e2e_ms", False), "cte_ms_p50": ("cte_ms", False), "tkg_ms_p50": ("tkg_ms", False),
                   "tokens_per_s": ("e2e_ms", True), "bp_per_s": ("e2e_ms", True), "kbp_per_s": ("e2e_ms", True)}


def parse_benchmark(b: Any, i: int, source: str, price: float | None) -> BenchResult:
    """One entry of a pytest-benchmark JSON's ``benchmarks``; malformed ones raise naming it."""
    where = f"{source}: benchmarks[{i}]"
    if not isinstance(b, dict):
        raise ReportError(f"{where} must be an object, got {type(b).__name__}")
    name = b.get("fullname") or b.get("name")
    if not isinstance(name, str) or not name:
        raise ReportError(f"{where} has no 'name' (or 'fullname') string")
    where = f"{source}: benchmark {name}"
    extra = optional_object(b, "extra_info", where)
    stats = optional_object(b, "stats", where)
    median = stats.get("median")
    if median is not None and (isinstance(median, bool) or not isinstance(median, (int, float))):
        raise ReportError(f"{where}: 'stats.median' must be a number, got {median!r}")
    group = b.get("group")
    if group is not None and not isinstance(group, str):
        raise ReportError(f"{where}: 'group' must be a string, got {group!r}")
    figures, invalid, samples = {}, {}, {}
    if median is not None:
        (figures if math.isfinite(median) else invalid)["median_s"] = float(median)
    for k, v in extra.items():
        if k in METRICS:
            if _finite(v):
                figures[k] = float(v)
            else:
                invalid[k] = v
    if isinstance(stats.get("data"), list) and stats["data"]:
        samples["median_s"] = _sample_list(stats["data"], f"{where}: 'stats.data'")
    raw = extra.get("samples")
    if raw is not None:
        if not isinstance(raw, dict):
            raise ReportError(f"{where}: 'extra_info.samples' must be an object of lists")
        raw = {k: _sample_list(v, f"{where}: 'extra_info.samples.{k}'") for k, v in raw.items()}
        for metric, (key, _) in SAMPLED_FIGURES.items():
            if metric in figures and raw.get(key):
                samples[metric] = raw[key]
    rounds = samples.get("median_s")
    if rounds:  # a figure that is the median of the benchmark's own rounds takes them as its samples
        ms = float(np.median(rounds)) * 1000.0
        for metric in ("cte_ms_p50", "tkg_ms_p50", "e2e_ms_p50"):
            if metric in figures and metric not in samples and math.isclose(figures[metric], ms, rel_tol=1e-9):
                samples[metric] = [v * 1000.0 for v in rounds]
    return BenchResult(name, group, extra, float(median) if median is not None else None, price, figures, samples,
                       invalid)


def load_results(path: str | Path) -> tuple[list[BenchResult], dict[str, Any]]:
    """pytest-benchmark JSON (as the plugin writes it), or an NxDI ``benchmark_report.json``."""
    data = load_json(path, ReportError, "benchmark JSON")
    from harness.nxdi_report import from_nxdi, is_nxdi_report

    if is_nxdi_report(data):
        return from_nxdi(data, str(path)), {}
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ReportError(f"{path} is not pytest-benchmark JSON (no 'benchmarks' list) nor an NxDI "
                          "benchmark_report.json; write one with pytest --benchmark-json FILE")
    machine = optional_object(data, "machine_info", str(path))
    manifest = optional_object(machine, "carbon_harness", str(path), "machine_info.carbon_harness")
    schema = manifest.get("schema")
    if schema is not None and schema != RESULTS_SCHEMA:
        raise ReportError(f"{path}: results schema {schema!r}; this harness reads schema {RESULTS_SCHEMA}")
    hardware = manifest.get("hardware")
    price = hardware.get("price_per_hour") if isinstance(hardware, dict) else None
    if not _finite(price) or price <= 0:
        price = None
    out = [parse_benchmark(b, i, str(path), price) for i, b in enumerate(data["benchmarks"])]
    return out, manifest


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def table_rows(results: list[BenchResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        if "model" not in r.extra:
            continue  # not a model benchmark (e.g. the tokenizer speed benchmark)
        row = {key: r.extra.get(key) for key, _ in TABLE_COLUMNS}
        row["benchmark"] = r.name.split("::")[-1]
        bp = r.extra.get("bp_per_s")
        if r.price_per_hour and bp:
            c = cost(bp, r.price_per_hour)
            row.update(usd_per_gbp=c.usd_per_gbp, mbp_per_usd=c.mbp_per_usd)
        rows.append(row)
    return rows


def markdown(results: list[BenchResult]) -> str:
    rows = table_rows(results)
    columns = [("benchmark", "benchmark")] + TABLE_COLUMNS
    if any("usd_per_gbp" in r for r in rows):
        columns += COST_COLUMNS
    columns = [(k, h) for k, h in columns if any(r.get(k) is not None for r in rows)]
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(results: list[BenchResult], path: str | Path) -> Path:
    """Throughput (tokens/s) per model and shape, as a bar chart (needs the [plot] extra), in the
    format the file's suffix names (png, svg, pdf, ...); written atomically, nothing left on failure."""
    path = Path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ReportError("--plot needs matplotlib: pip install -e '.[plot]'") from exc
    rows = [r for r in table_rows(results) if _finite(r.get("tokens_per_s"))]
    if not rows:
        raise ReportError("no benchmark in this file has tokens_per_s to plot")
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 5))
    try:
        fmt = path.suffix[1:].lower()
        supported = fig.canvas.get_supported_filetypes()
        if fmt not in supported:
            raise ReportError(f"--plot {path}: suffix {path.suffix or '(none)'!r} is not an image format; "
                              f"use one of: {', '.join('.' + k for k in sorted(supported))}")
        labels = [f"{r['model']} {r['shape']}\n{r['benchmark']}" for r in rows]
        ax.bar(range(len(rows)), [r["tokens_per_s"] for r in rows], color="#2a7f62")
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=35, ha="right")
        ax.set_ylabel("tokens / s")
        ax.set_title("Carbon throughput per model and shape")
        fig.tight_layout()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fig.savefig(tmp, dpi=120, format=fmt)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Comparison: the release gate
# ---------------------------------------------------------------------------------------------

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


def parse_percent(value: str) -> float:
    """``5%`` or ``0.05`` -> 0.05."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a percentage such as 5% or 0.05") from None
    if not 0 <= number < 10:  # also rejects NaN
        raise ValueError(f"{value!r} is out of range (0% .. 1000%)")
    return number


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
