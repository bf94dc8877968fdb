"""Scoring workloads, timed: variant-effect scoring of the shipped synthetic set, a saturation
sweep (the throughput case) and a long-context likelihood scan, each at its own compiled shape, on
every backend (openai: a server's prompt logprobs, the rows of a batch sent as concurrent requests).

Prefill only (logits at every position, no decode). Figures: variants/s, scored kbp/s, CTE p50/p99
per batch and $ per million variants where the hardware profile has a price; thresholds come from
fixtures/thresholds like every other figure.
"""

from __future__ import annotations

import math

import pytest

from harness.backends.base import Batch
from harness.carbon.variants import saturation_variants, synthetic_window
from harness.core.spec import get_shape
from harness.plugin.recording import engine_context, round_ms, timed_results
from harness.plugin.timing import timed_pedantic
from harness.workloads.scoring import (
    check_shape_fits_checkpoint,
    scan_window,
    score_variants,
    scoring_figures,
)
from tests.helpers import skip_when_backend_cannot

pytestmark = pytest.mark.perf

VEP_SHAPE = "vep-bs8"
SCAN_SHAPE = "scan-cpu"
SWEEP_BP = 5  # saturation of the scoring_window's first 5 bp: 15 variants + the reference = 16 rows, 2 batches of 8


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """test_scan runs at each scan shape given to --carbon-shape (scan-8k, scan-32k...), else scan-cpu."""
    if "scan_shape" in metafunc.fixturenames:
        given = [s for s in metafunc.config.getoption("carbon_shapes") or [] if s.startswith("scan-")]
        metafunc.parametrize("scan_shape", given or [SCAN_SHAPE])


@pytest.fixture
def scoring_engine(carbon_session, carbon_model, carbon_engine_for):
    """The engine of a scoring shape, after checking the shape fits the checkpoint's positions
    (so a too-long context fails before anything is compiled or served)."""

    def get(shape: str):
        check_shape_fits_checkpoint(carbon_session.checkpoint(carbon_model), get_shape(shape))
        return carbon_engine_for(shape)

    return get


def measure(benchmark, session, engine, run):
    """Time ``run`` over the session's rounds, the engine's device waited on; the timed rounds' results
    (all when disabled)."""
    results = []
    with skip_when_backend_cannot(f"{session.config.backend} cannot return logits at every position"):
        timed_pedantic(benchmark, engine, lambda: results.append(run()), rounds=session.config.runs,
                       warmup_rounds=session.config.warmup)
    return timed_results(benchmark, results, session.config.warmup, session.config.runs)


def gate_scoring(benchmark, session, engine, gate, workload, label, timed, variants):
    """Figures of the timed rounds (CTE per batch pooled over them), recorded and gated."""
    first = timed[0]
    figures = scoring_figures(variants, first.scored_bp, round_ms(benchmark), [ms for r in timed for ms in r.batch_ms],
                              session.hardware.price_per_hour)
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    rows = Batch.from_ids([[0] * (1 + first.window_bp // 6)] * first.batch_size)
    context = engine_context(engine, session.hardware.name, rows, 0)
    context.update(workload=workload, variants=variants, window_bp=first.window_bp)
    if engine.info.backend == "openai":  # each row of a call is one request: the batch is the concurrency
        context.update(max_concurrency=first.batch_size, scoring=engine.info.extra["scoring"])
    gate(benchmark, model=engine.info.model, shape=label, figures=figures, context=context)


@pytest.mark.fixed_shape(VEP_SHAPE)
def test_vep(benchmark, carbon_session, scoring_engine, carbon_model_tokenizer, carbon_gate, scoring_window,
             scoring_variants):
    """Variant-effect scoring of fixtures/scoring: the reference and one row per variant, in
    right-padded batches of the shape's batch size."""
    engine = scoring_engine(VEP_SHAPE)
    benchmark.group = f"scoring-{engine.info.model}"
    timed = measure(benchmark, carbon_session, engine,
                    lambda: score_variants(engine, carbon_model_tokenizer, scoring_window, scoring_variants))
    first = timed[0]
    assert [s.variant.id for s in first.scores] == [v.id for v in scoring_variants]
    assert all(math.isfinite(s.site_score) and math.isfinite(s.window_score) for s in first.scores)
    assert all(r.scores == first.scores for r in timed), "scoring must be deterministic"
    assert len(first.batch_ms) == math.ceil((len(scoring_variants) + 1) / engine.shape.batch_size)
    gate_scoring(benchmark, carbon_session, engine, carbon_gate, "vep", engine.info.shape, timed,
                 len(scoring_variants))


@pytest.mark.fixed_shape(VEP_SHAPE)
def test_sweep(benchmark, carbon_session, scoring_engine, carbon_model_tokenizer, carbon_gate, scoring_window):
    """Saturation mutagenesis (3 alts per position): the throughput case of scoring."""
    engine = scoring_engine(VEP_SHAPE)
    benchmark.group = f"scoring-{engine.info.model}"
    sweep = saturation_variants(scoring_window, scoring_window.start, scoring_window.start + SWEEP_BP - 1)
    assert len(sweep) == 3 * SWEEP_BP
    timed = measure(benchmark, carbon_session, engine,
                    lambda: score_variants(engine, carbon_model_tokenizer, scoring_window, sweep))
    first = timed[0]
    # at each position the three alts share the reference's context: their site scores differ
    # only by the alt base's own probability, which sums with the ref's to at most 1
    for i in range(0, len(sweep), 3):
        trio = first.scores[i:i + 3]
        total = math.exp(trio[0].ref_log_prob) + sum(math.exp(s.alt_log_prob) for s in trio)
        assert total == pytest.approx(1.0, rel=1e-4)
    gate_scoring(benchmark, carbon_session, engine, carbon_gate, "sweep", f"{engine.info.shape}-sweep", timed,
                 len(sweep))


def test_scan(benchmark, carbon_session, scoring_engine, carbon_model_tokenizer, carbon_gate, scan_shape):
    """A long-context likelihood scan at the shape's full context (scan-cpu by default; the 8k/32k/64k
    scans with --carbon-shape scan-8k..., on a backend with logits at every position; check them first
    with carbon-harness plan)."""
    engine = scoring_engine(scan_shape)
    benchmark.group = f"scoring-{engine.info.model}"
    scan = synthetic_window(bp=engine.shape.prompt_bp, chrom="scan")
    timed = measure(benchmark, carbon_session, engine, lambda: scan_window(engine, carbon_model_tokenizer, scan))
    first = timed[0]
    assert first.log_probs.shape == (scan.scored_bp,) and (first.log_probs <= 0).all()
    assert all(math.isclose(r.log_likelihood, first.log_likelihood, rel_tol=1e-6) for r in timed)
    figures = scoring_figures(1, scan.scored_bp, round_ms(benchmark), [r.cte_ms for r in timed],
                              carbon_session.hardware.price_per_hour)
    figures = {k: v for k, v in figures.items() if k not in ("variants_per_s", "usd_per_million_variants")}
    row = Batch.from_ids([[0] * (1 + scan.scored_bp // 6)])
    context = engine_context(engine, carbon_session.hardware.name, row, 0)
    context.update(workload="scan", window_bp=scan.scored_bp)
    carbon_gate(benchmark, model=engine.info.model, shape=engine.info.shape, figures=figures, context=context)
