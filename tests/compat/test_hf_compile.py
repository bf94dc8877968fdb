"""``--carbon-hf-compile`` (issue 40, item 3): the compiled engine (static KV cache, ``torch.compile``d
decode step; CUDA graphs on a GPU, inductor's C++ kernels on this CPU) generates what the eager engine
generates, which stays the reference; its compile time is recorded; what it cannot do it refuses in
one line. On a CPU this compiles carbon-tiny once, at batch 2 (~15 s here at load average 10 with
inductor's cache warm; more cold), so those tests are marked slow."""

from __future__ import annotations

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.hf_compiled import CompiledHFEngine, compile_unavailable_reason
from harness.carbon.dna import shape_prompts
from harness.core.errors import BackendCannot
from harness.core.spec import SHAPES, RunShape
from harness.session.config import make_config
from harness.workloads.repeatability import repeatability_problems
from tests.helpers import near_tie, plugin_options

pytestmark = pytest.mark.compat

SMOKE = SHAPES["smoke"]
SHAPE = RunShape("compile-bs2", batch_size=2, max_context_length=64, seq_len=96, max_new_tokens=24)


@pytest.fixture(scope="module")
def compiled(carbon_session, carbon_tiny_checkpoint, carbon_engine_pool):
    """The compiled engine on this CPU, carbon-tiny in fp32 (one compile per shape, kept for the session)."""

    def get(shape: RunShape) -> CompiledHFEngine:
        return carbon_engine_pool.get(("tiny-hf-compiled", shape), lambda: CompiledHFEngine(
            carbon_tiny_checkpoint, shape, "carbon-tiny", device="cpu", dtype="fp32"))

    return get


@pytest.fixture(scope="module")
def rows(carbon_tokenizer) -> Batch:
    """The smoke shape's prompt and a shorter one: rows of unequal length in one static cache (the mask
    buffer marks each row's real slots)."""
    batch = Batch.from_prompts(carbon_tokenizer, [*shape_prompts(SMOKE), "Carbon <dna>ACGTACGTAAAC"])
    assert len(set(batch.prompt_lengths.tolist())) == 2
    return batch


@pytest.mark.slow
def test_compiled_greedy_tokens_are_the_eager_engines(compiled, tiny_hf_engine, rows):
    engine = compiled(SHAPE)
    assert engine.info.compile_s is not None and engine.info.compile_s > 0
    assert engine.info.extra["compile"] == {"mode": "default", "cuda_graphs": False, "cache": "static",
                                            "compiled": "decode step"}
    eager = tiny_hf_engine(SHAPE)
    want = eager.generate(rows, SHAPE.max_new_tokens).tokens
    got = engine.generate(rows, SHAPE.max_new_tokens).tokens
    assert repeatability_problems(eager, rows, [want, got], near_tie("fp32")) == []
    assert len(set(want[0].tolist())) > 4  # the synthetic model is not degenerate: the check compared something


@pytest.mark.slow
def test_teacher_forced_logits_match_eager(compiled, tiny_hf_engine, rows):
    """What the output contract reads, within fp32 rounding of the eager engine's."""
    engine, eager = compiled(SHAPE), tiny_hf_engine(SHAPE)
    forced = eager.generate(rows, 6).tokens
    torch.testing.assert_close(engine.continuation_logits(rows, forced), eager.continuation_logits(rows, forced),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_draft_verification_is_refused_in_one_line(compiled):
    with pytest.raises(BackendCannot, match="run on the eager engine"):
        compiled(SHAPE).extend_logits(torch.zeros(1, 2, dtype=torch.long))


def test_a_cpu_without_a_cxx_compiler_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = compile_unavailable_reason(torch.device("cpu"))
    assert reason is not None and "\n" not in reason and "needs a C++ compiler" in reason
    with pytest.raises(ValueError, match="needs a C\\+\\+ compiler"):
        make_config(plugin_options(hf_compile=True, device="cpu"), tmp_path)


def test_only_the_transformers_backend_compiles(tmp_path):
    with pytest.raises(ValueError, match="--carbon-hf-compile compiles the transformers backend: it needs "
                                         "--carbon-backend hf \\(the backend is 'neuron'\\)"):
        make_config(plugin_options(hf_compile=True, backend="neuron"), tmp_path)
