"""A harness shape as a vLLM Neuron server is started: the ``vllm serve`` flags and environment that
compile the same shape NxDI compiles for it, so that a migration check compares like with like.

NxDI compiles one context-encoding graph of ``batch_size x max_context_length`` tokens and one
token-generation graph of ``batch_size`` sequences, up to ``seq_len`` positions, sharded ``tp_degree``
ways, greedy on device. vLLM Neuron (SDK 2.32+, vLLM 0.24+) takes the same through its engine arguments and
``--additional-config '{"neuron_config": {...}}'``:

- ``--tensor-parallel-size`` = tp_degree; ``--max-model-len`` = seq_len; ``--max-num-seqs`` = batch_size;
- ``--max-num-batched-tokens`` = batch_size x max_context_length (the whole static batch's prefill in
  one step) and ``num_batched_tokens_buckets`` = [that]: vLLM Neuron requires its largest bucket to equal
  ``max_num_batched_tokens``;
- ``num_seqs_buckets`` = [batch_size] (its largest must equal ``max_num_seqs``): one decode graph, as NxDI;
- ``on_device_sampling_config`` ``all_greedy``: the harness generates greedily;
- ``--dtype bfloat16``: Carbon's dtype on Trn2 in the reference runs.

Compilation runs at server warm-up, one NEFF per bucket: ``VLLM_NEURON_COMPILATION_TIMEOUT`` (600 s by
default) and ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` need raising for the 8B; compiled artifacts land in
``$VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/`` (and, where set, ``$NEURON_LIBTORCH_REMOTE_CACHE``),
reused by every later start. Taken from the vLLM Neuron documentation (configuration reference,
compilation cache, quickstarts); not run here: there is no Neuron device on this machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass, field

from harness.core.spec import RunShape, get_shape

COMPILATION_TIMEOUT_S = 1800  # the 8B's buckets exceed the 600 s default on trn2.3xlarge
DEFAULT_CACHE_ROOT = "/opt/carbon-harness-cache/vllm"


@dataclass(frozen=True)
class ServeCommand:
    """``vllm serve`` for one model at one shape: its arguments and the environment to start it in."""

    model: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def neuron_config(self) -> dict:
        return json.loads(self.args[self.args.index("--additional-config") + 1])["neuron_config"]

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} vllm serve {shlex.quote(self.model)} " + " ".join(shlex.quote(a) for a in self.args)


def serve_command(model: str, shape: RunShape, served_name: str = "", port: int = 8000,
                  cache_root: str = DEFAULT_CACHE_ROOT) -> ServeCommand:
    """The vLLM Neuron server that compiles ``shape`` for ``model`` (a checkpoint path or hub id)."""
    tokens = shape.batch_size * shape.max_context_length
    neuron_config = {"num_batched_tokens_buckets": [tokens], "num_seqs_buckets": [shape.batch_size],
                     "on_device_sampling_config": {"all_greedy": "true"}}
    args = ["--tensor-parallel-size", str(shape.tp_degree), "--max-model-len", str(shape.seq_len),
            "--max-num-seqs", str(shape.batch_size), "--max-num-batched-tokens", str(tokens),
            "--dtype", "bfloat16", "--port", str(port),
            "--additional-config", json.dumps({"neuron_config": neuron_config}, sort_keys=True)]
    if served_name:
        args += ["--served-model-name", served_name]
    env = {"VLLM_NEURON_COMPILATION_TIMEOUT": str(COMPILATION_TIMEOUT_S),
           "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": str(COMPILATION_TIMEOUT_S), "VLLM_CACHE_ROOT": cache_root}
    return ServeCommand(model, tuple(args), env)


def cmd_vllm_serve(args: argparse.Namespace) -> int:
    print(serve_command(args.model, get_shape(args.shape), args.served_model_name, args.port).shell())
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    from harness.core.options import parse_positive_int, parse_shape

    p = sub.add_parser("vllm-serve", help="the vllm serve command (vLLM Neuron) that compiles a harness shape as NxDI "
                                          "does: the migration's candidate server")
    p.add_argument("--model", required=True, metavar="PATH|ID", help="the checkpoint the server loads")
    p.add_argument("--shape", type=parse_shape, default="report-bs1", help="a harness shape (default report-bs1)")
    p.add_argument("--served-model-name", default="", metavar="NAME", help="e.g. carbon-8b")
    p.add_argument("--port", type=parse_positive_int, default=8000)
    p.set_defaults(func=cmd_vllm_serve)
