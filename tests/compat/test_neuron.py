"""Neuron-only contracts, run with ``--carbon-backend neuron`` on a Trn2 host: the compiled model
matches the transformers fp32 CPU reference of the same checkpoint, and NxDI's GQA decision
(from its compile log) matches the plan. Skipped elsewhere with the reason."""

from __future__ import annotations

import pytest

from harness.accuracy import check_accuracy
from harness.backends.base import Batch
from harness.backends.hf import HFEngine
from harness.dna import prompt_suite
from harness.golden import GOLDEN_TOKENS

pytestmark = [pytest.mark.compat, pytest.mark.neuron]


def test_neuron_matches_hf_fp32_reference(carbon_neuron_session, carbon_model, carbon_shape, carbon_model_tokenizer):
    engine = carbon_neuron_session.engine(carbon_model, carbon_shape)
    reference = HFEngine(carbon_neuron_session.checkpoint(carbon_model), carbon_shape, carbon_model.label,
                         device="cpu", dtype="fp32")
    prompts = [c.prompt for c in prompt_suite(carbon_shape.prompt_bp or 180)][: carbon_shape.batch_size]
    report = check_accuracy(reference, engine, Batch.from_prompts(carbon_model_tokenizer, prompts), GOLDEN_TOKENS)
    assert report.passed, report.summary()


def test_neuron_attention_sharding_matches_the_plan(carbon_neuron_session, carbon_model, carbon_shape):
    info = carbon_neuron_session.engine(carbon_model, carbon_shape).info
    assert "attention_sharding_mismatch" not in info.extra, info.extra.get("attention_sharding_mismatch")
    if "attention_sharding_planned" in info.extra:
        assert info.extra["attention_sharding"] == info.extra["attention_sharding_planned"]
