"""Token and logit matching between a candidate engine and a reference engine on one checkpoint.

Tolerances and method follow neuronx-distributed's ``logit_validation`` (behind NxDI's
``check_accuracy_logits``): at every generated position a constant shift is removed (the least-
squares shift, i.e. the mean difference; softmax ignores it), then for each k of the tolerance map
the candidate's logits on the reference's top-k tokens must satisfy
``(|actual - expected| - atol) / max|expected top-k|  <= rtol`` (rounded to rtol's digits, as
``custom_allclose`` does). Where the greedy tokens differ, the candidate's score gap between its
choice and the expected token must be a near-tie: below ``divergence_difference_tol``, or, as newer
NxD releases allow, below one ULP of the candidate's dtype at that logit's magnitude (bf16: 7
mantissa bits). Positions are teacher-forced on the reference's tokens, which is what NxD's
re-feeding loop amounts to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.backends.base import Batch, Engine

# neuronx-distributed utils/accuracy.py DEFAULT_TOLERANCE_MAP and DEFAULT_DIVERGENCE_DIFFERENCE_TOLERANCE
DEFAULT_TOL_MAP: dict[int | None, tuple[float, float]] = {None: (1e-5, 0.05), 1000: (1e-5, 0.03), 50: (1e-5, 0.02),
                                                          5: (1e-5, 0.01)}
DEFAULT_DIVERGENCE_TOL = 0.001
MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, "bf16": 7, "fp16": 10, "fp32": 23}


def ulp(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Spacing of floating-point numbers with ``mantissa_bits`` at the magnitude of ``x``."""
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - mantissa_bits)


def decimals(tol: float) -> int:
    """Digits past the decimal point of a tolerance (``custom_allclose`` rounds errors to them)."""
    text = f"{tol:.12f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


@dataclass(frozen=True)
class AccuracyReport:
    positions: int
    top1_agreement: float  # fraction of positions where the candidate's greedy token is the reference's
    first_divergence: int | None  # first generated index (row-major) whose greedy tokens differ
    max_divergence_difference: float
    max_errors: dict[str, float]  # "top5" / "all" -> worst normalised error
    max_abs_error: float  # on the reference's top-5 logits, after the shift
    max_rel_error: float
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        head = "passed" if self.passed else "FAILED"
        errs = ", ".join(f"{k} {v:.3g}" for k, v in self.max_errors.items())
        text = (f"accuracy {head}: {self.positions} positions, top-1 agreement {self.top1_agreement:.3f}, "
                f"first divergence {self.first_divergence}, max divergence gap {self.max_divergence_difference:.3g}, "
                f"max errors {errs}")
        return text + ("" if self.passed else "; " + "; ".join(self.failures[:5]))


def compare_logits(expected: torch.Tensor, actual: torch.Tensor, tol_map: dict | None = None,
                   divergence_tol: float | None = None, mantissa_bits: int = 23) -> AccuracyReport:
    """Compare two stacks of logits ``[N, V]`` position by position; ``mantissa_bits`` is the
    candidate dtype's (7 for bf16) for the ULP allowance on near-tie divergences."""
    if expected.shape != actual.shape:
        raise ValueError(f"logit shapes differ: expected {tuple(expected.shape)}, actual {tuple(actual.shape)}")
    tol_map = DEFAULT_TOL_MAP if tol_map is None else tol_map
    divergence_tol = DEFAULT_DIVERGENCE_TOL if divergence_tol is None else divergence_tol
    expected, actual = expected.double(), actual.double()
    exp_top1, act_top1 = expected.argmax(-1), actual.argmax(-1)
    agree = exp_top1 == act_top1
    shifted = actual - (actual - expected).mean(-1, keepdim=True)
    order = expected.argsort(dim=-1, descending=True)
    failures: list[str] = []
    max_errors: dict[str, float] = {}
    for k, (atol, rtol) in tol_map.items():
        idx = order if k is None else order[:, :k]
        exp_k = expected.gather(-1, idx)
        err = ((shifted.gather(-1, idx) - exp_k).abs() - atol).amax(-1) / exp_k.abs().amax(-1).clamp_min(1e-12)
        name = "all" if k is None else f"top{k}"
        max_errors[name] = float(err.max())
        for pos in torch.nonzero(torch.round(err, decimals=decimals(rtol)) > rtol).flatten().tolist()[:3]:
            failures.append(f"position {pos}: {name} error {float(err[pos]):.4g} > rtol {rtol}")
    act_at_expected = actual.gather(-1, exp_top1[:, None])[:, 0]
    gap = (actual.gather(-1, act_top1[:, None])[:, 0] - act_at_expected).abs()
    allowed = torch.maximum(torch.full_like(gap, divergence_tol), ulp(act_at_expected, mantissa_bits))
    for pos in torch.nonzero(~agree & (gap > allowed)).flatten().tolist()[:3]:
        failures.append(f"position {pos}: diverged (candidate token {int(act_top1[pos])}, expected "
                        f"{int(exp_top1[pos])}, score gap {float(gap[pos]):.4g} > {float(allowed[pos]):.4g})")
    top5 = order[:, :5]
    abs_err = (shifted.gather(-1, top5) - expected.gather(-1, top5)).abs()
    rel_err = abs_err / expected.gather(-1, top5).abs().clamp_min(1e-12)
    diverged = torch.nonzero(~agree).flatten()
    return AccuracyReport(
        positions=int(expected.shape[0]),
        top1_agreement=float(agree.double().mean()),
        first_divergence=int(diverged[0]) if diverged.numel() else None,
        max_divergence_difference=float(gap.max()) if gap.numel() else 0.0,
        max_errors=max_errors,
        max_abs_error=float(abs_err.max()),
        max_rel_error=float(rel_err.max()),
        failures=failures,
    )


def check_accuracy(reference: Engine, candidate: Engine, batch: Batch, num_tokens: int, tol_map: dict | None = None,
                   divergence_tol: float | None = None) -> AccuracyReport:
    """Greedy-generate ``num_tokens`` with the reference, then compare both engines' logits on them."""
    expected_tokens = reference.generate(batch, num_tokens).tokens
    expected = reference.continuation_logits(batch, expected_tokens)
    actual = candidate.continuation_logits(batch, expected_tokens)
    bits = MANTISSA_BITS.get(candidate.info.dtype, 23)
    return compare_logits(expected, actual, tol_map, divergence_tol, mantissa_bits=bits)
