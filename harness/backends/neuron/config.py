"""Every NeuronConfig the harness builds, as data: the reference runs' generation kwargs and the
compile variants against them (``CompileVariant``), the speculative target and draft as NxDI's
``inference_demo.py`` builds them (NxDI's CPU mode rejects speculation, so running it is
Trainium-only; ``tests/unit/backends/nxdi_speculation_probe.py`` builds NxDI's real configs from
these), and the scoring artifact's context-encoding-only config. Pure functions, tested anywhere."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import BackendError
from harness.core.plan import check_context
from harness.core.spec import ModelSpec, RunShape, get_model, get_shape
from harness.core.speculation import DEFAULT_SPECULATION_LENGTH, SpeculativeError, check_speculation_length
from harness.core.vocab import PAD_TOKEN_ID

TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}  # the harness's names -> NeuronConfig's torch_dtype


@dataclass(frozen=True)
class CompileVariant:
    """One change against the reference compile, named for what it changes."""

    changes: str
    kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


# The reference optimisation pass (DESIGN.md): none beat plain bf16 at bs16, all stay measurable.
# What the baseline already compiles is in ``baseline_kernels``: a variant that would only repeat
# it (``top_k_kernel_enabled`` is True by default on trn2) is not a variant.
COMPILE_VARIANTS: dict[str, CompileVariant] = {
    "fused-qkv": CompileVariant("Q, K and V projections fused into one matmul (weights only, no kernel)",
                         {"fused_qkv": True}),
    "qkv-kernel": CompileVariant("the NKI QKV kernel, on fused Q/K/V weights", {"fused_qkv": True, "qkv_kernel_enabled": True}),
    # kv_cache_quant alone only adds a compiler flag: the cache dtype comes from kv_quant_config
    # (config.py, kv_cache_manager.py), and inference_demo.py sets the two fp8 cast variables.
    "kv-cache-fp8": CompileVariant("KV cache stored as float8_e4m3fn (direct cast)",
                            {"kv_cache_quant": True, "kv_quant_config": {"direct_cast": True}},
                            {"XLA_HANDLE_SPECIAL_SCALAR": "1", "UNSAFE_FP8FNCAST": "1"}),
    "mlp-kernel": CompileVariant("the NKI MLP kernel, in context encoding and token generation", {"mlp_kernel_enabled": True}),
    "no-flash-attention": CompileVariant("the CTE flash-attention kernel turned off (the baseline selects it at LNC 2 for "
                                  "buckets that are multiples of 256)", {"attn_kernel_enabled": False}),
}
# What NxDI's CPU mode cannot run (measured): NKI kernels are device code; torch has no CPU
# scatter for float8_e4m3fn, so an fp8 cache builds but cannot be written.
NOT_ON_CPU = {"qkv-kernel": "an NKI kernel (device code)", "mlp-kernel": "an NKI kernel (device code)",
              "kv-cache-fp8": "torch's CPU scatter does not support float8_e4m3fn (the cache builds; writing it fails)"}
RETIRED_COMPILE_VARIANTS = {
    "topk-kernel": "top_k_kernel_enabled already defaults to True on trn2 and greedy sampling takes the argmax, "
                   "so it recompiled the baseline",
    "nki-cte-mlp": "it only added the MLP kernel (in CTE and TKG): use mlp-kernel; the CTE flash-attention kernel "
                   "is already in the baseline (see no-flash-attention)",
}


def check_compile_variants(variants: Iterable[str]) -> tuple[str, ...]:
    """The variant names, or an error naming the first unknown one and the known ones."""
    names = tuple(variants)
    for name in names:
        if name in RETIRED_COMPILE_VARIANTS:
            raise BackendError(f"variant {name!r} was removed: {RETIRED_COMPILE_VARIANTS[name]}; known variants: "
                               f"{', '.join(COMPILE_VARIANTS)}")
        if name not in COMPILE_VARIANTS:
            raise BackendError(f"unknown variant {name!r}; known variants: {', '.join(COMPILE_VARIANTS)}")
    return names


def flash_attention_strategy(q_len: int, logical_nc_config: int, attn_kernel_enabled: bool | None = None) -> str:
    """NxDI 0.9 ``NeuronAttentionBase.get_flash_attention_strategy`` for a CTE bucket of ``q_len``
    with an attention mask and no context parallelism: which flash kernel the compile selects."""
    if attn_kernel_enabled is False:
        return "none"
    if logical_nc_config > 1:
        divisor = 512 if q_len >= 1024 else 256
        return "sharded-kernel" if q_len % divisor == 0 else "none"
    if q_len >= 4096 or (attn_kernel_enabled and q_len >= 512):
        return "unsharded-kernel"
    return "none"


def baseline_kernels(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The NKI kernels a compile with these NeuronConfig kwargs uses on trn2, made explicit so a
    figure says what it measured (the reference runs did not set them, NxDI's defaults chose)."""
    lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", kwargs.get("logical_nc_config", 2)))
    sampling = kwargs.get("on_device_sampling_config") or {}
    return {
        "cte_flash_attention": flash_attention_strategy(kwargs["max_context_length"], lnc,
                                                        kwargs.get("attn_kernel_enabled")),
        "qkv_kernel": bool(kwargs.get("qkv_kernel_enabled", False)),
        "mlp_kernel": bool(kwargs.get("mlp_kernel_enabled", False)),
        "top_k_kernel": bool(sampling.get("top_k_kernel_enabled", True)),  # NxDI default on trn2
        "kv_cache_dtype": "float8_e4m3fn" if kwargs.get("kv_quant_config") is not None else kwargs["torch_dtype"],
        "logical_nc_config": lnc,
    }


