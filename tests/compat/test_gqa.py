"""GQA sharding of the three Carbon sizes, as NxDI 0.9 decides it, and what it costs."""

from __future__ import annotations

import pytest

from harness.core.hardware import get_profile
from harness.core.plan import CONVERT_TO_MHA, REPLICATE, PlanError, attention_sharding, kv_cache_bytes, make_plan
from harness.core.spec import MODELS, SHAPES

pytestmark = pytest.mark.compat

CARBON = ["carbon-500m", "carbon-3b", "carbon-8b"]
TP_DEGREES = [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("model,fallback", [("carbon-500m", True), ("carbon-3b", False), ("carbon-8b", True)])
def test_tp4_fallback_matches_the_reference_runs(model, fallback):
    spec = MODELS[model]
    s = attention_sharding(spec.num_attention_heads, spec.num_key_value_heads, 4)
    assert s.fallback is fallback
    assert s.strategy == (CONVERT_TO_MHA if fallback else REPLICATE)


@pytest.mark.parametrize("model", CARBON)
def test_tp4_fallback_costs_no_kv_bytes_for_carbon(model):
    """8 KV heads at tp=4: the strategy is overridden, but 8 % 4 == 0 leaves the heads as they are."""
    spec = MODELS[model]
    plan = make_plan(spec, SHAPES["report-bs1"], get_profile("trn2.3xlarge"), tp_degree=4)
    assert plan.sharding.num_kv_heads == spec.num_key_value_heads
    assert plan.kv_bytes_per_rank == plan.kv_bytes_model_heads_per_rank


@pytest.mark.parametrize("model", CARBON)
@pytest.mark.parametrize("tp", TP_DEGREES)
def test_head_counts_at_every_tp(model, tp):
    spec = MODELS[model]
    s = attention_sharding(spec.num_attention_heads, spec.num_key_value_heads, tp)
    assert s.num_heads % tp == 0 and s.num_heads >= spec.num_attention_heads
    assert s.num_heads - spec.num_attention_heads < tp  # padding adds fewer than tp heads
    assert s.fallback == (tp % spec.num_key_value_heads != 0)
    if spec.num_key_value_heads < tp:  # too few KV heads for one per rank: replicated up to tp
        assert s.num_kv_heads == tp and s.strategy == REPLICATE
    else:
        assert s.num_kv_heads == spec.num_key_value_heads


@pytest.mark.parametrize("heads,kv,tp,expected", [
    (56, 8, 32, (64, 32)),    # NxDI's REPLICATE_TO_TP_DEGREE example
    (16, 16, 5, (20, 20)),    # MHA: kv follows the padded heads
    (12, 3, 8, (16, 16)),     # fallback with kv < tp: converted to MHA
    (32, 8, 12, (36, 36)),    # fallback, kv % tp != 0
])
def test_nxdi_rules_on_other_shapes(heads, kv, tp, expected):
    s = attention_sharding(heads, kv, tp)
    assert (s.num_heads, s.num_kv_heads) == expected


def test_kv_cost_of_replication():
    spec = MODELS["carbon-3b"]
    plan = make_plan(spec, SHAPES["a100-style-bs16"], get_profile("trn2.48xlarge"), tp_degree=16)
    assert plan.sharding.num_kv_heads == 16
    assert plan.kv_bytes_per_rank == 4 * plan.kv_bytes_model_heads_per_rank
    assert plan.kv_bytes_per_rank == kv_cache_bytes(spec, 16, 512, 16) / 16


@pytest.mark.parametrize("heads,kv,tp,message", [(16, 8, 0, "tp_degree=0"), (16, 6, 4, "not a multiple")])
def test_bad_inputs(heads, kv, tp, message):
    with pytest.raises(PlanError, match=message):
        attention_sharding(heads, kv, tp)


@pytest.mark.neuron
@pytest.mark.parametrize("model", CARBON)
@pytest.mark.parametrize("tp", TP_DEGREES)
def test_live_nxdi_agrees_with_the_plan(nxdi_cpu, model, tp):
    """NxDI's own determine_sharding_strategy / get_shardable_head_counts, imported from the
    installed package or --carbon-nxdi-source (the NxDI CPU tier)."""
    from neuronx_distributed_inference.modules.attention import gqa

    spec = MODELS[model]
    strategy = gqa.determine_sharding_strategy(tp, spec.num_key_value_heads)
    heads, kv = gqa.get_shardable_head_counts(tp, spec.num_attention_heads, spec.num_key_value_heads, strategy)
    s = attention_sharding(spec.num_attention_heads, spec.num_key_value_heads, tp)
    assert (strategy.value, heads, kv) == (s.strategy, s.num_heads, s.num_kv_heads)
