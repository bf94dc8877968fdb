"""The 2.32+ vLLM Neuron plugin's start rules as the harness knows them (``harness.core.vllm_neuron_rules``):
each rule on both sides of its boundary, in the plugin's own words (the fork jinhuang12/vllm-neuron at the
commits the module names), on the arguments ``serve_command`` really builds."""

from __future__ import annotations

import json
import random

import pytest

from harness.core import vllm_neuron_rules as rules
from harness.core.spec import get_shape
from harness.core.vllm_neuron import serve_command

pytestmark = pytest.mark.unit


def settings(tokens: int, model_len: int, **neuron) -> rules.EngineSettings:
    return rules.EngineSettings(model_len, tokens, 1, neuron)


# ── prefill size ──


@pytest.mark.parametrize("tokens, model_len", [(160, 160), (200, 160), (512, 1024), (8192, 16384), (16384, 16384)])
def test_single_shot_and_supported_chunks_start(tokens, model_len):
    assert rules.segmented_prefill_refusal(tokens, model_len) is None


def test_a_chunk_below_max_model_len_must_be_a_supported_size():
    assert rules.segmented_prefill_refusal(256, 512) == (
        "max_num_batched_tokens=256 is not a supported chunked prefill size on Neuron. Supported values: "
        "[512, 1024, 2048, 4096, 8192]. Alternatively, set max_num_batched_tokens=512 (equal to max_model_len) "
        "to disable chunked prefill.")
    assert rules.segmented_prefill_refusal(159, 160).startswith("max_num_batched_tokens=159 is not a supported")
    # above the single-shot bound there is no single-shot alternative to offer
    assert "Alternatively" not in rules.segmented_prefill_refusal(1000, 16385)


def test_single_shot_prefill_stops_above_16k():
    assert rules.segmented_prefill_refusal(16384, 16384) is None
    assert rules.segmented_prefill_refusal(16385, 16385).startswith(
        "Single-shot prefill (max_num_batched_tokens=16385 >= max_model_len=16385) is only supported when "
        "max_model_len <= 16384.")


def test_the_prefill_rule_on_random_draws():
    rng = random.Random(55)
    for _ in range(500):
        model_len = rng.choice([rng.randint(1, 20000), *rules.SUPPORTED_KV_SEGMENT_SIZES, 16384, 16385])
        tokens = rng.choice([rng.randint(1, 20000), model_len, *rules.SUPPORTED_KV_SEGMENT_SIZES])
        starts = (model_len <= 16384) if tokens >= model_len else tokens in rules.SUPPORTED_KV_SEGMENT_SIZES
        assert (rules.segmented_prefill_refusal(tokens, model_len) is None) == starts, (tokens, model_len)


def test_the_largest_prefill_bucket_is_the_clamped_batched_tokens():
    # get_max_num_batched_tokens clamps to max_model_len: 16 x 512 tokens at 512 positions -> 512
    assert rules.prefill_refusal(rules.EngineSettings(512, 8192, 16, {"num_batched_tokens_buckets": [512]})) is None
    assert rules.prefill_refusal(rules.EngineSettings(512, 8192, 16, {"num_batched_tokens_buckets": [8192]})) == (
        "Last bucket in num_batched_tokens_buckets must equal max_num_batched_tokens (512), got 8192")
    assert rules.prefill_refusal(rules.EngineSettings(512, 512, 4, {"num_seqs_buckets": [2]})) == (
        "Last bucket in num_seqs_buckets must equal max_num_seqs (4), got 2")
    assert rules.buckets_refusal([512, 256, 512], 512, "num_batched_tokens_buckets", "max_num_batched_tokens") == (
        "num_batched_tokens_buckets must be in strictly ascending order, got [512, 256, 512]")


def test_user_segment_buckets_replace_the_segmented_decision():
    chunked = settings(512, 1024, kv_segment_size_buckets=[512], num_batched_tokens_buckets=[512])
    assert rules.prefill_refusal(chunked) is None
    assert rules.prefill_refusal(settings(256, 1024, kv_segment_size_buckets=[256])).startswith(
        "kv_segment_size_buckets[0] = 256 is not a supported segment size.")
    assert rules.prefill_refusal(settings(512, 1024, kv_segment_size_buckets=[1024],
                                          num_batched_tokens_buckets=[512])).startswith(
        "When kv_segment_size_buckets is set, num_batched_tokens_buckets must match")


# ── EFA ──


@pytest.mark.parametrize("value, skips", [(None, False), ("0", False), ("1", True), ("true", True)])
def test_efa_affinity_is_skipped_by_any_value_but_0(value, skips):
    environ = {} if value is None else {rules.SKIP_EFA: value}
    assert rules.skips_efa(environ) is skips
    refusal = rules.efa_refusal(environ, "0000:c9:00.0", None)
    assert (refusal is None) is skips
    if not skips:
        assert refusal.startswith("No EFA device found at /sys/bus/pci/devices/0000:c9:00.0/infiniband for BDF "
                                  "0000:c9:00.0.")


