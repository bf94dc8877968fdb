"""CTE, TKG and end-to-end latency of each model x shape, the way the reference runs measured them.

Each benchmark's extra_info carries the run context and the figures; thresholds come from
fixtures/thresholds (``--carbon-thresholds``), never from literals here.
"""

from __future__ import annotations

import math

import pytest

from harness.analysis.figures import generation_figures, latency_figures, roofline
from harness.backends.base import Batch
from harness.carbon.dna import shape_prompts
from harness.plugin.decode_rounds import DecodeRounds
from harness.plugin.recording import (engine_context, model_spec, record_server_work, record_work, round_ms,
                                      timed_results)
from harness.plugin.timing import timed_pedantic
from harness.workloads.repeatability import near_tie, repeatability_problems

pytestmark = pytest.mark.perf


@pytest.fixture
def shape_batch(carbon_model_tokenizer, carbon_shape) -> Batch:
    batch = Batch.from_prompts(carbon_model_tokenizer, shape_prompts(carbon_shape))
    carbon_shape.validate_request(batch.max_prompt_tokens, carbon_shape.max_new_tokens, batch.size)
    return batch


def test_cte(benchmark, carbon_session, carbon_engine, shape_batch, carbon_gate):
    """Context encoding: prefill of the shape's prompts (the KV cache is reset before each round)."""
    benchmark.group = f"cte-{carbon_engine.info.shape}"
    first, device = timed_pedantic(benchmark, carbon_engine, carbon_engine.prefill, args=(shape_batch,),
                                   setup=carbon_engine.reset, rounds=carbon_session.config.runs,
                                   warmup_rounds=carbon_session.config.warmup, busy=True)
    assert first.shape == (shape_batch.size,)
    assert all(0 <= int(t) < 155776 for t in first)
    wall = round_ms(benchmark)
    figures = {**latency_figures("cte", wall), **device.figures("cte", wall)}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    record_work(benchmark, lambda: carbon_engine.prefill(shape_batch), carbon_session.config.work_counts,
                setup=carbon_engine.reset)
    carbon_gate(benchmark, model=carbon_engine.info.model, shape=carbon_engine.info.shape, figures=figures,
                context=engine_context(carbon_engine, carbon_session.hardware.name, shape_batch, 0))


def test_tkg(benchmark, carbon_session, carbon_engine, shape_batch, carbon_gate):
    """Token generation: single decode steps on a warm cache. Once a generation of this shape
    would have ended (max_new_tokens - 1 decode steps), the next round re-prefills first, untimed
    and waited on (``timed_pedantic``), so every timed step is one the shape really makes and none
    carries the prefill's device work. Every position the rounds take is taken once before, untimed
    (``DecodeRounds.warm``): an eager engine's first step at a new KV length is not a warm step."""
    benchmark.group = f"tkg-{carbon_engine.info.shape}"
    shape = carbon_engine.shape
    steps_per_generation = shape.max_new_tokens - 1
    rounds = min(carbon_session.config.runs * 8, steps_per_generation)
    warmup = carbon_session.config.warmup
    schedule = DecodeRounds(carbon_engine, shape_batch, steps_per_generation)
    warmed = schedule.warm(warmup + rounds)

    token, device = timed_pedantic(benchmark, carbon_engine, carbon_engine.decode_step, setup=schedule.ready,
                                   rounds=rounds, warmup_rounds=warmup, busy=True)
    taken = schedule.positions[:len(warmed)]  # (busy: one more, profiled call follows the rounds)
    assert taken == warmed[:len(taken)], f"the rounds took positions {taken}, the warm pass {warmed}"
    benchmark.extra_info["tkg_positions_warmed"] = len(warmed)
    assert token.shape == (shape_batch.size,) and all(0 <= int(t) < 155776 for t in token)
    wall = round_ms(benchmark)
    figures = {**latency_figures("tkg", wall), **device.figures("tkg", wall)}
    context_tokens = shape_batch.max_prompt_tokens + rounds / 2
    figures.update(roofline(model_spec(carbon_engine.info.model), shape_batch.size, context_tokens,
                            carbon_engine.info.dtype, carbon_session.hardware.bandwidth_gbps(shape.tp_degree),
                            figures["tkg_ms_p50"]))
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    record_work(benchmark, carbon_engine.decode_step, carbon_session.config.work_counts, setup=schedule.ready)
    carbon_gate(benchmark, model=carbon_engine.info.model, shape=shape.name, figures=figures,
                context=engine_context(carbon_engine, carbon_session.hardware.name, shape_batch, 1))


def test_e2e(benchmark, carbon_session, carbon_generator, shape_batch, carbon_model_tokenizer, carbon_gate):
    """End to end: exactly max_new_tokens greedy tokens per row, EOS disabled. On every backend, a
    server included (the batch's rows go as concurrent requests, read as a client reads them): its
    serving figures (TTFT, TPOT, E2EL) are what a release check compares across stacks."""
    carbon_engine = carbon_generator
    shape = carbon_engine.shape
    benchmark.group = f"e2e-{shape.name}"
    results = []

    def run():
        results.append(carbon_engine.generate(shape_batch, shape.max_new_tokens))

    _, device = timed_pedantic(benchmark, carbon_engine, run, setup=carbon_engine.reset,
                               rounds=carbon_session.config.runs, warmup_rounds=carbon_session.config.warmup)
    timed = timed_results(benchmark, results, carbon_session.config.warmup, carbon_session.config.runs)
    assert all(r.tokens.shape == (shape_batch.size, shape.max_new_tokens) for r in timed)
    steps = shape.max_new_tokens - 1
    if carbon_engine.info.backend == "openai":  # each row's gaps between streamed chunks (a chunk may hold more)
        assert all(0 < len(r.tkg_ms) <= shape_batch.size * steps for r in timed)
    else:
        assert all(len(r.tkg_ms) == steps for r in timed)
    problems = repeatability_problems(carbon_engine, shape_batch, [r.tokens for r in timed],
                                      near_tie(carbon_engine.info.dtype))
    assert not problems, "greedy generation must be repeatable up to a measured near-tie: " + "; ".join(problems)
    figures = generation_figures(timed, carbon_model_tokenizer, model_spec(carbon_engine.info.model),
                                 carbon_engine.info.dtype, carbon_session.hardware.bandwidth_gbps(shape.tp_degree),
                                 shape_batch.max_prompt_tokens)
    figures.update(device.figures("e2e", [r.e2e_ms for r in timed]))
    assert figures["e2e_ms_p50"] > 0 and figures["tokens_per_s"] > 0
    if carbon_engine.info.backend == "openai":  # its engine's work is its server's: the server's own counters
        record_server_work(benchmark, carbon_engine, lambda: carbon_engine.generate(shape_batch, shape.max_new_tokens),
                           carbon_session.config.work_counts, shape_batch.size)
    carbon_gate(benchmark, model=carbon_engine.info.model, shape=shape.name, figures=figures,
                context=engine_context(carbon_engine, carbon_session.hardware.name, shape_batch,
                                       shape.max_new_tokens))
