"""Model specs, run shapes and artifact keys: the names every other module agrees on.

Specs and shapes are frozen dataclasses so they can key caches and be hashed into artifact keys;
every lookup by name fails with the list of known names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.core.vocab import VOCAB_SIZE


class SpecError(ValueError):
    """An unknown name or an impossible shape; the message names the value and what is accepted."""


@dataclass(frozen=True)
class ModelSpec:
    """A Carbon architecture as published in config.json (DESIGN.md, "Model configs")."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    tie_word_embeddings: bool
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    vocab_size: int = VOCAB_SIZE
    hf_name: str = ""
    seed: int = 0  # default seed of its synthetic checkpoint (a draft must not share its target's weights)
    rope_scaling: "RopeScaling | None" = None  # a context extension asked for (None: the published config)
    trained: bool = False  # its checkpoint is the seeded init trained on Markov DNA (harness.carbon.training)

    def with_rope_scaling(self, scaling: "RopeScaling | None") -> "ModelSpec":
        """This architecture with ``scaling`` in its config and the extended max positions."""
        if scaling is None:
            return self
        return replace(self, rope_scaling=scaling, max_position_embeddings=scaling.max_position_embeddings)

    def at_checkpoint_positions(self, config: Mapping[str, Any]) -> "ModelSpec":
        """This architecture with a checkpoint's own max positions and YaRN scaling (its config.json):
        a context-extended checkpoint (``carbon-harness checkpoint --rope-scaling``) holds more
        positions than the published config, and a plan must count the ones the checkpoint has."""
        positions = config.get("max_position_embeddings")
        scaling = config.get("rope_scaling")
        rope = None
        if isinstance(scaling, Mapping) and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
            rope = RopeScaling(float(scaling["factor"]),
                               int(scaling.get("original_max_position_embeddings") or self.max_position_embeddings))
        return replace(self, rope_scaling=rope, max_position_embeddings=positions if isinstance(positions, int)
                       and positions > 0 else self.max_position_embeddings)

    def hf_config(self) -> dict[str, Any]:
        """The published config.json fields (bos 1 / eos 2 are the Llama defaults it ships)."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling.to_config() if self.rope_scaling else None,
            "tie_word_embeddings": self.tie_word_embeddings,
            "vocab_size": self.vocab_size,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "initializer_range": 0.02,
            "pretraining_tp": 1,
            "torch_dtype": "bfloat16",
            "use_cache": True,
        }

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight of the transformers Llama state dict, in a fixed order."""
        h, f, d = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_key_value_heads * d
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for i in range(self.num_hidden_layers):
            p = f"model.layers.{i}."
            shapes.update({
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (f, h),
                p + "mlp.up_proj.weight": (f, h),
                p + "mlp.down_proj.weight": (h, f),
            })
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    @property
    def num_parameters(self) -> int:
        total = 0
        for shape in self.tensor_shapes().values():
            n = 1
            for s in shape:
                n *= s
            total += n
        return total

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of all weights, with the tied lm head counted once (as stored)."""
        return self.num_parameters * dtype_bytes


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE context extension as transformers reads it from config.json (``rope_scaling``).

    Only YaRN: the seeds' long-context extension ("65,536 tokens (~393 kbp) with YaRN factor=4").
    ``original_max_position_embeddings`` defaults to the model's native max positions, as in
    transformers (and Qwen's cards); the extended window is original x factor, the ratio
    transformers' YaRN check expects. The card's Carbon-3B figures (native 32,768, factor 4, 65,536)
    are not that ratio; ``yarn:4:16384`` reproduces its 65,536 literally.
    """

    factor: float
    original_max_position_embeddings: int
    rope_type: str = "yarn"

    @property
    def max_position_embeddings(self) -> int:
        return int(round(self.original_max_position_embeddings * self.factor))

    def to_config(self) -> dict[str, Any]:
        return {"rope_type": self.rope_type, "factor": self.factor,
                "original_max_position_embeddings": self.original_max_position_embeddings}