def neuron_config_kwargs(model: str | ModelSpec, shape: str | RunShape, variants: Iterable[str] = (),
                         output_logits: bool = False, on_cpu: bool = False, dtype: str | None = None
                         ) -> dict[str, Any]:
    """Keyword arguments for NxDI's ``NeuronConfig``: exactly what the reference runs compiled
    (tp 4, bf16, LNC 2, one bucket per sub-model, greedy on-device sampling, right padding), plus
    sharded weights saved with the artifact and the named optimisation ``variants``.
    ``on_device_sampling_config`` is a dict, which ``NeuronConfig`` turns into an
    ``OnDeviceSamplingConfig`` itself. The pad id is not a NeuronConfig argument (NeuronConfig logs
    it as unexpected and drops it): it goes to the inference config, see ``inference_config_kwargs``.

    ``output_logits`` builds the accuracy artifact: it all-gathers fp32 logits every step and copies
    them to the host, so speed is never measured on it. ``on_cpu`` makes the changes NxDI's CPU mode
    requires (``application_base.to_cpu``): tp 1 and one CTE bucket of ``seq_len``
    (``max_context_length == seq_len``); everything else stays the reference's. ``dtype`` (bf16, fp32):
    the torch_dtype, by default the reference runs' bf16 on a device and fp32 in CPU mode (whose logits
    then compare with the transformers fp32 reference at fp32's spread; CPU mode runs bf16 too)."""
    if isinstance(model, str):
        get_model(model)  # unknown names fail here, listing the known ones
    shape = get_shape(shape) if isinstance(shape, str) else shape
    kwargs: dict[str, Any] = {
        "tp_degree": shape.tp_degree,
        "batch_size": shape.batch_size,
        "ctx_batch_size": shape.batch_size,
        "max_context_length": shape.max_context_length,
        "seq_len": shape.seq_len,
        "max_length": shape.seq_len,
        "max_new_tokens": shape.max_new_tokens,
        "torch_dtype": "bfloat16",
        "logical_nc_config": 2,
        "enable_bucketing": True,
        "context_encoding_buckets": [shape.max_context_length],
        "token_generation_buckets": [shape.seq_len],
        "on_device_sampling_config": {"top_k": 1, "top_p": 1.0, "temperature": 1.0, "do_sample": False},
        "padding_side": "right",
        "fused_qkv": False,
        "save_sharded_checkpoint": True,
    }
    for name in check_compile_variants(variants):
        for key, value in COMPILE_VARIANTS[name].kwargs.items():
            if isinstance(value, dict):
                kwargs[key] = {**kwargs.get(key, {}), **value}
            else:
                kwargs[key] = value
    if output_logits:
        kwargs["output_logits"] = True
    if on_cpu:
        # NKI kernels are device code: the CTE flash-attention kernel the baseline selects at LNC 2
        # (see baseline_kernels) is replaced by NxDI's own PyTorch attention on the CPU.
        kwargs.update({"on_cpu": True, "tp_degree": 1, "max_context_length": shape.seq_len,
                       "context_encoding_buckets": [shape.seq_len], "torch_dtype": "float32",
                       "attn_kernel_enabled": False})
    if dtype is not None:
        if dtype not in TORCH_DTYPES:
            raise BackendError(f"dtype {dtype!r}: NeuronConfig's torch_dtype is one of {', '.join(TORCH_DTYPES)}")
        kwargs["torch_dtype"] = TORCH_DTYPES[dtype]
    return kwargs


def inference_config_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``LlamaInferenceConfig`` beyond the checkpoint's config.json: the pad
    id of the Carbon tokenizer (config.json has none), which NxDI's adapter and padding use."""
    return {"pad_token_id": PAD_TOKEN_ID}


def variant_env(variants: Iterable[str]) -> dict[str, str]:
    """Environment variables the variants need while compiling and running."""
    env: dict[str, str] = {}
    for name in check_compile_variants(variants):
        env.update(COMPILE_VARIANTS[name].env)
    return env


def nxdi_speculation_length(k: int) -> int:
    """NxDI's ``speculation_length`` for k draft tokens per step: the number of tokens the target
    verifies in one pass, ``last + k drafts`` = k + 1. The fused model runs the draft
    ``speculation_length`` times and feeds the target ``candidate_input_ids[:, :-1]``
    (model_base.py ``NeuronFusedSpecModel``); the unfused adapter pads the target's input to
    ``speculation_length`` and drafts ``num_assistant_tokens`` (utils/hf_adapter.py), which must be
    the same number."""
    return check_speculation_length(k) + 1


