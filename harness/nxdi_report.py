"""NxDI's ``benchmark_report.json``, read and written, so harness numbers line up with the ones
teams already get from NxDI's ``benchmark_sampling``.

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
from typing import Any

import numpy as np

E2E, CTE, TKG = "e2e_model", "context_encoding_model", "token_generation_model"
SUBMODELS = (E2E, CTE, TKG)
FIELDS = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p95", "latency_ms_p99", "latency_ms_p100",
          "latency_ms_avg", "throughput")
DIRECTIONS = {f: ("min" if f == "throughput" else "max") for f in FIELDS}


def is_nxdi_report(data: Any) -> bool:
    return isinstance(data, dict) and "benchmarks" not in data and any(k in data for k in SUBMODELS)


def from_nxdi(data: dict[str, Any], source: str) -> list:
    """One result per sub-model (named ``nxdi::<sub-model>``) with the report's fields as figures."""
    from harness.report import BenchResult, ReportError

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
    from harness.report import ReportError

    value = extra.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReportError(f"benchmark {name}: extra_info.{key} must be a non-negative integer, got {value!r}")
    return value


def to_nxdi(results: list, select: str | None = None) -> dict[str, dict[str, float]]:
    """An NxDI ``benchmark_report.json`` from the one harness generation benchmark (with per-round
    e2e / cte / tkg samples) whose name contains ``select``."""
    from harness.report import ReportError

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
