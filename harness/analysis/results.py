"""Results read back, from either source, into one ``BenchResult`` list: the harness's
pytest-benchmark JSON (with every round's samples), and NxDI's ``benchmark_report.json``, read and
written, so harness numbers line up with the ones teams already get from NxDI's ``benchmark_sampling``.

Format (neuronx_distributed_inference/utils/benchmark.py ``generate_report``): one object per
sub-model, ``e2e_model``, ``context_encoding_model``, ``token_generation_model`` (others such as
``speculation_model`` may appear), each with ``latency_ms_p50/p90/p95/p99/p100`` (numpy's linear
percentiles), ``latency_ms_avg`` and ``throughput`` = tokens / total time of the timed runs, where
the tokens are batch x (prompt + output) for e2e, batch x prompt for context encoding and batch x
1 per step for token generation. NxDI counts the shape's max lengths; the harness counts the
tokens of its prompts and its generated ids (never re-tokenized text), which are the same for
fixed-length benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.metrics import METRICS
from harness.core.storage import load_json

# Version of what the plugin writes into pytest-benchmark JSON (carbon_harness.schema, at the top level
# and in machine_info.carbon_harness):
# 1 adds extra_info.samples (per-round e2e/cte/tkg ms) next to pytest-benchmark's stats.data.
RESULTS_SCHEMA = 1


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
    rounds: int | None = None  # pytest-benchmark's stats.rounds: how many rounds were timed, kept or not


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
# harness.analysis.figures.generation_figures): metric -> (sample key, figure is the inverse of the sample).
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
    rounds = stats.get("rounds")
    return BenchResult(name, group, extra, float(median) if median is not None else None, price, figures, samples,
                       invalid, rounds=rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None)


def run_manifest_of(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The run manifest of a harness benchmark JSON: the top-level ``carbon_harness`` (the whole
    manifest) over ``machine_info.carbon_harness`` (its stable identity only; the whole manifest in
    files written before they were split); a schema this harness does not read is one error."""
    machine = optional_object(data, "machine_info", source)
    parts = (optional_object(machine, "carbon_harness", source, "machine_info.carbon_harness"),
             optional_object(data, "carbon_harness", source))
    for part in parts:
        schema = part.get("schema")
        if schema is not None and schema != RESULTS_SCHEMA:
            raise ReportError(f"{source}: results schema {schema!r}; this harness reads schema {RESULTS_SCHEMA}")
    return {**parts[0], **parts[1]}


def load_results(path: str | Path) -> tuple[list[BenchResult], dict[str, Any]]:
    """pytest-benchmark JSON (as the plugin writes it), or an NxDI ``benchmark_report.json``."""
    data = load_json(path, ReportError, "benchmark JSON")
    if is_nxdi_report(data):
        return from_nxdi(data, str(path)), {}
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ReportError(f"{path} is not pytest-benchmark JSON (no 'benchmarks' list) nor an NxDI "
                          "benchmark_report.json; write one with pytest --benchmark-json FILE")
    manifest = run_manifest_of(data, str(path))
    hardware = manifest.get("hardware")
    price = hardware.get("price_per_hour") if isinstance(hardware, dict) else None
    if not _finite(price) or price <= 0:
        price = None
    out = [parse_benchmark(b, i, str(path), price) for i, b in enumerate(data["benchmarks"])]
    return out, manifest


E2E, CTE, TKG = "e2e_model", "context_encoding_model", "token_generation_model"
SUBMODELS = (E2E, CTE, TKG)
FIELDS = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p95", "latency_ms_p99", "latency_ms_p100",
          "latency_ms_avg", "throughput")
DIRECTIONS = {f: ("min" if f == "throughput" else "max") for f in FIELDS}


def is_nxdi_report(data: Any) -> bool:
    return isinstance(data, dict) and "benchmarks" not in data and any(k in data for k in SUBMODELS)


