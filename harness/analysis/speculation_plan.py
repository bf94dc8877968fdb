"""Planning a speculative pairing before booking hardware: the speedup a draft/target pair can buy
at an acceptance rate, from the memory-bound decode floors of ``harness.core.plan`` (and, where the
thresholds carry one, from measured reference step times), and the acceptance it breaks even at."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.core.spec import ModelSpec, RunShape, get_model, get_shape
from harness.core.speculation import (
    DEFAULT_SPECULATION_LENGTH,
    SpeculativeError,
    check_acceptance,
    check_speculation_length,
    expected_tokens_per_step,
    predicted_speedup,
)


@dataclass(frozen=True)
class SpeculationPlan:
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
    from harness.analysis.gates import select

    t = select(thresholds, hardware, model, shape, "tkg_ms_p50")
    return t.baseline if t is not None and t.model == model and t.hardware == hardware else None


def plan_speculation(target: ModelSpec | str, draft: ModelSpec | str, shape: RunShape | str, hardware: Any,
                     acceptance: float, speculation_length: int = DEFAULT_SPECULATION_LENGTH,
                     tp_degree: int | None = None, dtype: str = "bf16") -> SpeculationPlan:
    """Speedup predicted from the memory-bound TKG floors of ``harness.core.plan`` (each model's decode
    step reads all its weights and its KV cache once; the verification step reads the target's once
    for all k + 1 tokens, which is why it costs about one target step while decoding is memory-bound)."""
    from harness.core.plan import kv_cache_bytes, make_plan, memory_floor_ms

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
    extra_kv = kv_cache_bytes(target, shape.batch_size, k, t_plan.sharding.num_kv_heads, dtype)
    verify_ms = t_plan.tkg_floor_ms + (memory_floor_ms(extra_kv, hardware.bandwidth_gbps(t_plan.tp_degree)) or 0.0)
    ratio = d_plan.tkg_floor_ms / t_plan.tkg_floor_ms
    speedup = predicted_speedup(a, k, d_plan.tkg_floor_ms, verify_ms, t_plan.tkg_floor_ms)
    return SpeculationPlan(target.name, draft.name, hardware.name, t_plan.tp_degree, k, a, t_plan.tkg_floor_ms,
                    d_plan.tkg_floor_ms, verify_ms, ratio, expected_tokens_per_step(a, k), speedup,
                    break_even_acceptance(k, ratio, verify_ms / t_plan.tkg_floor_ms))


@dataclass(frozen=True)
class ReferenceSpeedup:
    """The prediction at the reference runs' measured TKG p50 of both models, and which of the two
    predictions (memory floors, reference) stands for the plan asked for, with why."""

    target_ms: float
    draft_ms: float
    reference_tp: int  # the tp degree the reference steps were measured at (the shape's)
    plan_tp: int
    speedup: float
    break_even_acceptance: float | None
    floors_at_reference_tp: float  # the memory floors' prediction at the reference tp, beside the measured one

    @property
    def applies(self) -> bool:
        return self.plan_tp == self.reference_tp

    def to_dict(self) -> dict[str, Any]:
        return {"target_tkg_ms_p50": self.target_ms, "draft_tkg_ms_p50": self.draft_ms,
                "step_time_ratio": self.draft_ms / self.target_ms, "speedup": self.speedup,
                "break_even_acceptance": self.break_even_acceptance, "tp_degree": self.reference_tp,
                "applies": self.applies, "stands": "reference" if self.applies else "memory floors"}

    def lines(self, sp: SpeculationPlan) -> list[str]:
        even = (f"{self.break_even_acceptance:.2f}" if self.break_even_acceptance is not None
                else "none (the draft's step is too slow to ever pay)")
        pair = f"{sp.target} {self.target_ms:g} ms, {sp.draft} {self.draft_ms:g} ms"
        if self.applies:
            return [f"    at the reference TKG p50 ({pair}, ratio {self.draft_ms / self.target_ms:.3f}, measured at "
                    f"tp={self.reference_tp}): predicted speedup {self.speedup:.2f}x; break-even acceptance {even}",
                    f"    this figure stands ({self.speedup:.2f}x): the memory floors take every step as memory-bound, "
                    f"and the measured draft step is {self.draft_ms / self.target_ms:.3f} of the target's, not "
                    f"{sp.step_time_ratio:.3f}"]
        return [f"    no reference TKG p50 at tp={self.plan_tp}: the reference ({pair}) was measured at "
                f"tp={self.reference_tp}, and another tp moves each step differently",
                f"    the memory-floor figure stands ({sp.speedup:.2f}x), as an optimistic one: at tp={self.reference_tp} "
                f"the floors predict {self.floors_at_reference_tp:.2f}x and the measured steps {self.speedup:.2f}x; a "
                f"tp={self.plan_tp} baseline settles it (carbon-harness thresholds --from RUN.json)"]


def reference_speedup(thresholds: Sequence[Any], sp: SpeculationPlan, shape: RunShape | str,
                      hardware: Any) -> ReferenceSpeedup | None:
    """The prediction at both models' reference TKG p50 (fixtures/thresholds baselines for this
    hardware and shape; the verification taken as one target step, memory-bound), or None where
    either is missing. The reference steps were measured at the shape's tp degree: at another one
    (trn2.48xlarge at tp=8) they do not apply, and the result says so."""
    shape = get_shape(shape) if isinstance(shape, str) else shape
    target_ms = reference_step_ms(thresholds, hardware.name, sp.target, shape.name)
    draft_ms = reference_step_ms(thresholds, hardware.name, sp.draft, shape.name)
    if target_ms is None or draft_ms is None:
        return None
    speedup = predicted_speedup(sp.acceptance, sp.speculation_length, draft_ms, target_ms, target_ms)
    floors = (sp if sp.tp_degree == shape.tp_degree else
              plan_speculation(sp.target, sp.draft, shape, hardware, sp.acceptance, sp.speculation_length,
                               tp_degree=shape.tp_degree))
    return ReferenceSpeedup(target_ms, draft_ms, shape.tp_degree, sp.tp_degree, speedup,
                            break_even_acceptance(sp.speculation_length, draft_ms / target_ms), floors.speedup)
