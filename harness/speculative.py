"""Speculative decoding: a draft model proposes k greedy tokens, the target verifies them in one
forward pass over its KV cache, and the longest agreeing prefix plus the target's own next token
is kept, so the output is exactly the target's greedy output whatever the draft proposes.

Three parts, each usable alone:

* the math (pure): accepted prefixes, the expected tokens per verification step
  ``(1 - a**(k+1)) / (1 - a)`` and the speedup it buys for a draft/target step-time ratio;
* the transformers side: the harness's own draft-then-verify loop on two ``HFEngine`` s
  (``speculative_generate``, batched) and transformers' ``assistant_model`` assisted decoding
  (``assisted_generate``, batch 1 only, as transformers allows);
* the NxDI side (pure): the ``NeuronConfig`` kwargs of a target with a draft, as NxDI 0.9's
  ``inference_demo.py`` builds them (``speculation_length``, ``enable_fused_speculation``, the draft's
  own config with speculation switched off). NxDI's CPU mode rejects speculation, so running it is
  Trainium-only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.backends.base import BackendError, Batch, Engine
from harness.measure import Summary, Timer, throughput
from harness.spec import ModelSpec, RunShape, get_model, get_shape

DEFAULT_SPECULATION_LENGTH = 4
SELF_DRAFT = "self"  # the target is its own draft: acceptance exactly 1.0
EMBEDDED_DRAFTS = ("carbon-tiny-draft", SELF_DRAFT)  # the embedded default's pairings (acceptance ~0 and 1.0)
# The figures every speculative benchmark reports (also gate metric names, see harness.gates.METRICS).
SPEC_FIGURES = ("spec_acceptance_rate", "spec_tokens_per_step", "spec_draft_ms_per_step", "spec_verify_ms_per_step",
                "spec_speedup", "tokens_per_s", "bp_per_s")
# All speculative runs are batch-1 generations at this compiled shape (ctx 256, seq 512): a 512 bp prompt
# (87 tokens) + 256 new tokens + the draft tokens, and the DNA suite's 1080 bp (181 tokens) + 180, both fit.
SPEC_SHAPE = "dna-suite-bs1"


class SpeculativeError(ValueError):
    """An impossible speculative setting (speculation length, acceptance); the message names the value."""


# ---------------------------------------------------------------------------------------------
# The math
# ---------------------------------------------------------------------------------------------

def check_speculation_length(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpeculativeError(f"speculation length {k!r} must be a positive integer (draft tokens per step)")
    return k


def check_acceptance(a: float) -> float:
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
        raise SpeculativeError(f"acceptance rate {a!r} must be a number in [0, 1]")
    return float(a)


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """Tokens one verification step yields when each draft token is accepted with probability
    ``acceptance`` independently (Leviathan et al. 2023): ``(1 - a**(k+1)) / (1 - a)``; k + 1 at a = 1."""
    a, k = check_acceptance(acceptance), check_speculation_length(k)
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(acceptance: float, k: int, draft_ms: float, verify_ms: float, target_ms: float) -> float:
    """Speedup over the target alone: tokens per step over the step's time (k draft steps and one
    verification), in units of one target decode step."""
    for name, value in (("draft_ms", draft_ms), ("verify_ms", verify_ms), ("target_ms", target_ms)):
        if not value > 0:
            raise SpeculativeError(f"{name}={value!r} must be positive")
    step_ms = k * draft_ms + verify_ms
    return expected_tokens_per_step(acceptance, k) * target_ms / step_ms


def accepted_prefix(drafts: torch.Tensor, predictions: torch.Tensor) -> torch.Tensor:
    """Per row, how many leading draft tokens [B, k] the target's greedy predictions [B, >= k] agree with."""
    k = drafts.shape[1]
    if k == 0:
        return torch.zeros(drafts.shape[0], dtype=torch.long)
    agree = (drafts == predictions[:, :k].to(drafts.device)).long()
    return agree.cumprod(dim=1).sum(dim=1)


# ---------------------------------------------------------------------------------------------
# The harness's own draft-then-verify loop (transformers engines)
# ---------------------------------------------------------------------------------------------