ROPE_SCALING_FORMAT = "yarn:FACTOR or yarn:FACTOR:ORIGINAL_MAX_POSITIONS (e.g. yarn:4)"


def parse_rope_scaling(value: str, spec: "ModelSpec") -> RopeScaling:
    """``yarn:4`` (original = the model's native max positions) or ``yarn:4:16384``."""
    parts = value.strip().lower().split(":")
    if parts[0] != "yarn" or len(parts) not in (2, 3):
        raise SpecError(f"rope scaling {value!r}: expected {ROPE_SCALING_FORMAT}")
    try:
        factor = float(parts[1])
    except ValueError:
        raise SpecError(f"rope scaling {value!r}: factor {parts[1]!r} is not a number; "
                        f"expected {ROPE_SCALING_FORMAT}") from None
    if not 1.0 < factor <= 64.0:
        raise SpecError(f"rope scaling {value!r}: factor {factor:g} must be > 1 and <= 64")
    original = spec.max_position_embeddings
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise SpecError(f"rope scaling {value!r}: original max positions {parts[2]!r} must be a positive integer")
        original = int(parts[2])
    return RopeScaling(factor, original)


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("carbon-500m", 1024, 28, 16, 8, 64, 3072, True, 500000.0, 1e-6, 8192, hf_name="Carbon-500M"),
        ModelSpec("carbon-3b", 3072, 30, 32, 4, 96, 8448, True, 5000000.0, 1e-6, 32768, hf_name="Carbon-3B"),
        ModelSpec("carbon-8b", 4096, 32, 32, 8, 128, 14336, False, 5000000.0, 1e-5, 32768, hf_name="Carbon-8B"),
        # The embedded default: Carbon's vocabulary and tokenizer, tiny dims, GQA kept (4 heads, 2 KV heads),
        # head_dim 64 as Carbon-500M (vLLM's CPU attention rejects 16); hidden 64 keeps the lm head small.
        ModelSpec("carbon-tiny", 64, 2, 4, 2, 64, 128, True, 500000.0, 1e-6, 8192, hf_name="Carbon-tiny"),
        # The embedded default's speculative draft: same vocabulary and tokenizer, one layer and half the
        # hidden size (the tied lm head dominates a tiny model's step, so a draft must shrink it to be cheaper),
        # its own seed so that its weights are unrelated to carbon-tiny's (acceptance ~0).
        ModelSpec("carbon-tiny-draft", 32, 1, 2, 1, 64, 64, True, 500000.0, 1e-6, 8192, hf_name="Carbon-tiny-draft",
                  seed=1),
        # carbon-tiny trained a few minutes on seeded Markov DNA: logits peaked as a trained model's, where a
        # random init's are flat (the output contract is calibrated on both)
        ModelSpec("carbon-tiny-trained", 64, 2, 4, 2, 64, 128, True, 500000.0, 1e-6, 8192,
                  hf_name="Carbon-tiny-trained", trained=True),
    )
}
DEFAULT_MODEL = "carbon-tiny"


def get_model(name: str) -> ModelSpec:
    key = name.lower()
    for spec in MODELS.values():
        if key in (spec.name, spec.hf_name.lower()):
            return spec
    raise SpecError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")


