"""Thresholds as data, and the gate that compares measured figures against them.

Format (``fixtures/thresholds/*.json``), so other tools can write it::

    {"schema": 1, "thresholds": [
        {"hardware": "trn2.3xlarge", "model": "carbon-3b", "shape": "report-bs1",
         "metric": "tkg_ms_p50", "max": 7.35, "baseline": 6.68, "tolerance": 0.10}]}

A file may carry ``"provenance"``: where its numbers come from (``sdk``, ``nxdi``, ``neuronx_cc``,
``instance``, ``date``, ``run``, all required once the block is there; ``note``, ``headroom``,
``versions`` optional), checked like the entries, so a re-baselined file says what it was measured on.
``carbon-harness thresholds --from run.json`` writes one (``harness.analysis.thresholds``).

``min`` instead of ``max`` for throughputs; ``baseline`` + ``tolerance`` alone derive the bound;
``"*"`` matches any hardware, model or shape, and the most specific entry wins. A malformed file
fails the session at start, naming the file, the entry and the field.

A gate that silently gates nothing is the worst bug, so loading also rejects: names that no
benchmark uses (model / shape / hardware / metric, with "did you mean"), bounds that are not finite
or have the wrong sign (a NaN ``max`` always fails, an infinite one always passes), an empty set
of thresholds, and two equally specific entries that both apply to one figure (which one wins
would be an accident of file order). :func:`ungated` names the figures that have a reference for
their model/shape on other hardware but none here, so the session can report them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.core.metrics import DECODINGS, EXTRA_SHAPE_LABELS, METRICS, compiled_label
from harness.core.storage import load_json

SCHEMA = 1


ENTRY_FIELDS = {"hardware", "model", "shape", "metric", "max", "min", "baseline", "tolerance", "note"}
DOCUMENT_FIELDS = ("schema", "thresholds", "provenance")
PROVENANCE_REQUIRED = ("sdk", "nxdi", "neuronx_cc", "instance", "date", "run")
PROVENANCE_FIELDS = (*PROVENANCE_REQUIRED, "note", "headroom", "versions")


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


@dataclass(frozen=True)
class KnownNames:
    """The names a threshold entry may use for hardware, model and shape (besides ``"*"``)."""

    hardware: frozenset[str]
    model: frozenset[str]
    shape: frozenset[str]


@lru_cache(maxsize=1)
def known_names() -> KnownNames:
    """Models and shapes of harness.core.spec (plus the labels benchmarks gate under, such as
    ``tokenizer`` and ``<shape>-fns``) and the hardware profiles in fixtures/hardware."""
    from harness.core.hardware import load_profiles
    from harness.core.spec import MODELS, SHAPES

    shapes = set(SHAPES) | set(EXTRA_SHAPE_LABELS) | {f"{s}-{d}" for s in SHAPES for d in DECODINGS}
    shapes |= {compiled_label(s) for s in shapes}
    return KnownNames(frozenset(load_profiles()), frozenset(MODELS), frozenset(shapes))


def _number(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in entry:
        return None
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThresholdError(f"{where}: field {key!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ThresholdError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    return value


def _check_name(entry: Mapping[str, Any], key: str, known: frozenset[str], where: str) -> None:
    value = entry[key]
    if value == "*" or value in known:
        return
    hint = difflib.get_close_matches(value.lower(), sorted(known), n=1)
    raise ThresholdError(f"{where}: field {key!r} has unknown {key} {value!r}"
                         + (f" (did you mean {hint[0]!r}?)" if hint else "")
                         + f"; known: {', '.join(sorted(known))} or \"*\"")


def parse_entry(entry: Any, where: str, known: KnownNames | None = None) -> Threshold:
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
    known = known or known_names()
    for key in ("hardware", "model", "shape"):
        _check_name(entry, key, getattr(known, key), where)
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
    if upper is not None and not upper > 0:
        raise ThresholdError(f"{where}: field 'max' must be > 0 (a bound no measurement can meet), got {upper!r}")
    if lower is not None and lower < 0:
        raise ThresholdError(f"{where}: field 'min' must be >= 0, got {lower!r}")
    if baseline is not None and baseline < 0:
        raise ThresholdError(f"{where}: field 'baseline' must be >= 0, got {baseline!r}")
    bound = upper if direction == "max" else lower
    if bound is None:
        if baseline is None or tolerance is None:
            raise ThresholdError(f"{where}: needs {direction!r}, or 'baseline' and 'tolerance' to derive it")
        bound = baseline * (1 + tolerance) if direction == "max" else baseline / (1 + tolerance)
        if direction == "max" and not bound > 0:
            raise ThresholdError(f"{where}: 'baseline' {baseline!r} gives max {bound!r}: must be > 0")
    return Threshold(entry["hardware"], entry["model"], entry["shape"], metric, bound, direction,
                     baseline, tolerance, where)


def _unknown_field(fields: Iterable[str], allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        hint = difflib.get_close_matches(unknown[0], allowed, n=1)
        raise ThresholdError(f"{where}: unknown field {unknown[0]!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                             + f"; fields: {', '.join(allowed)}")


def parse_provenance(data: Any, source: str) -> dict[str, Any]:
    """A thresholds file's ``provenance``: every required field a non-empty string, ``date`` an ISO
    date (``2026-05-21``, or a date and time), ``versions`` a name -> version object; a misspelled
    field is an error naming it, as in the entries."""
    where = f"{source}: provenance"
    if not isinstance(data, dict):
        raise ThresholdError(f"{where}: must be an object with {', '.join(PROVENANCE_REQUIRED)}, got {data!r}")
    _unknown_field(data, PROVENANCE_FIELDS, where)
    for key in PROVENANCE_REQUIRED:
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ThresholdError(f"{where}: field {key!r} is required (a non-empty string: say 'none' or "
                                 f"'not recorded' where it does not apply), got {data.get(key)!r}")
    import datetime

    try:
        datetime.datetime.fromisoformat(data["date"])
    except ValueError:
        raise ThresholdError(f"{where}: field 'date' {data['date']!r} is not an ISO date such as 2026-05-21") from None
    versions = data.get("versions", {})
    if not isinstance(versions, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in versions.items()):
        raise ThresholdError(f"{where}: field 'versions' must map package names to version strings (or null)")
    for key in ("note", "headroom"):
        if key in data and not isinstance(data[key], str):
            raise ThresholdError(f"{where}: field {key!r} must be a string, got {data[key]!r}")
    return dict(data)


def parse_thresholds(data: Any, source: str, known: KnownNames | None = None) -> list[Threshold]:
    if not isinstance(data, dict):
        raise ThresholdError(f"{source}: must hold a JSON object with 'schema' and 'thresholds'")
    _unknown_field(data, DOCUMENT_FIELDS, source)
    if "provenance" in data:
        parse_provenance(data["provenance"], source)
    if data.get("schema") != SCHEMA:
        raise ThresholdError(f"{source}: field 'schema' is {data.get('schema')!r}; this harness reads schema {SCHEMA}")
    entries = data.get("thresholds")
    if not isinstance(entries, list):
        raise ThresholdError(f"{source}: field 'thresholds' must be a list")
    return [parse_entry(e, f"{source}: entry {i}", known) for i, e in enumerate(entries)]


def _overlap(a: Threshold, b: Threshold) -> tuple[str, str, str] | None:
    """A (hardware, model, shape) both entries apply to, or None when no figure matches both."""
    key = []
    for x, y in ((a.hardware, b.hardware), (a.model, b.model), (a.shape, b.shape)):
        if x != "*" and y != "*" and x != y:
            return None
        key.append(y if x == "*" else x)
    return key[0], key[1], key[2]


def check_ambiguous(thresholds: list[Threshold]) -> None:
    """Reject two equally specific entries for one metric that both apply to some figure: which
    one wins would depend on file order."""
    by_metric: dict[str, list[Threshold]] = {}
    for t in thresholds:
        by_metric.setdefault(t.metric, []).append(t)
    for group in by_metric.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                where = _overlap(a, b) if a.specificity == b.specificity else None
                if where is not None:
                    raise ThresholdError(
                        f"{b.source}: ambiguous with {a.source}: both set {a.metric!r} for hardware={where[0]!r} "
                        f"model={where[1]!r} shape={where[2]!r} with the same specificity; remove one or make "
                        "one more specific")


def load_thresholds(paths: Iterable[str | Path], known: KnownNames | None = None) -> list[Threshold]:
    """Every threshold in the given files (directories contribute their ``*.json``); at least one
    entry in all, each path contributing at least one file, or a ThresholdError."""
    out: list[Threshold] = []
    paths = list(paths)
    if not paths:
        raise ThresholdError("no thresholds file given: pass --carbon-thresholds FILE|DIR")
    for path in paths:
        if str(path).strip() == "":
            raise ThresholdError("--carbon-thresholds '' is empty: give a thresholds file or directory")
        path = Path(path)
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        if not files:
            raise ThresholdError(f"thresholds directory {path} holds no *.json file")
        for f in files:
            out.extend(parse_thresholds(load_json(f, ThresholdError, "thresholds file"), str(f), known))
    if not out:
        raise ThresholdError(f"{', '.join(str(p) for p in paths)}: 0 threshold entries; a gate needs at least one")
    check_ambiguous(out)
    return out


def ungated(thresholds: Iterable[Threshold], hardware: str, model: str, shape: str,
            figures: Mapping[str, Any]) -> dict[str, list[str]]:
    """Figures with no threshold here although one exists for their model/shape/metric on other
    hardware: metric -> the hardware names that have one. A missing profile entry (or a typo in a
    profile name) then shows up instead of passing silently."""
    thresholds = list(thresholds)
    out: dict[str, list[str]] = {}
    for metric, value in figures.items():
        if metric not in METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if select(thresholds, hardware, model, shape, metric) is not None:
            continue
        elsewhere = sorted({t.hardware for t in thresholds
                            if t.metric == metric and t.model in ("*", model) and t.shape in ("*", shape)})
        if elsewhere:
            out[metric] = elsewhere
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


# What a run gated, figure by figure, read back from its benchmarks' extra_info (the merged set under
# pytest-xdist): ``gate`` is the gate's record ({metric: {..., "passed": bool}}, "no threshold", or
# "not gated: <why>" from a test that did not ask the gate) and ``not_gated`` maps each figure the gate
# was given but could not gate to why. A run whose gates held nothing must not look like a pass.
NOT_GATED_KEY = "not_gated"
NO_THRESHOLD = "no threshold"
NOT_PERF = "not -m perf"


def not_gated_reason(text: str) -> str:
    """The short reason of a ``"not gated: ..."`` record: what precedes its explanation."""
    reason = text.split(":", 1)[1].strip() if text.lower().startswith("not gated:") else text.strip()
    if "-m selects perf" in reason:
        return NOT_PERF
    for stop in (" (", ";", ": "):
        reason = reason.split(stop, 1)[0]
    return reason.strip() or "not gated"


def figure_outcomes(extra_info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(metric, outcome) for every figure a benchmark recorded: ``passed``, ``failed`` or the reason
    it was not gated. Figures come from the gate's own record (``gate`` and ``not_gated``); a record
    without ``not_gated`` (a test that gated by itself, or an older file) counts the gateable figures
    of its extra_info, and a benchmark that never went near a gate counts none."""
    gate = extra_info.get("gate")
    if gate is None:
        return []
    recorded = extra_info.get(NOT_GATED_KEY)
    out: list[tuple[str, str]] = []
    if isinstance(gate, Mapping):
        out += [(m, "passed" if isinstance(r, Mapping) and r.get("passed") else "failed") for m, r in gate.items()]
    if isinstance(recorded, Mapping):
        return out + [(m, not_gated_reason(str(reason))) for m, reason in recorded.items()]
    if isinstance(gate, str):
        reason = NO_THRESHOLD if gate == NO_THRESHOLD else not_gated_reason(gate)
        out += [(m, reason) for m, v in extra_info.items()
                if m in METRICS and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return out


@dataclass(frozen=True)
class GateTally:
    """How many figures a run gated (passed / failed) and how many it recorded ungated, by reason."""

    passed: int = 0
    failed: int = 0
    not_gated: tuple[tuple[str, int], ...] = ()  # (reason, count), most frequent first

    @property
    def gated(self) -> int:
        return self.passed + self.failed

    @property
    def ungated(self) -> int:
        return sum(n for _, n in self.not_gated)

    @property
    def recorded(self) -> int:
        """Every figure the run measured that a gate could apply to (0: nothing to say, as in ``-m dna``)."""
        return self.gated + self.ungated

    def summary(self) -> str:
        reasons = ", ".join(f"{n} {reason}" for reason, n in self.not_gated)
        return (f"{self.gated} figure{'s' * (self.gated != 1)} gated ({self.passed} passed, {self.failed} failed); "
                f"{self.ungated} recorded but not gated" + (f" ({reasons})" if reasons else ""))

    def line(self) -> str:
        return f"carbon-harness: gates: {self.summary()}"


def tally_gates(extra_infos: Iterable[Mapping[str, Any]]) -> GateTally:
    from collections import Counter

    outcomes = Counter(outcome for info in extra_infos for _, outcome in figure_outcomes(info))
    passed, failed = outcomes.pop("passed", 0), outcomes.pop("failed", 0)
    reasons = tuple(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    return GateTally(passed, failed, reasons)
