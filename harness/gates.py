"""Thresholds as data, and the gate that compares measured figures against them.

Format (``fixtures/thresholds/*.json``), so other tools can write it::

    {"schema": 1, "thresholds": [
        {"hardware": "trn2.3xlarge", "model": "carbon-3b", "shape": "report-bs1",
         "metric": "tkg_ms_p50", "max": 7.35, "baseline": 6.68, "tolerance": 0.10}]}

``min`` instead of ``max`` for throughputs; ``baseline`` + ``tolerance`` alone derive the bound;
``"*"`` matches any hardware, model or shape, and the most specific entry wins. A malformed file
fails the session at start, naming the file, the entry and the field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.storage import load_json

SCHEMA = 1
# Metric name -> direction: "max" for lower-is-better (times), "min" for higher-is-better.
METRICS: dict[str, str] = {
    "cte_ms_p50": "max", "cte_ms_p99": "max", "tkg_ms_p50": "max", "tkg_ms_p99": "max", "e2e_ms_p50": "max",
    "compile_s": "max", "load_s": "max",
    "tokens_per_s": "min", "bp_per_s": "min", "kbp_per_s": "min", "valid_dna_fraction": "min",
    "tkg_roofline_fraction": "min", "dna_encode_speedup": "min", "top1_agreement": "min",
    # speculative decoding (harness.speculative)
    "spec_acceptance_rate": "min", "spec_tokens_per_step": "min", "spec_draft_ms_per_step": "max",
    "spec_verify_ms_per_step": "max", "spec_speedup": "min", "spec_speedup_gain": "min",
}
ENTRY_FIELDS = {"hardware", "model", "shape", "metric", "max", "min", "baseline", "tolerance", "note"}


class ThresholdError(ValueError):
    """A thresholds file is malformed; the message names the file, entry and field."""


@dataclass(frozen=True)
class Threshold:
    hardware: str
    model: str
    shape: str
    metric: str
    bound: float
    kind: str  # "max" or "min"
    baseline: float | None = None
    tolerance: float | None = None
    source: str = ""

    def matches(self, hardware: str, model: str, shape: str, metric: str) -> bool:
        return metric == self.metric and all(
            want in ("*", have) for want, have in ((self.hardware, hardware), (self.model, model), (self.shape, shape)))

    @property
    def specificity(self) -> int:
        return sum(v != "*" for v in (self.hardware, self.model, self.shape))

    def check(self, value: float) -> bool:
        return value <= self.bound if self.kind == "max" else value >= self.bound


def _number(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in entry:
        return None
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThresholdError(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def parse_entry(entry: Any, where: str) -> Threshold:
    if not isinstance(entry, dict):
        raise ThresholdError(f"{where}: must be an object, got {type(entry).__name__}")
    unknown = set(entry) - ENTRY_FIELDS
    if unknown:
        field = sorted(unknown)[0]
        hint = difflib.get_close_matches(field, ENTRY_FIELDS, n=1)
        raise ThresholdError(f"{where}: unknown field {field!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                             + f"; fields: {', '.join(sorted(ENTRY_FIELDS))}")
    for key in ("hardware", "model", "shape", "metric"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise ThresholdError(f"{where}: field {key!r} is required (a name or \"*\"), got {entry.get(key)!r}")
    metric = entry["metric"]
    if metric not in METRICS:
        hint = difflib.get_close_matches(metric, METRICS, n=1)
        raise ThresholdError(f"{where}: field 'metric' has unknown metric {metric!r}"
                             + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; known: {', '.join(METRICS)}")
    direction = METRICS[metric]
    upper, lower = _number(entry, "max", where), _number(entry, "min", where)
    baseline, tolerance = _number(entry, "baseline", where), _number(entry, "tolerance", where)
    if upper is not None and lower is not None:
        raise ThresholdError(f"{where}: give 'max' or 'min', not both")
    wrong = "min" if direction == "max" else "max"
    if (lower if direction == "max" else upper) is not None:
        raise ThresholdError(f"{where}: field {wrong!r} does not fit {metric!r} "
                             f"({'lower' if direction == 'max' else 'higher'} is better): use {direction!r}")
    if tolerance is not None and not 0 <= tolerance < 10:
        raise ThresholdError(f"{where}: field 'tolerance' must be a fraction such as 0.10, got {tolerance!r}")
    bound = upper if direction == "max" else lower
    if bound is None:
        if baseline is None or tolerance is None:
            raise ThresholdError(f"{where}: needs {direction!r}, or 'baseline' and 'tolerance' to derive it")
        bound = baseline * (1 + tolerance) if direction == "max" else baseline / (1 + tolerance)
    return Threshold(entry["hardware"], entry["model"], entry["shape"], metric, bound, direction,
                     baseline, tolerance, where)


def parse_thresholds(data: Any, source: str) -> list[Threshold]:
    if not isinstance(data, dict):
        raise ThresholdError(f"{source}: must hold a JSON object with 'schema' and 'thresholds'")
    if data.get("schema") != SCHEMA:
        raise ThresholdError(f"{source}: field 'schema' is {data.get('schema')!r}; this harness reads schema {SCHEMA}")
    entries = data.get("thresholds")
    if not isinstance(entries, list):
        raise ThresholdError(f"{source}: field 'thresholds' must be a list")
    return [parse_entry(e, f"{source}: entry {i}") for i, e in enumerate(entries)]


def load_thresholds(paths: Iterable[str | Path]) -> list[Threshold]:
    """Every threshold in the given files (directories contribute their ``*.json``)."""
    out: list[Threshold] = []
    for path in paths:
        path = Path(path)
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        for f in files:
            out.extend(parse_thresholds(load_json(f, ThresholdError, "thresholds file"), str(f)))
    return out


def select(thresholds: Iterable[Threshold], hardware: str, model: str, shape: str, metric: str) -> Threshold | None:
    """The most specific threshold that applies (fewest wildcards); None if none does."""
    matching = [t for t in thresholds if t.matches(hardware, model, shape, metric)]
    return max(matching, key=lambda t: t.specificity, default=None)


@dataclass(frozen=True)
class GateResult:
    metric: str
    value: float
    threshold: Threshold

    @property
    def passed(self) -> bool:
        return self.threshold.check(self.value)

    def message(self) -> str:
        t = self.threshold
        verb = "exceeds max" if t.kind == "max" else "is below min"
        rel = "within" if self.passed else verb
        base = f", baseline {t.baseline:g}" if t.baseline is not None else ""
        return f"{self.metric} = {self.value:.4g} {rel} {t.bound:.4g}{base} ({t.source})"


def evaluate(thresholds: Iterable[Threshold], hardware: str, model: str, shape: str,
             figures: Mapping[str, Any]) -> list[GateResult]:
    """A GateResult for every figure that has a threshold; figures without one are not gated."""
    thresholds = list(thresholds)
    results = []
    for metric, value in figures.items():
        if metric not in METRICS or not isinstance(value, (int, float)):
            continue
        t = select(thresholds, hardware, model, shape, metric)
        if t is not None:
            results.append(GateResult(metric, float(value), t))
    return results
