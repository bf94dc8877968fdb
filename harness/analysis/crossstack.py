"""The configuration fields that mean the same on NxDI and on a vLLM server, as each stack records them,
for a migration's "Configuration drift": each meaning is read from both sides (computed where the two
stacks express it differently), and a meaning whose two values differ is flagged.

How the stacks line up (``harness.core.vllm_neuron`` starts a vLLM Neuron server at an NxDI shape by the
same rules):

- NxDI compiles one context-encoding graph of ``batch_size x max_context_length`` tokens (one per bucket
  with ``enable_bucketing``: ``context_encoding_buckets``, or powers of two from 128 when unset); vLLM
  Neuron's prefill step is ``--max-num-batched-tokens`` tokens, its graphs ``num_batched_tokens_buckets``.
  So the prefill size is batch x context against ``max_num_batched_tokens``, never ``max_context_length``
  alone.
- NxDI decodes greedily on device with ``on_device_sampling_config.top_k == 1``; vLLM Neuron with
  ``on_device_sampling_config.all_greedy``. vLLM Neuron has no ``enable_bucketing`` switch: its buckets
  are given (or derived) as lists, which are compared instead.
- NxDI's KV cache is one contiguous block per sequence (``seq_len`` positions) unless
  ``is_block_kv_layout`` (then ``pa_block_size``); vLLM pages it in ``block_size`` blocks. Prefix caching:
  ``is_prefix_caching`` against ``enable_prefix_caching``.

On the vLLM side, what the server told about itself (``server``: ``/v1/models``' ``max_model_len``, the
``vllm:cache_config_info`` labels of ``/metrics``, ``/version``: ``harness.serving.introspect``) is read
before its parsed arguments (``args``, where the check started it), since a default (``None``) is
resolved only inside the engine. A value one stack does not record is ``(absent)`` and not flagged: a
vLLM on a CPU has no Neuron sampling or buckets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

ABSENT = "(absent)"
Config = Mapping[str, Any]


def dig(config: Any, path: str) -> Any:
    """``config``'s value at a dotted ``path``; ``None`` where any step is missing."""
    for key in path.split("."):
        if not isinstance(config, Mapping) or key not in config:
            return None
        config = config[key]
    return config


def first(config: Config, *paths: str) -> Any:
    """The value of the first ``path`` that ``config`` records (not None)."""
    return next((v for v in (dig(config, p) for p in paths) if v is not None), None)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool | None:
    """True / False from a bool or the strings vLLM's labels and JSON configs carry ("True", "true")."""
    if isinstance(value, bool) or value is None:
        return value
    text = str(value).strip().lower()
    return True if text in ("true", "1", "yes") else False if text in ("false", "0", "no") else None


DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "torch.float32": "float32",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "torch.bfloat16": "bfloat16",
          "float16": "float16", "fp16": "float16", "half": "float16", "torch.float16": "float16"}


def _dtype(value: Any) -> Any:
    return DTYPES.get(str(value).lower(), value) if value is not None else None


# --- NxDI (InferenceConfig.to_json_string()) -------------------------------------------------------

def _nxdi_batch(c: Config) -> int | None:
    return _int(first(c, "neuron_config.max_batch_size", "neuron_config.batch_size"))


def _nxdi_context(c: Config) -> int | None:
    return _int(first(c, "neuron_config.max_context_length", "neuron_config.seq_len"))


def _nxdi_cte_buckets(c: Config) -> list[int] | None:
    """The context-encoding graphs' sizes in tokens per step (batch x bucket), as NxDI derives them."""
    batch, context = _int(first(c, "neuron_config.ctx_batch_size")) or _nxdi_batch(c), _nxdi_context(c)
    if batch is None or context is None:
        return None
    buckets = dig(c, "neuron_config.context_encoding_buckets")
    if not _bool(dig(c, "neuron_config.enable_bucketing")):
        buckets = [context]
    elif not isinstance(buckets, list) or not all(isinstance(b, int) for b in buckets):
        buckets = _powers_of_two(128, context)  # NxDI's autobucketing.generate_buckets(128, max_context_length)
    return [batch * b for b in buckets]