def neuron_speculation_kwargs(target: str | ModelSpec, draft: str | ModelSpec, shape: str | RunShape,
                              speculation_length: int = DEFAULT_SPECULATION_LENGTH, fused: bool = True,
                              draft_tp_degree: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(target_kwargs, draft_kwargs)`` for NxDI's ``NeuronConfig`` with ``speculation_length``
    draft tokens per step (the harness's k; NxDI counts k + 1, see ``nxdi_speculation_length``),
    as ``inference_demo.py`` ``run_inference`` builds them: the target gets ``speculation_length``
    and ``enable_fused_speculation`` (draft and target traced into one fused model); the draft is
    the target's config with ``speculation_length = 0`` and ``enable_fused_speculation = False``
    (and its own tp degree if given). Fused, the draft's ``InferenceConfig`` goes into
    ``FusedSpecNeuronConfig(worker_cls, draft_config=..., draft_model_path=...)``; unfused, the draft
    is its own ``NeuronLlamaForCausalLM`` passed to ``generate(assistant_model=...)``. Both keep
    the reference runs' kwargs (``harness.backends.neuron.config.neuron_config_kwargs``), whose greedy
    ``on_device_sampling_config`` fused speculation requires."""
    nxdi_length = nxdi_speculation_length(speculation_length)
    shape = get_shape(shape) if isinstance(shape, str) else shape
    target_spec = get_model(target) if isinstance(target, str) else target
    draft_spec = get_model(draft) if isinstance(draft, str) else draft
    if target_spec.vocab_size != draft_spec.vocab_size:
        raise SpeculativeError(f"draft {draft_spec.name} and target {target_spec.name} do not share a vocabulary")
    if draft_tp_degree is not None and (not isinstance(draft_tp_degree, int) or draft_tp_degree < 1):
        raise SpeculativeError(f"draft_tp_degree={draft_tp_degree!r} must be a positive integer")
    target_kwargs = neuron_config_kwargs(target_spec, shape)
    target_kwargs.update({"speculation_length": nxdi_length, "enable_fused_speculation": fused})
    draft_kwargs = neuron_config_kwargs(draft_spec, shape)
    draft_kwargs.update({"speculation_length": 0, "enable_fused_speculation": False})
    if draft_tp_degree is not None:
        draft_kwargs["tp_degree"] = draft_tp_degree
    return target_kwargs, draft_kwargs


def derive_draft_neuron_config(target_neuron_config: Any, draft_tp_degree: int | None = None) -> Any:
    """The draft's ``NeuronConfig`` derived from the target's, step for step as NxDI 0.9's
    ``inference_demo.py`` does (a deep copy with speculation off). It differs from
    ``NeuronConfig(**draft_kwargs)`` only in values ``NeuronConfig`` derives from the speculation
    flags (``kv_cache_tiling``, on for a fused target at seq_len % 128 == 0), which the copy keeps."""
    import copy

    draft = copy.deepcopy(target_neuron_config)
    draft.speculation_length = 0
    draft.enable_fused_speculation = False
    if draft_tp_degree is not None:
        draft.tp_degree = draft_tp_degree
    return draft


def scoring_neuron_config_kwargs(model: str | ModelSpec, shape: str | RunShape, variants: Sequence[str] = (),
                                 **options: Any) -> dict[str, Any]:
    """``NeuronConfig`` kwargs of a CTE-only artifact that returns logits: the generation
    artifact's kwargs (``neuron_config_kwargs``) with no decode room (seq_len = max_length =
    max_context_length, max_new_tokens 0, one TKG bucket at seq_len: NxDI still traces one) and no
    on-device sampling, so the context encoding's output *is* the logits. ``output_logits`` stays
    off: without on-device sampling it only appends a second, all-gathered copy of the same logits
    (``NeuronBaseModel.forward``), and NxDI 0.9's CPU mode then misreads its outputs as KV cache
    (IndexError in ``_copy_past_key_values``). Checked in NxDI's CPU mode on carbon-tiny: logits
    ``[B, 1, 155776]`` equal to transformers' fp32 last-position logits within 1e-6.
    ``options`` go to ``neuron_config_kwargs`` as they are (e.g. its CPU-mode switch, whose
    ``max_context_length == seq_len`` requirement this artifact already meets).

    With NxDI's stock Llama (models/model_base.py ``NeuronBaseModel.forward``) the context encoding
    gathers the hidden state of the last real position before the lm head, so these kwargs alone yield
    one row of logits per sequence; the scoring build (``harness.backends.neuron.scoring``) is built
    with them and keeps every position.
    """
    spec = get_model(model) if isinstance(model, str) else model
    shape = get_shape(shape) if isinstance(shape, str) else shape
    check_context(spec, shape)
    kwargs = neuron_config_kwargs(spec, shape, variants, **options)
    ctx = shape.max_context_length
    kwargs.update(seq_len=ctx, max_length=ctx, max_new_tokens=0, context_encoding_buckets=[ctx],
                  token_generation_buckets=[ctx], on_device_sampling_config=None)
    return kwargs
