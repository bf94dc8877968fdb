"""Planning before compiling: GQA sharding as NxDI does it, HBM fit per rank, roofline floors.

``attention_sharding`` reproduces NxDI 0.9's ``determine_sharding_strategy`` and
``get_shardable_head_counts`` (modules/attention/gqa.py) so the harness can predict, and then
check against the live compile log, when a Carbon size falls back to CONVERT_TO_MHA and what the
replicated KV heads cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.core.hardware import HardwareProfile
from harness.core.spec import SCORING_SHAPES, ModelSpec, RunShape
from harness.core.vocab import NUM_KMERS

REPLICATE = "replicate-to-tp-degree"
CONVERT_TO_MHA = "convert-to-mha"
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}


class PlanError(ValueError):
    """An impossible plan (bad tp degree, unknown dtype); the message names the value."""


@dataclass(frozen=True)
class AttentionSharding:
    strategy: str
    num_heads: int  # attention heads after padding to a multiple of tp
    num_kv_heads: int  # KV heads after replication / conversion
    fallback: bool  # True when NxDI overrides the strategy to CONVERT_TO_MHA (and logs it)
    tp_degree: int
    source_heads: int
    source_kv_heads: int


def extra_heads(num_heads: int, tp_degree: int) -> int:
    """neuronx-distributed ``parallel_layers/pad.py: get_number_of_extra_heads``."""
    return 0 if num_heads % tp_degree == 0 else tp_degree - num_heads % tp_degree


def attention_sharding(num_heads: int, num_kv_heads: int, tp_degree: int) -> AttentionSharding:
    """NxDI 0.9 ``modules/attention/gqa.py``, rule for rule:

    * ``determine_sharding_strategy``: REPLICATE_TO_TP_DEGREE unless ``tp % kv != 0``, then
      CONVERT_TO_MHA with the warning "Overriding attention sharding strategy to GQA.CONVERT_TO_MHA".
    * ``get_shardable_head_counts``: heads padded to a multiple of tp; MHA keeps kv = heads; for
      GQA, only when ``kv < tp`` or ``kv % tp != 0`` are KV heads changed: replicated to tp
      (REPLICATE) or set to the padded head count (CONVERT_TO_MHA).

    So at tp=4 Carbon-500M and -8B (8 KV heads) take the fallback *strategy*, yet 8 % 4 == 0
    leaves their 8 KV heads as they are: the fallback is logged but costs no KV bytes there.
    """
    for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("tp_degree", tp_degree)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PlanError(f"{name}={value!r} must be a positive integer")
    if num_heads % num_kv_heads:
        raise PlanError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    fallback = tp_degree % num_kv_heads != 0
    strategy = CONVERT_TO_MHA if fallback else REPLICATE
    padded = num_heads + extra_heads(num_heads, tp_degree)
    kv = num_kv_heads
    if num_heads == num_kv_heads:
        kv = padded
    elif num_kv_heads < tp_degree or num_kv_heads % tp_degree != 0:
        kv = tp_degree if strategy == REPLICATE else padded
    return AttentionSharding(strategy, padded, kv, fallback, tp_degree, num_heads, num_kv_heads)


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise PlanError(f"dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def decode_weight_bytes(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Weights one decode step reads: every layer plus the lm head (the embedding lookup touches
    only a few rows; with tied embeddings the lm head *is* the embedding matrix)."""
    lookup = 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size
    return (spec.num_parameters - lookup) * dtype_bytes(dtype)


def kv_cache_bytes(spec: ModelSpec, batch_size: int, tokens: int, kv_heads: int | None = None,
                   dtype: str = "bf16") -> int:
    """K and V for every layer, for ``tokens`` positions of ``batch_size`` rows."""
    heads = spec.num_key_value_heads if kv_heads is None else kv_heads
    return 2 * spec.num_hidden_layers * heads * spec.head_dim * tokens * batch_size * dtype_bytes(dtype)