@dataclass(frozen=True)
class RunShape:
    """A compiled run shape, with the reference runs' names and values."""

    name: str
    batch_size: int
    max_context_length: int
    seq_len: int
    max_new_tokens: int
    tp_degree: int = 4
    prompt_bp: int | None = None  # DNA prompts of this many bp (None: the context length in tokens)
    # the output contract adds a text-and-DNA prompt filling the context, decoded to the end of seq_len
    long_prompt: bool = False

    def __post_init__(self) -> None:
        for attr in ("batch_size", "max_context_length", "seq_len", "max_new_tokens", "tp_degree"):
            value = getattr(self, attr)
            if not isinstance(value, int) or value < 1:
                raise SpecError(f"shape {self.name!r}: {attr}={value!r} must be a positive integer")
        if self.max_context_length > self.seq_len:
            raise SpecError(
                f"shape {self.name!r}: max_context_length={self.max_context_length} exceeds seq_len={self.seq_len}"
            )

    def validate_request(self, prompt_tokens: int, max_new_tokens: int, batch_size: int = 1) -> None:
        """Reject a request the compiled shape cannot hold, before anything runs."""
        if batch_size > self.batch_size:
            raise SpecError(f"batch of {batch_size} prompts exceeds shape {self.name!r} batch_size={self.batch_size}")
        if prompt_tokens > self.max_context_length:
            raise SpecError(
                f"prompt of {prompt_tokens} tokens exceeds shape {self.name!r} "
                f"max_context_length={self.max_context_length}"
            )
        if prompt_tokens + max_new_tokens > self.seq_len:
            raise SpecError(
                f"prompt of {prompt_tokens} tokens + {max_new_tokens} new tokens = {prompt_tokens + max_new_tokens} "
                f"exceeds shape {self.name!r} seq_len={self.seq_len}"
            )


SHAPES: dict[str, RunShape] = {
    s.name: s
    for s in (
        RunShape("report-bs1", batch_size=1, max_context_length=256, seq_len=512, max_new_tokens=180, prompt_bp=1080),
        RunShape("smoke", batch_size=1, max_context_length=32, seq_len=160, max_new_tokens=128, prompt_bp=180),
        RunShape("a100-style-bs16", batch_size=16, max_context_length=256, seq_len=512, max_new_tokens=170,
                 prompt_bp=1020),
        RunShape("dna-suite-bs1", batch_size=1, max_context_length=256, seq_len=512, max_new_tokens=180,
                 prompt_bp=1080),
        # the output contract's long shape (issue 47): prompts filling a 64-token context, batches of 2 of mixed
        # lengths, and a text-and-DNA prompt decoded to the last position of the sequence
        RunShape("contract-long", batch_size=2, max_context_length=64, seq_len=192, max_new_tokens=128,
                 prompt_bp=372, long_prompt=True),
        # Scoring (prefill only, logits at every position; max_new_tokens is RunShape's minimum, unused):
        # VEP batches of windows up to 1,530 bp, and long-context scans of <dna> + up to 6 x (ctx - 1) bp.
        RunShape("vep-bs8", batch_size=8, max_context_length=256, seq_len=256, max_new_tokens=1, prompt_bp=1530),
        RunShape("scan-cpu", batch_size=1, max_context_length=512, seq_len=512, max_new_tokens=1, prompt_bp=3066),
        RunShape("scan-8k", batch_size=1, max_context_length=8192, seq_len=8192, max_new_tokens=1, prompt_bp=49146),
        RunShape("scan-32k", batch_size=1, max_context_length=32768, seq_len=32768, max_new_tokens=1,
                 prompt_bp=196602),
        RunShape("scan-64k", batch_size=1, max_context_length=65536, seq_len=65536, max_new_tokens=1,
                 prompt_bp=393210),
    )
}
# Prefill-only workloads (harness.workloads.scoring): no decode, logits at every position.
SCORING_SHAPES = frozenset({"vep-bs8", "scan-cpu", "scan-8k", "scan-32k", "scan-64k"})


def get_shape(name: str) -> RunShape:
    if name not in SHAPES:
        raise SpecError(f"unknown shape {name!r}; known shapes: {', '.join(SHAPES)}")
    return SHAPES[name]


@dataclass(frozen=True)
class ArtifactKey:
    """What a compiled or built artifact depends on; its digest names the cache directory."""

    checkpoint: str  # fingerprint of the checkpoint's files
    shape: dict[str, Any]
    backend: str
    versions: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:24]


def artifact_key(checkpoint_fingerprint: str, shape: RunShape, backend: str,
                 versions: dict[str, str] | None = None, **options: Any) -> ArtifactKey:
    """A stable key: same checkpoint, shape, backend, versions and options give the same digest."""
    return ArtifactKey(checkpoint_fingerprint, asdict(shape), backend, dict(versions or {}), dict(options))
