"""The neuron scoring build's pure parts: what it refuses, which rows its head keeps, how its artifact
is keyed, and the positions it is planned at (its NxDI behaviour: tests/compat/test_neuron_scoring.py)."""

from __future__ import annotations

import pytest
import torch

from harness.backends.neuron.artifacts import neuron_artifact_key
from harness.backends.neuron.config import scoring_neuron_config_kwargs
from harness.backends.neuron.scoring import SCORING_HEAD, check_scoring_kwargs, kmer_rows
from harness.carbon.fns import KMER_START, kmer_marginals
from harness.core.errors import BackendError
from harness.core.spec import MODELS, RopeScaling, get_shape

pytestmark = pytest.mark.unit


def test_the_scoring_kwargs_leave_every_position_to_the_head():
    kwargs = scoring_neuron_config_kwargs("carbon-3b", "vep-bs8")
    check_scoring_kwargs(kwargs)
    assert kwargs["on_device_sampling_config"] is None


@pytest.mark.parametrize("key, value, reason", [
    ("on_device_sampling_config", {"top_k": 1}, "must return logits, not sampled tokens"),
    ("sequence_parallel_enabled", True, "slices the last token"),
    ("windowed_context_encoding_size", 128, "gathers one position per window"),
    ("is_medusa", True, "Medusa heads replace the lm head"),
])
def test_settings_that_gather_hidden_states_are_refused(key, value, reason):
    with pytest.raises(BackendError, match=f"cannot be made with \\['{key}'\\]: {key}: .*{reason}"):
        check_scoring_kwargs({**scoring_neuron_config_kwargs("carbon-3b", "vep-bs8"), key: value})


def test_the_head_keeps_the_6mer_rows_in_vocabulary_order():
    weight = torch.arange(155776, dtype=torch.float32)[:, None].expand(155776, 3)
    rows = kmer_rows(weight)
    assert rows.shape == (4096, 3) and rows[0, 0] == KMER_START and rows[-1, 0] == KMER_START + 4095
    with pytest.raises(BackendError, match=r"lm head has 1000 rows: the 6-mer block needs rows 151672..155767"):
        kmer_rows(torch.zeros(1000, 3))


def test_kmer_marginals_need_the_6mer_block():
    assert kmer_marginals(torch.zeros(2, 4096)).shape == (2, 6, 4)
    with pytest.raises(ValueError, match="6-mer logits must have 4096 columns, got 155776"):
        kmer_marginals(torch.zeros(2, 155776))


def test_the_scoring_artifact_is_keyed_apart_and_generation_keys_are_unchanged():
    shape, kwargs, versions = get_shape("vep-bs8"), {"tp_degree": 4}, {"nxdi": "0.9.0"}
    plain = neuron_artifact_key("fp", shape, kwargs, versions)
    assert neuron_artifact_key("fp", shape, kwargs, versions, model_options=None) == plain
    assert "model" not in plain.options  # generation artifacts compiled before keep their digest
    scoring = neuron_artifact_key("fp", shape, kwargs, versions, model_options={"scoring_head": SCORING_HEAD})
    assert scoring.digest != plain.digest
    assert neuron_artifact_key("fp", shape, kwargs, versions, model_options={"scoring_head": "v2"}).digest != scoring.digest


@pytest.mark.parametrize("config, positions, rope", [
    ({}, 32768, None),
    ({"max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     131072, RopeScaling(4.0, 32768)),
    ({"max_position_embeddings": 65536, "rope_scaling": {"type": "yarn", "factor": 2.0}}, 65536, RopeScaling(2.0, 32768)),
    ({"max_position_embeddings": 16384, "rope_scaling": None}, 16384, None),
])
def test_a_plan_counts_the_checkpoints_own_positions(config, positions, rope):
    spec = MODELS["carbon-3b"].at_checkpoint_positions(config)
    assert (spec.max_position_embeddings, spec.rope_scaling) == (positions, rope)