def _powers_of_two(low: int, high: int) -> list[int]:
    if low >= high:
        return [high]
    return [2 ** i for i in range(int(math.log2(low)), round(math.log2(high)))] + [high]


def _nxdi_greedy(c: Config) -> bool | None:
    sampling = dig(c, "neuron_config.on_device_sampling_config")
    if not isinstance(sampling, Mapping):
        return False if dig(c, "neuron_config") is not None else None  # sampled on the host
    return _int(sampling.get("top_k")) == 1 and not _bool(sampling.get("do_sample"))


def _nxdi_block(c: Config) -> int | None:
    if _bool(dig(c, "neuron_config.is_block_kv_layout")):
        return _int(dig(c, "neuron_config.pa_block_size"))
    return _int(dig(c, "neuron_config.seq_len"))  # one contiguous block per sequence


# --- vLLM (harness.serving.engine_args's ``args``; what the server told: ``server``) ---------------------

NEURON = "args.additional_config.neuron_config"


def _vllm_greedy(c: Config) -> bool | None:
    return _bool(dig(c, f"{NEURON}.on_device_sampling_config.all_greedy"))


def _int_list(value: Any) -> list[int] | None:
    return [int(v) for v in value] if isinstance(value, list) and all(_int(v) is not None for v in value) else None


@dataclass(frozen=True)
class Mapped:
    """One meaning, how each stack names it, and how its value is read from each stack's record."""

    meaning: str
    nxdi: str
    vllm: str
    nxdi_value: Callable[[Config], Any]
    vllm_value: Callable[[Config], Any]


FIELDS = (
    Mapped("tensor-parallel degree", "neuron_config.tp_degree", "args.tensor_parallel_size",
           lambda c: _int(dig(c, "neuron_config.tp_degree")), lambda c: _int(dig(c, "args.tensor_parallel_size"))),
    Mapped("positions per sequence", "neuron_config.seq_len", "max_model_len (/v1/models, else args)",
           lambda c: _int(dig(c, "neuron_config.seq_len")),
           lambda c: _int(first(c, "server.max_model_len", "args.max_model_len"))),
    Mapped("sequences per batch", "neuron_config.max_batch_size", "args.max_num_seqs",
           _nxdi_batch, lambda c: _int(dig(c, "args.max_num_seqs"))),
    Mapped("prefill tokens per step", "batch_size x max_context_length", "args.max_num_batched_tokens",
           lambda c: (_nxdi_batch(c) or 0) * (_nxdi_context(c) or 0) or None,
           lambda c: _int(dig(c, "args.max_num_batched_tokens"))),
    Mapped("prefill graphs (tokens)", "batch x context_encoding_buckets (enable_bucketing)",
           "neuron_config.num_batched_tokens_buckets", _nxdi_cte_buckets,
           lambda c: _int_list(dig(c, f"{NEURON}.num_batched_tokens_buckets"))),
    Mapped("decode graphs (sequences)", "tkg_batch_size", "neuron_config.num_seqs_buckets",
           lambda c: [b] if (b := _int(first(c, "neuron_config.tkg_batch_size")) or _nxdi_batch(c)) else None,
           lambda c: _int_list(dig(c, f"{NEURON}.num_seqs_buckets"))),
    Mapped("weights dtype", "neuron_config.torch_dtype", "args.dtype",
           lambda c: _dtype(dig(c, "neuron_config.torch_dtype")), lambda c: _dtype(dig(c, "args.dtype"))),
    Mapped("greedy on device", "on_device_sampling_config.top_k == 1", "on_device_sampling_config.all_greedy",
           _nxdi_greedy, _vllm_greedy),
    Mapped("KV block size (positions)", "pa_block_size (is_block_kv_layout), else seq_len",
           "block_size (/metrics cache_config_info, else args)", _nxdi_block,
           lambda c: _int(first(c, "server.cache_config.block_size", "args.block_size"))),
    Mapped("prefix caching", "neuron_config.is_prefix_caching",
           "enable_prefix_caching (/metrics cache_config_info, else args)",
           lambda c: _bool(dig(c, "neuron_config.is_prefix_caching")),
           lambda c: _bool(first(c, "server.cache_config.enable_prefix_caching", "args.enable_prefix_caching"))),
    # NxDI schedules a step only after the last one's tokens are back; vLLM's async scheduling (the 2.32+ plugin's
    # default) overlaps the next step's scheduling with the current one: a like-for-like timing differs by it
    Mapped("async scheduling", "(none: each step waits for the last)", "args.async_scheduling",
           lambda c: False if dig(c, "neuron_config") is not None else None,
           lambda c: _bool(dig(c, "args.async_scheduling"))),
    Mapped("sequence parallelism", "neuron_config.sequence_parallel_enabled",
           "neuron_config.sequence_parallel_enabled (additional_config)",
           lambda c: _bool(dig(c, "neuron_config.sequence_parallel_enabled")),
           lambda c: _bool(dig(c, f"{NEURON}.sequence_parallel_enabled"))),
)
# NxDI's own, with no vLLM Neuron counterpart: listed, never compared
NXDI_ONLY = ("neuron_config.enable_bucketing", "neuron_config.token_generation_buckets")


