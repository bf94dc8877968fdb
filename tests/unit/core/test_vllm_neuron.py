"""The harness shapes as vLLM Neuron servers (``harness.core.vllm_neuron``): the same compiled shape NxDI
builds, in flags vLLM's own argument parser reads back to the same values."""

from __future__ import annotations

import importlib.util
import shlex

import pytest

from harness.core.spec import SHAPES
from harness.core.vllm_neuron import serve_command

pytestmark = pytest.mark.unit


def flag(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("shape", sorted(SHAPES.values(), key=lambda s: s.name), ids=lambda s: s.name)
def test_a_shape_maps_onto_the_servers_flags(shape):
    command = serve_command("/models/Carbon-8B", shape, "carbon-8b")
    args = command.args
    assert int(flag(args, "--tensor-parallel-size")) == shape.tp_degree
    assert int(flag(args, "--max-model-len")) == shape.seq_len
    assert int(flag(args, "--max-num-seqs")) == shape.batch_size
    batched = int(flag(args, "--max-num-batched-tokens"))
    assert batched == shape.batch_size * shape.max_context_length
    neuron = command.neuron_config()
    # vLLM Neuron: the largest bucket of each must equal its engine limit
    assert max(neuron["num_batched_tokens_buckets"]) == batched
    assert max(neuron["num_seqs_buckets"]) == shape.batch_size
    assert neuron["on_device_sampling_config"] == {"all_greedy": "true"}
    assert int(command.env["VLLM_NEURON_COMPILATION_TIMEOUT"]) > 600  # the default is too short for the 8B
    assert command.env["VLLM_CACHE_ROOT"]
    assert shlex.split(command.shell())[len(command.env):][:3] == ["vllm", "serve", "/models/Carbon-8B"]


@pytest.mark.serving
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM's own argument parser needs vllm installed (nox -s serving has it)")
def test_vllms_own_parser_reads_the_flags_back():
    from harness.core.spec import get_shape
    from harness.serving.engine_args import engine_args

    shape = get_shape("a100-style-bs16")
    parsed = engine_args(["--model", "/models/Carbon-8B", *serve_command("/models/Carbon-8B", shape).args])["args"]
    assert parsed["tensor_parallel_size"] == shape.tp_degree and parsed["max_model_len"] == shape.seq_len
    assert parsed["max_num_seqs"] == shape.batch_size
    assert parsed["max_num_batched_tokens"] == shape.batch_size * shape.max_context_length
    assert parsed["additional_config"]["neuron_config"]["num_seqs_buckets"] == [shape.batch_size]
    assert parsed["dtype"] == "bfloat16"
