"""Serving benchmarks: the named workloads sent to the session's server like ``vllm bench serve``,
recorded with pytest-benchmark under vLLM's metric names (plus bp/s, valid-DNA fraction, cost).

Cases come from --carbon-workload / --carbon-max-concurrency / --carbon-request-rate /
--carbon-burstiness (a comma list is a sweep); without them, the CPU-sized defaults below.
"""

from __future__ import annotations

import math

import pytest

from harness.core.metrics import SERVING_FIGURES
from harness.core.options import parse_slos, parse_sweep
from harness.plugin.recording import timed_results
from harness.serving.loadgen import LoadSpec, get_workload, run_load
from harness.serving.metrics import failure_summary, serving_dna_figures

pytestmark = [pytest.mark.perf, pytest.mark.serving]

# (workload, max_concurrency or None for the workload's own, request_rate, burstiness)
DEFAULT_CASES = [("dna-suite", None, math.inf, 1.0), ("batch-suite", None, math.inf, 1.0),
                 ("a10-smoke", 1, math.inf, 1.0), ("a10-smoke", 4, math.inf, 1.0),
                 ("a10-smoke", 4, 8.0, 0.5)]


def serving_cases(config: pytest.Config) -> list[tuple[str, int | None, float, float]]:
    workloads = config.getoption("carbon_workloads")
    conc, rate = config.getoption("carbon_max_concurrency"), config.getoption("carbon_request_rate")
    if not (workloads or conc or rate):
        return DEFAULT_CASES
    try:
        concs = [int(c) for c in parse_sweep(conc)] if conc else [None]
        rates = parse_sweep(rate) if rate else [math.inf]
    except ValueError as exc:
        raise pytest.UsageError(f"carbon-harness: {exc}") from None
    burst = config.getoption("carbon_burstiness")
    return [(w, c, r, burst) for w in (workloads or ["dna-suite", "batch-suite", "a10-smoke"])
            for c in concs for r in rates]


def case_id(case) -> str:
    w, c, r, b = case
    return f"{w}-c{c or 'w'}" + ("" if math.isinf(r) else f"-rate{r:g}-b{b:g}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "serving_case" in metafunc.fixturenames:
        cases = serving_cases(metafunc.config)
        metafunc.parametrize("serving_case", cases, ids=[case_id(c) for c in cases])


def test_serving(benchmark, pytestconfig, carbon_session, carbon_endpoint, carbon_gate, serving_case):
    name, concurrency, rate, burstiness = serving_case
    ref = carbon_session.config.models[0]
    tokenizer = carbon_session.tokenizer(ref)
    try:
        workload = get_workload(name, tokenizer)
        spec = LoadSpec(max_concurrency=concurrency or workload.max_concurrency, request_rate=rate,
                        burstiness=burstiness)
        slos = parse_slos(pytestconfig.getoption("carbon_goodput")) if pytestconfig.getoption("carbon_goodput") else None
    except ValueError as exc:
        raise pytest.UsageError(f"carbon-harness: {exc}") from None
    benchmark.group = f"serving-{name}"
    runs = []
    benchmark.pedantic(lambda: runs.append(run_load(carbon_endpoint, workload, spec, carbon_session.progress)),
                       rounds=1, warmup_rounds=0)
    run = timed_results(benchmark, runs, 0, 1)[0]
    figures = run.metrics(slos)
    assert figures["failed"] == 0, f"{figures['failed']} of {len(run.results)} requests failed: {failure_summary(run.results)}"
    assert all(len(r.output_ids) == r.expected_tokens for r in run.results)
    assert set(SERVING_FIGURES) <= set(figures)
    figures.update(serving_dna_figures(tokenizer, run.results, run.duration_s, carbon_session.hardware.price_per_hour))
    assert 0.0 <= figures["valid_dna_fraction"] <= 1.0
    context = {"backend": "openai", "endpoint": carbon_endpoint.url, "served_model": carbon_endpoint.model,
               "server": "vllm (started by the session)" if carbon_session.server else "external", **run.context()}
    if slos:
        context["goodput_slos"] = slos
    carbon_gate(benchmark, model=ref.label, shape=f"serving-{name}", figures=figures, context=context)