@dataclass
class SpeculativeResult:
    """Tokens and timings of one speculative generation of a batch."""

    tokens: torch.Tensor  # [B, new]
    speculation_length: int
    cte_ms: float  # target and draft prefill
    e2e_ms: float
    draft_ms: list[float] = field(default_factory=list)  # per verification step
    verify_ms: list[float] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)  # draft tokens proposed per step, all rows
    accepted: list[int] = field(default_factory=list)  # of those, accepted by the target (each row's own prefix)
    advanced: list[int] = field(default_factory=list)  # tokens every row advanced by per step (shortest prefix + 1)

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def new_tokens(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def steps(self) -> int:
        return len(self.verify_ms)

    @property
    def acceptance_rate(self) -> float:
        """Accepted over proposed draft tokens (the ``a`` of the speedup formula)."""
        proposed = sum(self.proposed)
        return sum(self.accepted) / proposed if proposed else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Tokens per row per verification step, the target's own token included (1 to k + 1)."""
        return sum(self.advanced) / self.steps if self.steps else 0.0


def combine_results(results: Sequence[SpeculativeResult]) -> SpeculativeResult:
    """One result for several generations run one after another (the DNA suite's cases at batch 1):
    tokens stacked by row, times added, per-step records pooled."""
    if not results:
        raise ValueError("no speculative generation to combine")
    if len({r.new_tokens for r in results}) != 1:
        raise ValueError(f"generations of different lengths {sorted({r.new_tokens for r in results})} cannot be combined")
    combined = SpeculativeResult(torch.cat([r.tokens for r in results]), results[0].speculation_length,
                                 sum(r.cte_ms for r in results), sum(r.e2e_ms for r in results))
    for r in results:
        combined.draft_ms += r.draft_ms
        combined.verify_ms += r.verify_ms
        combined.proposed += r.proposed
        combined.accepted += r.accepted
        combined.advanced += r.advanced
    return combined


def _synchronizer(engine: Engine) -> Callable[[], None] | None:
    device = getattr(engine, "device", None)
    if isinstance(device, torch.device) and device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


def check_pair(target: Engine, draft: Engine) -> None:
    """Both engines must expose multi-token verification and share the vocabulary and device."""
    for role, engine in (("target", target), ("draft", draft)):
        if not (hasattr(engine, "extend_logits") and hasattr(engine, "rewind")):
            raise BackendError(f"the {role} engine ({engine.info.backend}) cannot verify draft tokens in one pass; "
                               "the harness's speculative loop runs on the hf backend")
    if target is draft:
        raise BackendError("the draft must be its own engine (its own KV cache), even when it is the target's model")
    tv, dv = target.model.config.vocab_size, draft.model.config.vocab_size
    if tv != dv:
        raise BackendError(f"draft {draft.info.model} has vocab_size {dv}, target {target.info.model} {tv}: "
                           "a draft must share the target's tokenizer")
    if str(target.device) != str(draft.device):
        raise BackendError(f"draft on {draft.device}, target on {target.device}: both must be on one device")


def speculative_generate(target: Engine, draft: Engine, batch: Batch, max_new_tokens: int,
                         speculation_length: int = DEFAULT_SPECULATION_LENGTH) -> SpeculativeResult:
    """Exactly ``max_new_tokens`` greedy tokens per row, token-identical to ``target.generate``.

    Each step the draft proposes k tokens (fewer at the end), the target scores ``last + drafts``
    in one forward pass, and every row advances by the batch's shortest agreeing prefix + the
    target's token there: that token follows a prefix every row verified, so rows stay aligned
    (right padding and position ids as in ``HFEngine``) and nothing unverified is ever emitted.
    Rejected positions are dropped from both KV caches.
    """
    k = check_speculation_length(speculation_length)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
    check_pair(target, draft)
    target.check_batch(batch, max_new_tokens)
    draft.check_batch(batch, max_new_tokens)
    sync = _synchronizer(target)
    result = SpeculativeResult(torch.empty(0), k, 0.0, 0.0)
    out: list[torch.Tensor] = []
    with Timer(sync) as total:
        with Timer(sync) as cte:
            last = target.prefill_logits(batch).argmax(dim=-1)
            draft.prefill_logits(batch)
        out.append(last.unsqueeze(1))
        generated = 1
        pending = last.new_empty(batch.size, 0)  # tokens the draft's cache still lacks, before ``last``
        while generated < max_new_tokens:
            k_step = min(k, max_new_tokens - generated - 1)
            with Timer(sync) as drafting:
                proposals: list[torch.Tensor] = []
                if k_step:
                    feed = torch.cat([pending, last.unsqueeze(1)], dim=1)
                    proposals.append(draft.extend_logits(feed)[:, -1].argmax(dim=-1))
                    for _ in range(k_step - 1):
                        proposals.append(draft.decode_logits(proposals[-1]).argmax(dim=-1))
                    pending = last.new_empty(batch.size, 0)
                else:
                    pending = torch.cat([pending, last.unsqueeze(1)], dim=1)
                drafts = torch.stack(proposals, dim=1) if proposals else last.new_empty(batch.size, 0)
            with Timer(sync) as verifying:
                predictions = target.extend_logits(torch.cat([last.unsqueeze(1), drafts], dim=1)).argmax(dim=-1)
                agreed = accepted_prefix(drafts, predictions)
                m = int(agreed.min())
                target.rewind(k_step - m)
                if k_step:
                    if m < k_step:
                        draft.rewind(k_step - 1 - m)  # the draft fed drafts[:, :k_step - 1]; keep drafts[:, :m]
                    else:
                        pending = drafts[:, -1:]  # all accepted: the draft never fed its last proposal
            last = predictions[:, m]
            out.append(torch.cat([drafts[:, :m], last.unsqueeze(1)], dim=1))
            generated += m + 1
            result.draft_ms.append(drafting.ms)
            result.verify_ms.append(verifying.ms)
            result.proposed.append(k_step * batch.size)
            result.accepted.append(int(agreed.sum()))
            result.advanced.append(m + 1)
    result.tokens = torch.cat(out, dim=1)[:, :max_new_tokens].cpu()
    result.cte_ms, result.e2e_ms = cte.ms, total.ms
    return result


# ---------------------------------------------------------------------------------------------
# transformers' assisted decoding (``generate(assistant_model=...)``)
# ---------------------------------------------------------------------------------------------

def assisted_generation_config(max_new_tokens: int, speculation_length: int, pad_token_id: int) -> Any:
    """Greedy, EOS off (the published eos id 2 is a BPE token), a constant ``num_assistant_tokens``
    and no confidence cut-off, so transformers drafts exactly k tokens per step like the harness."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                            eos_token_id=None, pad_token_id=pad_token_id, bos_token_id=None,
                            num_assistant_tokens=check_speculation_length(speculation_length),
                            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)


@dataclass
class AssistedResult:
    tokens: torch.Tensor  # [1, new]
    e2e_ms: float


def assisted_generate(target: Engine, draft: Engine | None, batch: Batch, max_new_tokens: int,
                      speculation_length: int = DEFAULT_SPECULATION_LENGTH) -> AssistedResult:
    """``target.model.generate(..., assistant_model=draft.model)`` (or without a draft: the same
    generate loop alone, the fair baseline). transformers runs assisted decoding at batch 1 only."""
    from harness.tokenizer import PAD_TOKEN_ID

    if batch.size != 1:
        raise BackendError(f"transformers' assisted decoding runs batch 1 only, got a batch of {batch.size}")
    target.check_batch(batch, max_new_tokens)
    config = assisted_generation_config(max_new_tokens, speculation_length, PAD_TOKEN_ID)
    kwargs: dict[str, Any] = {}
    if draft is not None:
        check_pair(target, draft)
        kwargs["assistant_model"] = draft.model
        # transformers reads the draft length from the assistant's own generation config
        for key in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
            setattr(draft.model.generation_config, key, getattr(config, key))
    ids = batch.input_ids.to(target.device)
    mask = batch.attention_mask.to(target.device)
    with torch.inference_mode(), Timer(_synchronizer(target)) as total:
        out = target.model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **kwargs)
    return AssistedResult(out[:, ids.shape[1]:].cpu(), total.ms)


# ---------------------------------------------------------------------------------------------
# Benchmark cases: the seeds' four T4 configurations and the DNA suite
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpecCase:
    """A speculative workload. ``cpu_new_tokens``: the CPU-sized length (an unrelated draft makes
    every token cost k draft steps, so the reference lengths would take minutes on a CPU): 6 is the
    prefill's token and one full step of k = 4, 11 two full steps."""

    name: str
    prompt_bp: int
    new_tokens: int
    cpu_new_tokens: int

    def tokens_for(self, hardware_kind: str) -> int:
        return self.cpu_new_tokens if hardware_kind == "cpu" else self.new_tokens


# The T4 devlog's configurations (Carbon-3B with the 500M draft: 0.87-0.90x with assistant_model).
T4_CASES = (
    SpecCase("128bp-64new", 128, 64, 6),
    SpecCase("128bp-256new", 128, 256, 11),
    SpecCase("512bp-64new", 512, 64, 6),
    SpecCase("512bp-256new", 512, 256, 11),
)
DNA_SUITE_CASE = SpecCase("dna-suite", 1080, 180, 6)


def gate_shape(draft_label: str) -> str:
    """The shape name speculative figures are gated under: one per draft (``speculative-self``...)."""
    return f"speculative-{draft_label}"


def spec_shape() -> RunShape:
    return get_shape(SPEC_SHAPE)


def speculative_figures(results: Sequence[SpeculativeResult], target_e2e_ms: Sequence[float]) -> dict[str, float]:
    """The figures of repeated speculative generations of one batch, against the target alone on the
    same prompts (its e2e times, measured in the same session)."""
    if not results or not target_e2e_ms:
        raise ValueError("no speculative generation or no target-alone baseline was measured")
    first = results[0]
    e2e = Summary.of([r.e2e_ms for r in results]).p50
    target = Summary.of(list(target_e2e_ms)).p50
    draft = [ms for r in results for ms in r.draft_ms if ms > 0]
    return {
        "spec_acceptance_rate": first.acceptance_rate,
        "spec_tokens_per_step": first.tokens_per_step,
        "spec_steps": first.steps,
        "spec_draft_ms_per_step": Summary.of(draft).p50 if draft else 0.0,
        "spec_verify_ms_per_step": Summary.of([ms for r in results for ms in r.verify_ms]).p50,
        "e2e_ms_p50": e2e,
        "target_e2e_ms_p50": target,
        "tokens_per_s": throughput(first.batch_size * first.new_tokens, e2e),
        "target_tokens_per_s": throughput(first.batch_size * first.new_tokens, target),
        "spec_speedup": target / e2e,
    }


# ---------------------------------------------------------------------------------------------
# Planning: does a pairing pay off before booking hardware?
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpecPlan:
    """Predicted speculative speedup of a draft/target pair from memory-bound decode floors."""

    target: str
    draft: str
    hardware: str
    tp_degree: int
    speculation_length: int
    acceptance: float
    target_tkg_floor_ms: float
    draft_tkg_floor_ms: float
    verify_floor_ms: float
    step_time_ratio: float  # draft step / target step
    expected_tokens_per_step: float
    speedup: float
    break_even_acceptance: float | None  # the lowest acceptance at which the pairing pays (None: never)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def break_even_acceptance(k: int, ratio: float, verify_ratio: float = 1.0) -> float | None:
    """The acceptance rate where the speedup reaches 1 (bisection: speedup grows with acceptance)."""
    def speedup(a: float) -> float:
        return expected_tokens_per_step(a, k) / (k * ratio + verify_ratio)

    if speedup(1.0) <= 1.0:
        return None
    if speedup(0.0) >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(mid) < 1.0 else (lo, mid)
    return hi


def reference_step_ms(thresholds: Sequence[Any], hardware: str, model: str, shape: str) -> float | None:
    """A model's reference TKG p50 (the ``baseline`` of its ``tkg_ms_p50`` threshold), if there is one:
    small models are not memory-bound on Trainium (Carbon-500M's measured step is ~half Carbon-3B's,
    not the 15% its weights suggest), so the plan shows the speedup at measured step times too."""
    from harness.gates import select

    t = select(thresholds, hardware, model, shape, "tkg_ms_p50")
    return t.baseline if t is not None and t.model == model and t.hardware == hardware else None


def plan_speculation(target: ModelSpec | str, draft: ModelSpec | str, shape: RunShape | str, hardware: Any,
                     acceptance: float, speculation_length: int = DEFAULT_SPECULATION_LENGTH,
                     tp_degree: int | None = None, dtype: str = "bf16") -> SpecPlan:
    """Speedup predicted from the memory-bound TKG floors of ``harness.plan`` (each model's decode
    step reads all its weights and its KV cache once; the verification step reads the target's once
    for all k + 1 tokens, which is why it costs about one target step while decoding is memory-bound)."""
    from harness.plan import make_plan, memory_floor_ms

    target = get_model(target) if isinstance(target, str) else target
    draft = get_model(draft) if isinstance(draft, str) else draft
    shape = get_shape(shape) if isinstance(shape, str) else shape
    k = check_speculation_length(speculation_length)
    a = check_acceptance(acceptance)
    if draft.vocab_size != target.vocab_size:
        raise SpeculativeError(f"draft {draft.name} has vocab {draft.vocab_size}, target {target.name} "
                               f"{target.vocab_size}: they must share the tokenizer")
    t_plan = make_plan(target, shape, hardware, tp_degree=tp_degree, dtype=dtype)
    d_plan = make_plan(draft, shape, hardware, tp_degree=tp_degree, dtype=dtype)
    if t_plan.tkg_floor_ms is None or d_plan.tkg_floor_ms is None:
        raise SpeculativeError(f"hardware profile {hardware.name!r} has no memory bandwidth: pass one that has")
    # The verification step reads the weights once and k extra positions of KV (the cache grows by k + 1).
    from harness.plan import kv_cache_bytes

    extra_kv = kv_cache_bytes(target, shape.batch_size, k, t_plan.sharding.num_kv_heads, dtype)
    verify_ms = t_plan.tkg_floor_ms + (memory_floor_ms(extra_kv, hardware.memory_bandwidth_gbps) or 0.0)
    ratio = d_plan.tkg_floor_ms / t_plan.tkg_floor_ms
    speedup = predicted_speedup(a, k, d_plan.tkg_floor_ms, verify_ms, t_plan.tkg_floor_ms)
    return SpecPlan(target.name, draft.name, hardware.name, t_plan.tp_degree, k, a, t_plan.tkg_floor_ms,
                    d_plan.tkg_floor_ms, verify_ms, ratio, expected_tokens_per_step(a, k), speedup,
                    break_even_acceptance(k, ratio, verify_ms / t_plan.tkg_floor_ms))


# ---------------------------------------------------------------------------------------------
# NxDI 0.9: NeuronConfig kwargs of a target with a draft (pure; the run is Trainium-only)
# ---------------------------------------------------------------------------------------------

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
    the reference runs' kwargs (``harness.backends.neuron.neuron_config_kwargs``), whose greedy
    ``on_device_sampling_config`` fused speculation requires."""
    from harness.backends.neuron import neuron_config_kwargs

    spec_len = nxdi_speculation_length(speculation_length)
    shape = get_shape(shape) if isinstance(shape, str) else shape
    target_spec = get_model(target) if isinstance(target, str) else target
    draft_spec = get_model(draft) if isinstance(draft, str) else draft
    if target_spec.vocab_size != draft_spec.vocab_size:
        raise SpeculativeError(f"draft {draft_spec.name} and target {target_spec.name} do not share a vocabulary")
    if draft_tp_degree is not None and (not isinstance(draft_tp_degree, int) or draft_tp_degree < 1):
        raise SpeculativeError(f"draft_tp_degree={draft_tp_degree!r} must be a positive integer")
    target_kwargs = neuron_config_kwargs(target_spec, shape)
    target_kwargs.update({"speculation_length": spec_len, "enable_fused_speculation": fused})
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


def neuron_speculation_unavailable_reason(hardware_kind: str) -> str | None:
    """Why NxDI speculation cannot run here (None on a Neuron host)."""
    if hardware_kind != "neuron":
        return ("NxDI speculation runs on Trainium only: its CPU mode raises 'Speculation is not yet supported "
                "for CPU inference' (application_base.py); run with --carbon-backend neuron on a Trn2 host")
    return None

