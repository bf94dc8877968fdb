"""Thresholds derived from a run: ``carbon-harness thresholds --from run.json --headroom 10% --out FILE``.

Re-baselining on one's own SDK used to mean hand-editing dozens of entries; this derives them the way
``fixtures/thresholds/trn2.3xlarge.json`` was written: per (hardware, model, shape, metric) the
measured figure is the ``baseline``, the bound is ``baseline x (1 + headroom)`` for a time
(``max``) and ``baseline / (1 + headroom)`` for a throughput (``min``), and ``tolerance`` is the
headroom. The run's manifest (``machine_info.carbon_harness``) gives the file's provenance.

Pure functions on the parsed JSON; the command line reads and writes the files.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.gates import SCHEMA, GateResult, Threshold, evaluate, figure_outcomes
from harness.core.metrics import METRICS
from harness.core.options import parse_percent

SIGNIFICANT = 6  # digits a bound keeps, rounded away from the figure so the run it came from passes


def parse_headroom(value: str) -> float:
    """``10%`` or ``0.10`` -> 0.10. Zero is refused (the next run would fail on noise alone) and so
    is a bare number of 1 or more (``10`` is ambiguous: 10% or 1000%?)."""
    try:
        headroom = parse_percent(value)
    except ValueError as exc:
        raise ValueError(f"--headroom {exc}") from None
    if not headroom > 0:
        raise ValueError(f"--headroom {value!r} must be above 0% (a bound at the measured value fails the next run "
                         "on noise alone); e.g. 10%")
    return headroom


def _round_away(x: float, kind: str) -> float:
    """``x`` to SIGNIFICANT digits, up for a ``max`` and down for a ``min``."""
    if x == 0:
        return 0.0
    scale = 10 ** (SIGNIFICANT - 1 - math.floor(math.log10(abs(x))))
    return (math.ceil(x * scale) if kind == "max" else math.floor(x * scale)) / scale


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


@dataclass(frozen=True)
class Derived:
    """One derived entry: the worst value of the figure over the benchmarks that reported it
    (a time's largest, a throughput's smallest), so every one of them passes the bound."""

    hardware: str
    model: str
    shape: str
    metric: str
    kind: str
    baseline: float
    bound: float
    benchmarks: tuple[str, ...]

    def entry(self, headroom: float) -> dict[str, Any]:
        return {"hardware": self.hardware, "model": self.model, "shape": self.shape, "metric": self.metric,
                self.kind: self.bound, "baseline": self.baseline, "tolerance": headroom}


@dataclass(frozen=True)
class Derivation:
    entries: list[Derived]
    skipped: list[str] = field(default_factory=list)  # "benchmark metric: why", for the command to print


def gate_key(extra_info: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The (hardware, model, shape) a benchmark's figures were gated under, as the gate recorded it
    (``gated_as``). Not the benchmark's own ``shape``: a suite gates ``dna-suite-bs1-fns`` or
    ``speculative-self`` on an engine of shape ``dna-suite-bs1``, and one bound for both would be wrong."""
    gated_as = extra_info.get("gated_as")
    if not isinstance(gated_as, Mapping):
        return None
    key = tuple(gated_as.get(k) for k in ("hardware", "model", "shape"))
    return key if all(isinstance(k, str) and k for k in key) else None  # type: ignore[return-value]


def run_benchmarks(data: Any, source: str) -> list[Mapping[str, Any]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("benchmarks"), list):
        raise ValueError(f"{source}: not a pytest-benchmark JSON (no 'benchmarks' list)")
    return [b for b in data["benchmarks"] if isinstance(b, Mapping)]


def derive(benchmarks: Iterable[Mapping[str, Any]], headroom: float) -> Derivation:
    """Entries for every gateable figure of the run's benchmarks."""
    worst: dict[tuple[str, str, str, str], tuple[float, list[str]]] = {}
    skipped: list[str] = []
    for bench in benchmarks:
        name = str(bench.get("name", "?"))
        info = bench.get("extra_info") or {}
        metrics = [m for m, _ in figure_outcomes(info)]
        if not metrics:
            continue
        key = gate_key(info)
        if key is None:
            skipped.append(f"{name}: no 'gated_as' (hardware / model / shape of its gate) recorded: "
                           "re-run it with this harness")
            continue
        for metric in metrics:
            value = info.get(metric)
            if metric not in METRICS or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                skipped.append(f"{name} {metric}: no finite value ({value!r})")
                continue
            k = (*key, metric)
            if k in worst:  # the bound must hold for the worst: a time's largest, a throughput's smallest
                prev, names = worst[k]
                worst[k] = (max(prev, value) if METRICS[metric] == "max" else min(prev, value), [*names, name])
            else:
                worst[k] = (float(value), [name])
    entries = []
    for (hardware, model, shape, metric), (value, names) in sorted(worst.items()):
        kind = METRICS[metric]
        if value <= 0:
            skipped.append(f"{hardware}/{model}/{shape} {metric}: measured {value!r}, a bound that gates nothing")
            continue
        bound = value * (1 + headroom) if kind == "max" else value / (1 + headroom)
        entries.append(Derived(hardware, model, shape, metric, kind, _round(value), _round_away(bound, kind),
                               tuple(names)))
    return Derivation(entries, skipped)