def from_nxdi(data: dict[str, Any], source: str) -> list:
    """One result per sub-model (named ``nxdi::<sub-model>``) with the report's fields as figures."""
    out = []
    for key, entry in data.items():
        if entry is None:  # NxDI writes None for a sub-model that was skipped
            continue
        if not isinstance(entry, dict):
            raise ReportError(f"{source}: NxDI report field {key!r} must be an object, got {type(entry).__name__}")
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ReportError(f"{source}: NxDI report {key!r} lacks {', '.join(missing)}")
        figures, invalid = {}, {}
        for f in FIELDS:
            v = entry[f]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if ok:
                figures[f] = float(v)
            else:
                invalid[f] = v
        out.append(BenchResult(f"nxdi::{key}", "nxdi", dict(entry), None, None, figures, {}, invalid, dict(DIRECTIONS)))
    if not out:
        raise ReportError(f"{source}: NxDI report has no sub-model results")
    return out


def submodel_report(latency_ms: list[float], tokens_per_run: float) -> dict[str, float]:
    """NxDI's ``generate_report`` from per-run latencies in ms and the tokens each run processes."""
    arr = np.asarray(latency_ms, dtype=float)
    if arr.size == 0:
        raise ValueError("no latencies to report")
    report = {f"latency_ms_p{p}": float(np.percentile(arr, p)) for p in (50, 90, 95, 99, 100)}
    report["latency_ms_avg"] = float(arr.mean())
    report["throughput"] = float(arr.size * tokens_per_run / (arr.sum() / 1000.0))
    return report


def _int(extra: dict[str, Any], key: str, name: str) -> int:
    value = extra.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReportError(f"benchmark {name}: extra_info.{key} must be a non-negative integer, got {value!r}")
    return value


def to_nxdi(results: list, select: str | None = None) -> dict[str, dict[str, float]]:
    """An NxDI ``benchmark_report.json`` from the one harness generation benchmark (with per-round
    e2e / cte / tkg samples) whose name contains ``select``."""
    candidates = [r for r in results if isinstance(r.extra.get("samples"), dict) and r.extra["samples"].get("e2e_ms")]
    if select:
        candidates = [r for r in candidates if select in r.name]
    if len(candidates) != 1:
        names = "; ".join(r.name for r in candidates) or "none"
        raise ReportError(f"an NxDI report needs exactly one generation benchmark with samples"
                          f"{f' matching {select!r}' if select else ''}; found {len(candidates)}: {names}"
                          + ("" if select else " (choose one with --nxdi-select SUBSTRING)"))
    r = candidates[0]
    samples, extra = r.extra["samples"], r.extra
    batch, prompt, new = (_int(extra, k, r.name) for k in ("batch_size", "prompt_tokens", "new_tokens"))
    report = {E2E: submodel_report(samples["e2e_ms"], batch * (prompt + new))}
    if samples.get("cte_ms"):
        report[CTE] = submodel_report(samples["cte_ms"], batch * prompt)
    if samples.get("tkg_ms"):
        report[TKG] = submodel_report(samples["tkg_ms"], batch)
    return report


# ---------------------------------------------------------------------------------------------
# JUnit XML (pytest --junitxml): which tests passed, failed, errored or were skipped
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CaseOutcome:
    outcome: str  # "passed", "failed", "error" or "skipped"
    message: str = ""  # the failure, error or skip message (first line)


def parse_junit(text: str, source: str = "junit XML") -> dict[str, CaseOutcome]:
    """Test id (``file::name``) -> outcome, from pytest's ``--junitxml`` output."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ReportError(f"{source}: not JUnit XML ({exc})") from None
    out: dict[str, CaseOutcome] = {}
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        path = classname.replace(".", "/") + ".py" if classname else ""
        if "/tests/" in path:  # pytest prefixes the checkout's folder name when tests/ is a package
            path = path[path.index("/tests/") + 1:]
        test_id = f"{path}::{name}" if path else name
        outcome, message = "passed", ""
        for tag in ("error", "failure", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"error": "error", "failure": "failed", "skipped": "skipped"}[tag]
                message = (node.get("message") or node.text or "").strip().splitlines()[0:1]
                message = message[0] if message else ""
                break
        if test_id in out and out[test_id].outcome != "passed" and outcome == "passed":
            continue  # a teardown error is reported as a second testcase: keep the failure
        out[test_id] = CaseOutcome(outcome, message)
    return out
