"""Every harness shape's vLLM Neuron engine arguments (``harness.core.vllm_neuron_args.engine_arguments``) pinned,
and each accepted by the 2.32+ plugin's prefill rules as its own code states them (public fork
jinhuang12/vllm-neuron at ed3580d01e8632897b29986ab7532d8c5925846f, transcribed below): the harness's old
``batch x max_context_length`` stopped every default shape at engine start ("max_num_batched_tokens=256 is not a
supported chunked prefill size on Neuron")."""

from __future__ import annotations

import pytest

from harness.core.spec import SHAPES, get_shape
from harness.core.vllm_neuron import engine_arguments, serve_command

pytestmark = pytest.mark.unit

# shape -> (max_num_batched_tokens, num_batched_tokens_buckets, kv_segment_size_buckets, prefill)
PINNED = {
    "report-bs1": (512, [256, 512], None, "single-shot"),
    "smoke": (160, [32, 160], None, "single-shot"),
    "a100-style-bs16": (512, [256, 512], None, "single-shot"),
    "dna-suite-bs1": (512, [256, 512], None, "single-shot"),
    "contract-long": (192, [64, 192], None, "single-shot"),
    "vep-bs8": (256, [256], None, "single-shot"),
    "scan-cpu": (512, [512], None, "single-shot"),
    "scan-8k": (8192, [8192], None, "single-shot"),
    "scan-32k": (8192, [8192], [8192], "chunked"),
    "scan-64k": (8192, [8192], [8192], "chunked"),
}


def plugin_refusal(max_num_batched_tokens: int, max_model_len: int, max_num_seqs: int, neuron: dict) -> str | None:
    """What the plugin's model runner refuses at init, or None. Transcribed from the fork at ed3580d:
    ``vllm_neuron/vllm/worker/neuron_model_runner.py`` (``get_max_num_batched_tokens`` clamps to max_model_len;
    ``resolve_segmented_prefill_config`` only when ``kv_segment_size_buckets`` is not set) and
    ``vllm_neuron/utils/bucket_utils.py`` (``resolve_segmented_prefill_config``,
    ``validate_num_batched_tokens_buckets``, ``validate_kv_segment_size_buckets``, ``validate_num_seqs_buckets``)."""
    tokens = min(max_num_batched_tokens, max_model_len)
    supported = {512, 1024, 2048, 4096, 8192}
    segments = neuron.get("kv_segment_size_buckets")
    if segments is None:
        if tokens >= max_model_len and max_model_len > 16 * 1024:
            return "Single-shot prefill is only supported when max_model_len <= 16384"
        if tokens < max_model_len and tokens not in supported:
            return f"max_num_batched_tokens={tokens} is not a supported chunked prefill size on Neuron"
    else:
        if len(segments) != 1 or segments[0] not in supported:
            return f"kv_segment_size_buckets {segments}"
        if "num_batched_tokens_buckets" in neuron and neuron["num_batched_tokens_buckets"] != segments:
            return "When kv_segment_size_buckets is set, num_batched_tokens_buckets must match"
    buckets = neuron.get("num_batched_tokens_buckets")
    if buckets is not None:
        if not buckets or any(b <= a for a, b in zip(buckets, buckets[1:])) or min(buckets) <= 0:
            return f"num_batched_tokens_buckets {buckets}"
        if buckets[-1] != tokens:
            return f"Last bucket in num_batched_tokens_buckets must equal max_num_batched_tokens ({tokens})"
    if neuron.get("num_seqs_buckets", [max_num_seqs])[-1] != max_num_seqs:
        return "Last bucket in num_seqs_buckets must equal max_num_seqs"
    return None


def test_every_shape_in_the_table_is_pinned():
    assert set(PINNED) == set(SHAPES)


@pytest.mark.parametrize("name", sorted(PINNED))
@pytest.mark.parametrize("device", ["neuron", "cpu"])
def test_each_shapes_arguments_are_pinned_and_the_plugin_accepts_them(name, device):
    shape = get_shape(name)
    engine = engine_arguments(shape, device)
    neuron = engine.additional_config["neuron_config"]
    tokens, buckets, segments, mode = PINNED[name]
    assert engine.values["max_num_batched_tokens"] == tokens and engine.prefill == mode
    assert neuron["num_batched_tokens_buckets"] == buckets and neuron.get("kv_segment_size_buckets") == segments
    assert neuron["num_seqs_buckets"] == [shape.batch_size] and engine.values["max_model_len"] == shape.seq_len
    assert plugin_refusal(tokens, shape.seq_len, shape.batch_size, neuron) is None
    assert engine.values["max_num_batched_tokens"] >= shape.batch_size  # vLLM's own: a step holds every sequence
    if mode == "single-shot":  # each request its own bucket at the shape's context length
        assert shape.max_context_length in buckets


def test_the_old_batch_times_context_is_what_the_plugin_refused():
    """The rule transcription fails what the issue saw: each default shape at batch x max_context_length."""
    for name, tokens in (("smoke", 32), ("report-bs1", 256), ("contract-long", 128)):
        shape = get_shape(name)
        refusal = plugin_refusal(tokens, shape.seq_len, shape.batch_size, {"num_batched_tokens_buckets": [tokens]})
        assert refusal == f"max_num_batched_tokens={tokens} is not a supported chunked prefill size on Neuron"


def test_the_server_gets_exactly_these_arguments():
    shape = get_shape("scan-32k")
    command = serve_command("/m", shape, "carbon-8b", stack="s")
    assert command.neuron_config() == engine_arguments(shape).additional_config["neuron_config"]
    args = list(command.args)
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"


def test_a_batched_shape_says_its_prefill_is_per_request():
    assert any("max_prefills_per_batch = 1" in n for n in engine_arguments(get_shape("a100-style-bs16")).notes)
    assert engine_arguments(get_shape("report-bs1")).notes == ()