def _manifest(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The run manifest: top-level ``carbon_harness`` over ``machine_info.carbon_harness`` (its identity)."""
    info = data.get("machine_info") or {}
    parts = (info.get("carbon_harness") if isinstance(info, Mapping) else None, data.get("carbon_harness"))
    return {k: v for part in parts if isinstance(part, Mapping) for k, v in part.items()}


def provenance(data: Mapping[str, Any], source: str, headroom: float, sdk: str | None = None,
               note: str | None = None) -> dict[str, Any]:
    """Where the numbers come from, from the run's manifest: versions, hardware, date, the run."""
    manifest = _manifest(data)
    versions = {k: (str(v) if v is not None else None) for k, v in (manifest.get("versions") or {}).items()}
    hardware = manifest.get("hardware")  # the profile (whole manifest), or its name (machine identity)
    name = hardware.get("name") if isinstance(hardware, Mapping) else hardware if isinstance(hardware, str) else None
    cpu = manifest.get("cpu_model")
    instance = (f"{name}" if name else "not recorded") + (f" ({cpu}, {manifest.get('cpu_count')} CPUs)" if cpu else "")
    stamp = str(data.get("datetime") or "")
    try:
        date = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).date().isoformat()
    except ValueError:
        date = datetime.date.today().isoformat()
    nxdi = manifest.get("nxdi") if isinstance(manifest.get("nxdi"), Mapping) else None
    nxdi_text = versions.get("neuronx-distributed-inference") or (
        f"source {nxdi.get('source')}" if nxdi and nxdi.get("source") else "none")
    sha = manifest.get("harness_git_sha")
    run = f"{source}" + (f", harness {sha[:12]}" if isinstance(sha, str) and sha else "") + (
        f", backend {manifest['backend']}" if manifest.get("backend") else "") + (
        f", runs {manifest['runs']}" if manifest.get("runs") else "")
    out = {"sdk": sdk or "not recorded (pass --sdk)", "nxdi": nxdi_text,
           "neuronx_cc": versions.get("neuronx-cc") or "none", "instance": instance, "date": date, "run": run,
           "headroom": f"{100 * headroom:g}%", "versions": {k: v for k, v in versions.items()}}
    if note:
        out["note"] = note
    return out


def thresholds_document(data: Any, source: str, headroom: float, sdk: str | None = None,
                        note: str | None = None) -> tuple[dict[str, Any], Derivation]:
    """The thresholds file for a run (schema, provenance, entries) and what was derived or skipped."""
    derivation = derive(run_benchmarks(data, source), headroom)
    if not derivation.entries:
        raise ValueError(f"{source}: no benchmark recorded a gateable figure with its hardware / model / shape "
                         "(run the benchmarks with this harness: pytest -m perf --benchmark-json FILE)")
    document = {"schema": SCHEMA, "provenance": provenance(data, source, headroom, sdk, note),
                "thresholds": [d.entry(headroom) for d in derivation.entries]}
    return document, derivation


def derivation_warnings(data: Mapping[str, Any], headroom: float, sdk: str | None,
                        spreads: Mapping[str, float]) -> list[str]:
    """What the command says before writing: a headroom below the run-to-run spread measured on the
    run's hardware (``spreads``: fixtures/compare/tolerances.json; the next run of the same code
    likely fails the file), and a Neuron SDK release given for a run that used no NxDI (the provenance
    would pair ``sdk`` 2.29 with ``nxdi`` none)."""
    manifest = _manifest(data)
    hardware = manifest.get("hardware")
    name = hardware.get("name") if isinstance(hardware, Mapping) else hardware if isinstance(hardware, str) else None
    out = []
    spread = spreads.get(name) if name else None
    if spread is not None and headroom < spread:
        out.append(f"warning: --headroom {100 * headroom:g}% is below the run-to-run spread measured on {name!r} "
                   f"hardware, {100 * spread:g}% (fixtures/compare/tolerances.json): the next run of the same code "
                   f"will likely fail this file; give --headroom {100 * spread:g}% or more")
    nxdi = provenance(data, "", headroom)["nxdi"]
    if sdk and nxdi == "none" and not sdk.lower().startswith("none"):
        out.append(f"warning: --sdk {sdk} names a Neuron SDK release, but this run used no NxDI (backend "
                   f"{manifest.get('backend') or 'not recorded'}, hardware {name or 'not recorded'}): the provenance "
                   f"will say sdk {sdk!r} with nxdi 'none'; for a CPU run give --sdk 'none (CPU)'")
    return out


def render(document: Mapping[str, Any]) -> str:
    """The file's text: one entry per line, as the shipped files are, so a diff shows one figure a line."""
    head = {k: v for k, v in document.items() if k != "thresholds"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "thresholds": [']
    entries = [f"    {json.dumps(e)}" for e in document["thresholds"]]
    return "\n".join(lines + [",\n".join(entries), "  ]", "}"]) + "\n"


def gate_run(thresholds: Iterable[Threshold], benchmarks: Iterable[Mapping[str, Any]]) -> list[GateResult]:
    """Every gate the thresholds set on a recorded run, figure by figure (what the plugin would
    have decided for those figures)."""
    thresholds = list(thresholds)
    results = []
    for bench in benchmarks:
        info = bench.get("extra_info") or {}
        key = gate_key(info)
        metrics = {m for m, _ in figure_outcomes(info)}
        if key is None or not metrics:
            continue
        results += evaluate(thresholds, *key, {m: info[m] for m in metrics if m in info})
    return results