@dataclass(frozen=True)
class Row:
    meaning: str
    nxdi: str
    vllm: str
    nxdi_value: Any
    vllm_value: Any

    @property
    def differs(self) -> bool:
        """Both stacks record the meaning, and its values differ."""
        return self.nxdi_value is not None and self.vllm_value is not None and self.nxdi_value != self.vllm_value

    def to_dict(self) -> dict[str, Any]:
        return {"meaning": self.meaning, "nxdi": self.nxdi, "vllm": self.vllm,
                "nxdi_value": ABSENT if self.nxdi_value is None else self.nxdi_value,
                "vllm_value": ABSENT if self.vllm_value is None else self.vllm_value, "differs": self.differs}

    def describe(self) -> str:
        return f"{self.meaning}: NxDI {self.nxdi_value} ({self.nxdi}), vLLM {self.vllm_value} ({self.vllm})"


def cross_stack_rows(nxdi: Config, vllm: Config) -> list[Row]:
    return [Row(f.meaning, f.nxdi, f.vllm, f.nxdi_value(nxdi), f.vllm_value(vllm)) for f in FIELDS]


def cross_stack_section(nxdi: Config, vllm: Config) -> tuple[dict[str, Any], list[str]]:
    """The migration's drift: verdict.json part and markdown lines, the differing meanings flagged."""
    rows = cross_stack_rows(nxdi, vllm)
    flagged = [r.describe() for r in rows if r.differs]
    lines = [f"**{len(flagged)} of {len(rows)} mapped field(s) differ between the stacks**"
             + (": " + "; ".join(r.meaning for r in rows if r.differs) + "." if flagged else "."), "",
             "Fields that mean the same on both stacks (each stack's other fields are its own; `(absent)`: not "
             "recorded by that stack, never flagged):", "",
             "| meaning | NxDI | vLLM | NxDI value | vLLM value | |", "|---|---|---|---|---|---|"]
    for r in rows:
        d = r.to_dict()
        lines.append(f"| {r.meaning} | `{r.nxdi}` | `{r.vllm}` | {d['nxdi_value']} | {d['vllm_value']} | "
                     f"{'**differs**' if r.differs else ''} |")
    own = [f"`{p}` = {v}" for p in NXDI_ONLY if (v := dig(nxdi, p)) is not None]
    if own:
        lines += ["", "NxDI only (vLLM Neuron has no such setting): " + ", ".join(own) + "."]
    return {"compared": True, "cross_stack": [r.to_dict() for r in rows], "flagged": flagged}, lines + [""]


def same_stack_flags(base: Config, new: Config, backend: str) -> list[str]:
    """Between two sides of one stack (NxDI, or vLLM): the mapped meanings whose values differ, each
    described (the full list of differing fields is the drift table; these are the ones that change
    what is computed or how much of it)."""
    if backend not in ("neuron", "openai"):
        return []
    read = (lambda f: f.nxdi_value) if backend == "neuron" else (lambda f: f.vllm_value)
    out = []
    for f in FIELDS:
        a, b = read(f)(base), read(f)(new)
        if a is not None and b is not None and a != b:
            out.append(f"{f.meaning} ({f.nxdi if backend == 'neuron' else f.vllm}): {a} -> {b}")
    return out