def tkg_step_bytes(spec: ModelSpec, batch_size: int, context_tokens: float, dtype: str = "bf16",
                   kv_heads: int | None = None) -> float:
    """What one decode step must read from memory at a given context length."""
    return decode_weight_bytes(spec, dtype) + kv_cache_bytes(spec, batch_size, 1, kv_heads, dtype) * context_tokens


def memory_floor_ms(nbytes: float, bandwidth_gbps: float | None) -> float | None:
    """The fastest a step that must read ``nbytes`` can be at this bandwidth (None if unknown)."""
    return None if not bandwidth_gbps else nbytes / (bandwidth_gbps * 1e9) * 1000.0


def tkg_roofline_fraction(step_bytes: float, bandwidth_gbps: float | None, measured_ms: float) -> float | None:
    """Memory-bound floor of a decode step over its measured time: 1.0 is the physical limit."""
    floor_ms = memory_floor_ms(step_bytes, bandwidth_gbps)
    return None if floor_ms is None or measured_ms <= 0 else floor_ms / measured_ms


def forward_flops(spec: ModelSpec, tokens: int, context: int) -> float:
    """Matmul FLOPs of a forward pass over ``tokens`` new positions attending to ``context``."""
    h, d, layers = spec.hidden_size, spec.head_dim, spec.num_hidden_layers
    q, kv = spec.num_attention_heads * d, spec.num_key_value_heads * d
    per_token_linear = 2 * layers * (h * q + 2 * h * kv + q * h + 3 * h * spec.intermediate_size)
    lm_head = 2 * h * spec.vocab_size
    attention = 2 * 2 * layers * spec.num_attention_heads * d * context  # QK^T and PV
    return tokens * (per_token_linear + attention) + lm_head  # one lm head row per sequence in prefill


@dataclass(frozen=True)
class Plan:
    """Per-rank memory and roofline floors of one model x shape x hardware x tp."""

    model: str
    shape: str
    hardware: str
    tp_degree: int
    dtype: str
    sharding: AttentionSharding
    weight_bytes_per_rank: float
    kv_bytes_per_rank: float
    kv_bytes_model_heads_per_rank: float  # the same cache with the model's own KV heads: the sharding's cost
    hbm_bytes_per_rank: float | None
    fits: bool | None
    cte_floor_ms: float | None
    tkg_floor_ms: float | None
    # Scoring shapes and long context (harness.workloads.scoring): the model's max positions (with any rope
    # scaling asked for), whether the shape's positions fit them, and the logits the scoring build
    # writes at every position (its 6-mer head in fp32, gathered onto every rank; 0 for generation).
    max_position_embeddings: int = 0
    context_tokens: int = 0
    context_fits: bool = True
    logits_bytes_per_rank: float = 0.0
    rope_scaling: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def context_message(self) -> str:
        return context_message(self.model, self.shape, self.context_tokens, self.max_position_embeddings,
                               self.rope_scaling)

    def unfit_message(self) -> str:
        gib = 2**30
        return (f"{self.model} at tp={self.tp_degree} on {self.hardware} does not fit: weights "
                f"{self.weight_bytes_per_rank / gib:.2f} GiB + KV {self.kv_bytes_per_rank / gib:.2f} GiB "
                + (f"+ scoring logits {self.logits_bytes_per_rank / gib:.2f} GiB " if self.logits_bytes_per_rank else "")
                + f"per rank > {self.hbm_bytes_per_rank / gib:.2f} GiB HBM per rank")


