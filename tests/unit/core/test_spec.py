"""Model specs, run shapes, request validation and artifact keys."""

from __future__ import annotations

import pytest

from harness.core.spec import (MODELS, SCORING_SHAPES, SHAPES, RunShape, SpecError, artifact_key, get_model,
                               get_shape)

pytestmark = pytest.mark.unit


def test_reference_shapes():
    assert {n: (s.batch_size, s.max_context_length, s.seq_len, s.max_new_tokens) for n, s in SHAPES.items()} == {
        "report-bs1": (1, 256, 512, 180), "smoke": (1, 32, 160, 128), "a100-style-bs16": (16, 256, 512, 170),
        "dna-suite-bs1": (1, 256, 512, 180), "contract-long": (2, 64, 192, 128),
        # scoring (prefill only): VEP batches and long-context scans
        "vep-bs8": (8, 256, 256, 1), "scan-cpu": (1, 512, 512, 1), "scan-8k": (1, 8192, 8192, 1),
        "scan-32k": (1, 32768, 32768, 1), "scan-64k": (1, 65536, 65536, 1)}
    assert all(s.tp_degree == 4 for s in SHAPES.values())


@pytest.mark.parametrize("name", ["carbon-3b", "Carbon-3B", "CARBON-3B"])
def test_model_names(name):
    assert get_model(name) is MODELS["carbon-3b"]


@pytest.mark.parametrize("lookup,bad,known", [(get_model, "carbon-7b", "carbon-500m, carbon-3b, carbon-8b, carbon-tiny"),
                                              (get_shape, "huge", "report-bs1, smoke, a100-style-bs16, dna-suite-bs1")])
def test_unknown_names_list_the_known_ones(lookup, bad, known):
    with pytest.raises(SpecError, match=f"unknown .* '{bad}'; known .*: {known}"):
        lookup(bad)


@pytest.mark.parametrize("prompt,new,batch,message", [
    (257, 1, 1, "prompt of 257 tokens exceeds shape 'report-bs1' max_context_length=256"),
    (256, 257, 1, "256 new tokens|= 513 exceeds shape 'report-bs1' seq_len=512"),
    (10, 10, 2, "batch of 2 prompts exceeds shape 'report-bs1' batch_size=1"),
])
def test_requests_that_do_not_fit(prompt, new, batch, message):
    with pytest.raises(SpecError, match=message):
        SHAPES["report-bs1"].validate_request(prompt, new, batch)
    SHAPES["report-bs1"].validate_request(181, 180, 1)


@pytest.mark.parametrize("kwargs,message", [({"batch_size": 0}, "batch_size=0"),
                                            ({"max_context_length": 600}, "exceeds seq_len=512")])
def test_impossible_shapes(kwargs, message):
    base = dict(name="x", batch_size=1, max_context_length=256, seq_len=512, max_new_tokens=10)
    with pytest.raises(SpecError, match=message):
        RunShape(**{**base, **kwargs})


def test_artifact_key_is_stable_and_sensitive():
    shape = SHAPES["report-bs1"]
    a = artifact_key("abc", shape, "neuron", {"nxdi": "0.9.0"}, fused_qkv=False)
    assert a.digest == artifact_key("abc", shape, "neuron", {"nxdi": "0.9.0"}, fused_qkv=False).digest
    others = [artifact_key("abd", shape, "neuron", {"nxdi": "0.9.0"}, fused_qkv=False),
              artifact_key("abc", SHAPES["smoke"], "neuron", {"nxdi": "0.9.0"}, fused_qkv=False),
              artifact_key("abc", shape, "neuron", {"nxdi": "0.9.1"}, fused_qkv=False),
              artifact_key("abc", shape, "neuron", {"nxdi": "0.9.0"}, fused_qkv=True)]
    assert len({a.digest} | {o.digest for o in others}) == 5


@pytest.mark.parametrize("name", [n for n in SHAPES if n not in SCORING_SHAPES])
def test_a_generation_shapes_own_prompts_fit_with_its_new_tokens(name):
    """A shape's DNA prompts (``<dna>`` and ``prompt_bp`` / 6 6-mers) and its ``max_new_tokens`` must fit its
    ``seq_len``: the perf batch is built from them (contract-long's first draft asked 130 new tokens after 63 prompt
    tokens of a 192-token sequence, and every perf round refused it)."""
    shape = SHAPES[name]
    tokens = 1 + (shape.prompt_bp or 6 * (shape.max_context_length - 1)) // 6
    shape.validate_request(tokens, shape.max_new_tokens, shape.batch_size)
