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
from harness.workloads.repeatability import max_abs, near_tie, repeatability_problems
from tests.helpers import plugin_options

pytestmark = pytest.mark.compat

SMOKE = SHAPES["smoke"]
SHAPE = RunShape("compile-bs2", batch_size=2, max_context_length=64, seq_len=96, max_new_tokens=24)


@pytest.fixture(scope="module")
def engines(carbon_session, carbon_tiny_checkpoint, carbon_engine_pool):
    """(compiled, eager) carbon-tiny engines on the session's device and dtype (this CPU: fp32; a GPU:
    bf16 and CUDA graphs), each built once per shape and kept for the session."""
    from harness.backends.hf import HFEngine

    cfg = carbon_session.config

    def get(shape: RunShape) -> tuple[CompiledHFEngine, HFEngine]:
        compiled = carbon_engine_pool.get(("tiny-hf-compiled", shape, cfg.device, cfg.dtype), lambda: CompiledHFEngine(
            carbon_tiny_checkpoint, shape, "carbon-tiny", device=cfg.device, dtype=cfg.dtype))
        eager = carbon_engine_pool.get(("tiny-hf-eager", shape, cfg.device, cfg.dtype), lambda: HFEngine(
            carbon_tiny_checkpoint, shape, "carbon-tiny", device=cfg.device, dtype=cfg.dtype))
        return compiled, eager

    return get


@pytest.fixture(scope="module")
def rows(carbon_tokenizer) -> Batch:
    """The smoke shape's prompt and a shorter one: rows of unequal length in one static cache (the mask
    buffer marks each row's real slots)."""
    batch = Batch.from_prompts(carbon_tokenizer, [*shape_prompts(SMOKE), "Carbon <dna>ACGTACGTAAAC"])
    assert len(set(batch.prompt_lengths.tolist())) == 2
    return batch


@pytest.mark.slow
def test_compiled_greedy_tokens_are_the_eager_engines(engines, rows):
    engine, eager = engines(SHAPE)
    graphs = engine.device.type == "cuda"
    assert engine.info.compile_s is not None and engine.info.compile_s > 0
    assert engine.info.extra["compile"] == {"mode": "reduce-overhead" if graphs else "default", "cuda_graphs": graphs,
                                            "cache": "static", "compiled": "decode step"}
    want = eager.generate(rows, SHAPE.max_new_tokens).tokens
    got = engine.generate(rows, SHAPE.max_new_tokens).tokens
    assert repeatability_problems(eager, rows, [want, got], near_tie(eager.info.dtype)) == []
    assert len(set(want[0].tolist())) > 4  # the synthetic model is not degenerate: the check compared something


@pytest.mark.slow
def test_teacher_forced_log_probabilities_match_eager(engines, rows):
    """What the output contract reads, within the dtype's repeatability bound (fp32 here: 0.001 nats;
    fixtures/repeatability/bounds.json)."""
    engine, eager = engines(SHAPE)
    forced = eager.generate(rows, 6).tokens
    got = torch.log_softmax(engine.continuation_logits(rows, forced).double(), dim=-1)
    want = torch.log_softmax(eager.continuation_logits(rows, forced).double(), dim=-1)
    picked = forced.reshape(-1, 1)
    worst = float((got.gather(1, picked) - want.gather(1, picked)).abs().max())
    assert worst <= max_abs(eager.info.dtype), worst


@pytest.mark.slow
def test_draft_verification_is_refused_in_one_line(engines):
    with pytest.raises(BackendCannot, match="run on the eager engine"):
        engines(SHAPE)[0].extend_logits(torch.zeros(1, 2, dtype=torch.long))


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