def make_plan(spec: ModelSpec, shape: RunShape, hardware: HardwareProfile, tp_degree: int | None = None,
              dtype: str = "bf16") -> Plan:
    tp = tp_degree or shape.tp_degree
    if hardware.logical_cores and tp > hardware.logical_cores:
        raise PlanError(f"tp_degree={tp} exceeds the {hardware.logical_cores} logical cores of {hardware.name}")
    sharding = attention_sharding(spec.num_attention_heads, spec.num_key_value_heads, tp)
    nbytes = dtype_bytes(dtype)
    # Padded heads add q/o columns and replicated KV heads k/v rows; every rank holds 1/tp of them.
    h, d = spec.hidden_size, spec.head_dim
    extra_heads = sharding.num_heads - spec.num_attention_heads
    extra_kv = max(0, sharding.num_kv_heads - spec.num_key_value_heads)
    padding = spec.num_hidden_layers * (2 * extra_heads * d * h + 2 * extra_kv * d * h) * nbytes
    weight_per_rank = (spec.num_parameters * nbytes + padding) / tp
    kv_per_rank = kv_cache_bytes(spec, shape.batch_size, shape.seq_len, sharding.num_kv_heads, dtype) / tp
    kv_unsharded = kv_cache_bytes(spec, shape.batch_size, shape.seq_len, spec.num_key_value_heads, dtype) / tp
    hbm = hardware.per_core(hardware.memory_bytes)
    scoring = shape.name in SCORING_SHAPES
    # The scoring build (backends/neuron/scoring.py): an lm head of the NUM_KMERS 6-mer rows at every
    # position, fp32 (NxDI casts logits to float), all-gathered (no on-device sampling) onto every rank.
    logits_per_rank = float(shape.batch_size * shape.max_context_length * NUM_KMERS * 4) if scoring else 0.0
    fits = None if hbm is None else (weight_per_rank + kv_per_rank + logits_per_rank) <= hbm
    # The same decode-step bytes as the measured tkg_roofline_fraction (figures.roofline), plus padding.
    context = shape.max_context_length + shape.max_new_tokens / 2
    step_bytes = tkg_step_bytes(spec, shape.batch_size, context, dtype, sharding.num_kv_heads) + padding
    # Floors at the bandwidth and compute of the cores this tp degree runs on, not the whole instance's.
    tkg_floor = memory_floor_ms(step_bytes, hardware.bandwidth_gbps(tp))
    peak = hardware.bf16_tflops(tp)
    cte_floor = None
    if peak:
        flops = shape.batch_size * forward_flops(spec, shape.max_context_length, shape.max_context_length)
        if scoring:  # the 6-mer head at every position instead of the full head at the last
            flops += shape.batch_size * 2 * spec.hidden_size * (shape.max_context_length * NUM_KMERS - spec.vocab_size)
        cte_floor = flops / (peak * 1e12) * 1000.0
    return Plan(spec.name, shape.name, hardware.name, tp, dtype, sharding, weight_per_rank, kv_per_rank, kv_unsharded, hbm,
                fits, cte_floor, tkg_floor, spec.max_position_embeddings, shape.seq_len,
                shape.seq_len <= spec.max_position_embeddings, logits_per_rank,
                spec.rope_scaling.to_config() if spec.rope_scaling else None)


def check_plan(plan: Plan) -> None:
    """Stop before compiling or running a shape the model's positions or the device cannot hold."""
    if not plan.context_fits:
        raise PlanError(plan.context_message())
    if plan.fits is False:
        raise PlanError(plan.unfit_message())


def check_context(spec: ModelSpec, shape: RunShape) -> None:
    """The positions check alone (no hardware profile needed): a shape longer than the model's
    max_position_embeddings would run on RoPE positions it was never trained or scaled for."""
    if shape.seq_len > spec.max_position_embeddings:
        raise PlanError(context_message(spec.name, shape.name, shape.seq_len, spec.max_position_embeddings,
                                        spec.rope_scaling.to_config() if spec.rope_scaling else None))


def context_message(model: str, shape: str, positions: int, max_positions: int,
                    rope_scaling: dict[str, Any] | None) -> str:
    if rope_scaling is None:
        factor = -(-positions // max_positions)
        hint = f"; extend it with YaRN (--rope-scaling yarn:{max(2, factor)}) or use a shorter shape"
    else:
        hint = f" even with rope scaling {rope_scaling}; use a larger factor or a shorter shape"
    return f"{model} / {shape}: {positions} positions exceed the model's max_position_embeddings={max_positions}{hint}"
