"""Speculative decoding of each configured model with each draft (``--carbon-draft``; default: the
embedded ``carbon-tiny-draft``, acceptance ~0, and the target itself, acceptance 1.0), on the seeds'
four T4 configurations and the DNA suite, against the target alone on the same prompts in the same
session. Every run is also checked token for token against the target alone (lossless).

On a CPU the new-token counts are CPU-sized (``SpeculativeCase.cpu_new_tokens``): an unrelated draft makes
every token cost k draft steps, and the reference lengths would take minutes there."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from harness.backends.base import Batch
from harness.carbon.dna import dna_figures, speculative_prompts
from harness.core.measure import Summary, throughput
from harness.core.speculation import DNA_SUITE_CASE, SELF_DRAFT, SpeculativeCase, gate_shape, speculative_shape
from harness.plugin.recording import engine_context, timed_results
from harness.plugin.timing import timed_pedantic
from harness.session.config import ModelRef
from harness.session.engines import Session
from harness.workloads.speculative import (
    T4_CASES,
    assisted_generate,
    combine_results,
    compare_ends,
    loop_unavailable_reason,
    speculative_figures,
    speculative_generate,
)

pytestmark = [pytest.mark.perf, pytest.mark.fixed_shape(speculative_shape().name)]

CASES = (*T4_CASES, DNA_SUITE_CASE)
ENDS_MIN_ROUNDS = 5  # the fastest of fewer rounds is too often a busy one on a shared CPU


@dataclass
class SpeculativeBench:
    """Per session: the engines, batches and rounds of the speculative benchmarks."""

    session: Session

    def engines(self, target: ModelRef, draft: ModelRef):
        cfg = self.session.config
        reason = loop_unavailable_reason(cfg.backend, cfg.neuron_cpu, cfg.hf_compile)
        if reason:
            pytest.skip(reason)
        shape = speculative_shape()
        return self.session.engine(target, shape), self.session.draft_engine(draft, target, shape)

    def new_tokens(self, case: SpeculativeCase) -> int:
        return case.tokens_for(self.session.hardware.kind)

    def batches(self, target: ModelRef, case: SpeculativeCase) -> list[Batch]:
        tokenizer = self.session.tokenizer(target)
        return [Batch.from_prompts(tokenizer, [p]) for p in speculative_prompts(case)]

    def rounds(self) -> tuple[int, int]:
        """(timed, warm-up) rounds: the session's, at most 3 and 1 on a CPU (CPU-sized, like the lengths)."""
        cfg = self.session.config
        if self.session.hardware.kind == "cpu":
            return min(cfg.runs, 3), min(cfg.warmup, 1)
        return cfg.runs, cfg.warmup

    def target_alone(self, target: ModelRef, case: SpeculativeCase):
        """One generation of every prompt by the target alone (the harness's greedy loop): the
        combined tokens and e2e ms."""
        engine = self.session.engine(target, speculative_shape())
        results = [engine.generate(b, self.new_tokens(case)) for b in self.batches(target, case)]
        return torch.cat([r.tokens for r in results]), sum(r.e2e_ms for r in results)

    def run(self, target: ModelRef, draft: ModelRef, case: SpeculativeCase):
        target_engine, draft_engine = self.engines(target, draft)
        batches, n, k = self.batches(target, case), self.new_tokens(case), self.session.config.speculation_length
        return combine_results([speculative_generate(target_engine, draft_engine, b, n, k) for b in batches])

    def measure(self, target: ModelRef, draft: ModelRef, case: SpeculativeCase, results, alone) -> dict:
        """Check the runs against the target alone (``alone``: its (tokens, e2e ms) per round,
        interleaved with the speculative rounds so both see the same machine) and return the figures."""
        for r in results:
            assert r.tokens.equal(alone[0][0]), f"speculative output with draft {draft.label} differs from the target's"
        figures = speculative_figures(results, [ms for _, ms in alone])
        figures.update(dna_figures(self.session.tokenizer(target), results[0].tokens, figures["e2e_ms_p50"]))
        return figures


@pytest.fixture(scope="session")
def speculative_bench(carbon_session) -> SpeculativeBench:
    return SpeculativeBench(carbon_session)


def speculative_context(bench: SpeculativeBench, target_engine, draft: ModelRef, case: SpeculativeCase, batch: Batch, decoding: str):
    n = bench.new_tokens(case)
    context = engine_context(target_engine, bench.session.hardware.name, batch, n)
    context.update({"draft": draft.label, "speculation_length": bench.session.config.speculation_length,
                    "case": case.name, "prompt_bp": case.prompt_bp, "prompts": len(speculative_prompts(case)),
                    "reference_new_tokens": case.new_tokens, "cpu_sized": n != case.new_tokens,
                    "decoding": decoding})
    return context


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_speculative(benchmark, speculative_bench, carbon_model, carbon_draft, case, carbon_gate):
    """The harness's draft-then-verify loop: acceptance, tokens per step, draft/verify ms per step,
    tokens/s, bp/s and the speedup over the target alone."""
    target_engine, _ = speculative_bench.engines(carbon_model, carbon_draft)
    benchmark.group = f"speculative-{case.name}"
    runs, warmup = speculative_bench.rounds()
    results, alone = [], []
    timed_pedantic(benchmark, target_engine, lambda: results.append(speculative_bench.run(carbon_model, carbon_draft, case)),
                   rounds=runs, warmup_rounds=warmup,
                   setup=lambda: alone.append(speculative_bench.target_alone(carbon_model, case)))
    timed = timed_results(benchmark, results, warmup, runs)
    figures = speculative_bench.measure(carbon_model, carbon_draft, case, timed, timed_results(benchmark, alone, warmup, runs))
    assert 0.0 <= figures["spec_acceptance_rate"] <= 1.0
    assert 1.0 <= figures["spec_tokens_per_step"] <= speculative_bench.session.config.speculation_length + 1
    benchmark.extra_info["rounds"] = runs
    batch = speculative_bench.batches(carbon_model, case)[0]
    carbon_gate(benchmark, model=carbon_model.label, shape=gate_shape(carbon_draft.label), figures=figures,
                context=speculative_context(speculative_bench, target_engine, carbon_draft, case, batch, "speculative"))


