"""The reference workloads: the 7-case DNA suite at batch 1 and the 16-prompt batch suite.

Both run at their own compiled shapes (``dna-suite-bs1``, ``a100-style-bs16``), whatever
``--carbon-shape`` says, because the reference numbers they are gated against were taken there.
"""

from __future__ import annotations

import pytest

from harness.analysis.figures import generation_figures
from harness.backends.base import Batch
from harness.carbon.dna import SUITE_CASES, batch_suite, prompt_suite
from harness.carbon.fns import fns_select
from harness.plugin.recording import engine_context, model_spec, timed_results
from harness.plugin.timing import timed_pedantic
from tests.helpers import skip_when_backend_cannot

pytestmark = pytest.mark.perf

DNA_SUITE_SHAPE = "dna-suite-bs1"
BATCH_SUITE_SHAPE = "a100-style-bs16"


def measure_generation(benchmark, session, engine, batch, tokenizer, gate, select=None, decoding="direct"):
    """Time repeated generations of one batch and gate the resulting figures. Only the engine call
    may skip (the backend's BackendCannot, e.g. no logits for FNS); the gate never does."""
    shape = engine.shape
    results = []
    benchmark.extra_info["decoding"] = decoding
    with skip_when_backend_cannot(f"{engine.info.backend} cannot run {decoding} decoding"):
        _, device = timed_pedantic(benchmark, engine,
                                   lambda: results.append(engine.generate(batch, shape.max_new_tokens, select=select)),
                                   setup=engine.reset, rounds=session.config.runs,
                                   warmup_rounds=session.config.warmup)
    timed = timed_results(benchmark, results, session.config.warmup, session.config.runs)
    assert all(r.tokens.shape == (batch.size, shape.max_new_tokens) for r in timed)
    figures = generation_figures(timed, tokenizer, model_spec(engine.info.model), engine.info.dtype,
                                 session.hardware.bandwidth_gbps(shape.tp_degree), batch.max_prompt_tokens)
    figures.update(device.figures("e2e", [r.e2e_ms for r in timed]))
    assert 0.0 <= figures["valid_dna_fraction"] <= 1.0 and figures["tokens_per_s"] > 0
    gate(benchmark, model=engine.info.model, shape=shape.name if decoding == "direct" else f"{shape.name}-{decoding}",
         figures=figures,
         context=engine_context(engine, session.hardware.name, batch, shape.max_new_tokens))
    return figures


@pytest.mark.fixed_shape(DNA_SUITE_SHAPE)
@pytest.mark.parametrize("case", SUITE_CASES)
def test_dna_suite(benchmark, carbon_session, carbon_engine_for, carbon_model_tokenizer, carbon_gate, case):
    engine = carbon_engine_for(DNA_SUITE_SHAPE)
    benchmark.group = f"dna-suite-{engine.info.model}"
    prompt = next(c for c in prompt_suite(engine.shape.prompt_bp) if c.name == case)
    batch = Batch.from_prompts(carbon_model_tokenizer, [prompt.prompt])
    assert batch.max_prompt_tokens == 181  # <dna> + 1080 bp, as in the reference suite
    benchmark.extra_info["case"] = case
    measure_generation(benchmark, carbon_session, engine, batch, carbon_model_tokenizer, carbon_gate)


@pytest.mark.fixed_shape(BATCH_SUITE_SHAPE)
def test_batch_suite(benchmark, carbon_session, carbon_engine_for, carbon_model_tokenizer, carbon_gate):
    engine = carbon_engine_for(BATCH_SUITE_SHAPE)
    benchmark.group = f"batch-suite-{engine.info.model}"
    prompts = [c.prompt for c in batch_suite(engine.shape.prompt_bp, engine.shape.batch_size)]
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    assert (batch.size, batch.max_prompt_tokens) == (16, 171)  # 16 x (<dna> + 1020 bp)
    measure_generation(benchmark, carbon_session, engine, batch, carbon_model_tokenizer, carbon_gate)


@pytest.mark.fixed_shape(BATCH_SUITE_SHAPE)
def test_e2e_fns(benchmark, carbon_session, carbon_engine_for, carbon_model_tokenizer, carbon_gate):
    """bp-level (FNS) greedy decoding of the batch suite: each 6-mer assembled from the per-position
    argmax base. Grouped with test_batch_suite so its bp_per_s sits next to direct 6-mer decoding
    (A100 reference: Carbon-3B 18.9 kbp/s direct, 12.3 kbp/s FNS)."""
    engine = carbon_engine_for(BATCH_SUITE_SHAPE)
    benchmark.group = f"batch-suite-{engine.info.model}"
    prompts = [c.prompt for c in batch_suite(engine.shape.prompt_bp, engine.shape.batch_size)]
    batch = Batch.from_prompts(carbon_model_tokenizer, prompts)
    figures = measure_generation(benchmark, carbon_session, engine, batch, carbon_model_tokenizer, carbon_gate,
                                 select=fns_select, decoding="fns")
    assert figures["valid_dna_fraction"] == 1.0  # every FNS token is a 6-mer
    assert figures["generated_bp"] == 6 * batch.size * engine.shape.max_new_tokens