def test_efa_present_starts_and_an_empty_device_stops():
    assert rules.efa_refusal({}, "0000:c9:00.0", ["rdmap201s0"]) is None
    assert rules.efa_refusal({}, "0000:c9:00.0", []).startswith("No infiniband interfaces found in")


@pytest.mark.parametrize("core, bdf", [(0, "0000:c9:00.0"), (3, "0000:c9:00.0"), (4, "0000:b4:00.0"),
                                       (32, "0000:98:00.0"), (63, "0000:f6:00.0")])
def test_a_worker_core_maps_to_its_devices_efa_address(core, bdf):
    assert rules.efa_bdf(core) == bdf


# ── admission of log-probabilities ──

ON_DEVICE = {"on_device_sampling_config": {"all_greedy": True}}
HOST = {"on_device_sampling_config": None}


@pytest.mark.parametrize("neuron, asynchronous, refused", [
    (ON_DEVICE, True, True), (ON_DEVICE, False, False), ({}, True, True),  # absent: the default sampler, on device
    (HOST, True, False), (HOST, False, False)])
def test_completion_logprobs_need_synchronous_scheduling_under_on_device_sampling(neuron, asynchronous, refused):
    server = rules.EngineSettings(512, 512, 1, neuron, asynchronous, 1000)
    refusal = rules.admission_refusal(server, rules.harness_requests(server))
    assert (refusal is not None) is refused
    if refused:
        assert refusal == ("This server samples on device (on_device_sampling_config is set) and its sampler returns "
                           "token ids only, so it cannot return logprobs=1000. Leave logprobs and prompt_logprobs "
                           "unset, or restart the server with on_device_sampling_config: null to sample on the host.")


@pytest.mark.parametrize("neuron, asynchronous, admitted", [(ON_DEVICE, False, False), (ON_DEVICE, True, False),
                                                            (HOST, True, True)])
def test_prompt_logprobs_are_refused_under_any_on_device_sampling(neuron, asynchronous, admitted):
    assert rules.prompt_logprobs_admitted(rules.EngineSettings(512, 512, 1, neuron, asynchronous)) is admitted


def test_token_ids_and_a_timed_server():
    server = rules.EngineSettings(512, 512, 1, ON_DEVICE, True, 0)
    assert rules.harness_requests(server) == rules.Asked()
    assert rules.admission_refusal(server, rules.Asked()) is None
    assert "cannot return logprob_token_ids." in rules.admission_refusal(server, rules.Asked(logprob_token_ids=True))
    assert rules.admission_refusal(rules.EngineSettings(512, 512, 1, ON_DEVICE, False),
                                   rules.Asked(logprob_token_ids=True)) is None


# ── the core variable ──


def test_neuron_rt_visible_cores_set_at_all_stops_a_worker():
    assert rules.core_variable_refusal({"NEURON_VISIBLE_DEVICES": "0-3"}) is None
    assert rules.core_variable_refusal({"NEURON_RT_VISIBLE_CORES": ""}) == (
        "NEURON_RT_VISIBLE_CORES cannot be used with multi-processing execution on vLLM. Set NEURON_VISIBLE_DEVICES "
        "to control device visibility.")


# ── the arguments the harness builds ──


@pytest.mark.parametrize("shape", ["smoke", "report-bs1", "contract-long"])
def test_settings_are_read_from_the_servers_own_arguments(shape):
    command = serve_command("/m", get_shape(shape), device="neuron", stack="t")
    got = rules.engine_settings(command.argv("python"))
    args = list(command.args)
    assert got.max_model_len == int(args[args.index("--max-model-len") + 1])
    assert got.max_num_batched_tokens == int(args[args.index("--max-num-batched-tokens") + 1])
    assert got.neuron_config == command.neuron_config()
    assert got.async_scheduling is ("--no-async-scheduling" not in args)


def test_the_last_scheduling_flag_wins_and_bad_arguments_name_the_flag():
    base = ["--max-model-len", "64", "--max-num-batched-tokens", "64"]
    assert not rules.engine_settings([*base, "--async-scheduling", "--no-async-scheduling"]).async_scheduling
    assert rules.engine_settings([*base, "--no-async-scheduling", "--async-scheduling"]).async_scheduling
    assert rules.engine_settings([*base, "--additional-config", json.dumps({"neuron_config": HOST})]).neuron_config \
        == HOST
    with pytest.raises(ValueError, match="--max-num-batched-tokens: not in the server's arguments"):
        rules.engine_settings(["--max-model-len", "64"])
    with pytest.raises(ValueError, match="--max-model-len 'x': not an integer"):
        rules.engine_settings(["--max-model-len", "x", "--max-num-batched-tokens", "64"])