def test_speedup_grows_with_acceptance(benchmark, speculative_bench, carbon_model, carbon_gate):
    """The two ends of the embedded default: self-drafting (acceptance 1.0) must beat an unrelated
    draft (acceptance ~0). The target alone and both drafts take turns in the same rounds
    (``compare_ends``: fastest round each, CPU time on a CPU), so a busy neighbour cannot flip the
    order; the ratio of the two speedups is gated (``spec_speedup_gain``, a speed: only under ``-m perf``),
    its bound is data. The benchmark's own time is the whole comparison."""
    drafts = speculative_bench.session.config.drafts
    own = next((d for d in drafts if d.label == SELF_DRAFT), None)
    other = next((d for d in drafts if d.label != SELF_DRAFT), None)
    if own is None or other is None:
        pytest.skip("needs --carbon-draft self and another draft (the default pair: self and carbon-tiny-draft)")
    case = T4_CASES[0]
    target_engine, own_engine = speculative_bench.engines(carbon_model, own)
    _, other_engine = speculative_bench.engines(carbon_model, other)
    batch = speculative_bench.batches(carbon_model, case)[0]
    n, k = speculative_bench.new_tokens(case), speculative_bench.session.config.speculation_length
    rounds = max(speculative_bench.session.config.runs, ENDS_MIN_ROUNDS)
    compared = []
    benchmark.group = "speculative-ends"
    benchmark.pedantic(lambda: compared.append(compare_ends(target_engine, own_engine, other_engine, batch, n, k,
                                                            rounds)), rounds=1)
    ends = compared[-1]
    assert ends.lossless, f"speculative output with draft self or {other.label} differs from the target alone"
    assert ends.high.acceptance_rate == 1.0
    benchmark.extra_info.update({"clock": ends.clock, "rounds": ends.rounds, "fastest_s": {
        "target": ends.alone_s, SELF_DRAFT: ends.high_s, other.label: ends.low_s}})
    carbon_gate(benchmark, model=carbon_model.label, shape="speculative-ends", rounds=ends.rounds,
                figures=ends.figures(SELF_DRAFT, other.label),
                context=speculative_context(speculative_bench, target_engine, other, case, batch, "speculative"))


def test_assisted_decoding(benchmark, speculative_bench, carbon_model, carbon_draft, carbon_gate):
    """transformers' own ``generate(assistant_model=draft)`` at batch 1 (all it supports), against the
    same ``generate`` without a draft: the seeds' T4 measurement (0.87-0.90x), on this machine."""
    case = T4_CASES[0]
    target_engine, draft_engine = speculative_bench.engines(carbon_model, carbon_draft)
    benchmark.group = f"assisted-{case.name}"
    n, k = speculative_bench.new_tokens(case), speculative_bench.session.config.speculation_length
    runs, warmup = speculative_bench.rounds()
    batch = speculative_bench.batches(carbon_model, case)[0]
    results, alone = [], []
    timed_pedantic(benchmark, target_engine, lambda: results.append(assisted_generate(target_engine, draft_engine, batch,
                                                                                     n, k)),
                   rounds=runs, warmup_rounds=warmup,
                   setup=lambda: alone.append(assisted_generate(target_engine, None, batch, n, k)))
    timed, alone = timed_results(benchmark, results, warmup, runs), timed_results(benchmark, alone, warmup, runs)
    expected = speculative_bench.target_alone(carbon_model, case)[0]
    assert all(r.tokens.equal(expected) for r in [*alone, *timed]), "assisted decoding differs from the target alone"
    e2e, base = Summary.of([r.e2e_ms for r in timed]).p50, Summary.of([r.e2e_ms for r in alone]).p50
    figures = {"e2e_ms_p50": e2e, "target_e2e_ms_p50": base, "spec_speedup": base / e2e,
               "tokens_per_s": throughput(n, e2e), "target_tokens_per_s": throughput(n, base)}
    figures.update(dna_figures(speculative_bench.session.tokenizer(carbon_model), timed[0].tokens, e2e))
    benchmark.extra_info["rounds"] = runs
    carbon_gate(benchmark, model=carbon_model.label, shape=f"assisted-{carbon_draft.label}", figures=figures,
                context=speculative_context(speculative_bench, target_engine, carbon_draft, case, batch, "hf-assisted"))
