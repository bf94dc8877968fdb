"""The signed-bias statistic of the output contract's bf16 leg (gated at ``bias_t`` where calibrated, else
shown beside the sigma ratio): does the side move the reference's top-1 log-probability, and its top-1 / top-2 margin, one way
more than correct rounding in its dtype does?

Why: a defect that computes a statistic in bf16 (RMSNorm in decode, an fp8 KV cache, a logit rounded toward
zero) adds a difference of about the yardstick's size, so its sigma ratio sits at the bf16 bound; but it
pushes the same way at every position (flattening the distribution), where rounding does not. Per position,
the side's signed change less the yardstick's (both against the reference, on the reference's own top-1 and
top-2 ids) cancels what both roundings share (the bf16 weights); the mean of that paired difference over its
standard error is a t statistic (issue 56: RMSNorm in bf16 t = -3.3, KV fp8 -3.4, lm_head rounding -6.0, against
|t| <= 1.4 for correct stacks, measured offline). Positions in one sequence are not independent, so the t is
a yardstick for calibration, not a p-value: its bound is the largest |t| of the zoo's correct bf16 stacks times
a headroom (``harness.release.zoo_report``), never a significance level.

Why not a decode-phase sigma ratio instead: transformers and NxDI score every row after the first through decode
steps (``Engine.continuation_logits``: a prefill of the rows' prefix, then one decode step per token), so a
decode-only defect is not diluted by prefill positions in their pooled sigma ratio; nothing is left to
un-dilute. What keeps such a defect at the sigma bound is its size (about bf16 rounding's), not its phase."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.core.scored import ScoredToken

STATISTICS = ("top1_logprob", "margin")


def _changes(a: ScoredToken, r: ScoredToken) -> tuple[float, float] | None:
    """``a``'s change to the reference's top-1 log-probability and to its top-1 / top-2 margin (None: ``a``
    does not hold both of the reference's ids)."""
    (i1, v1), (i2, v2) = r.top[0], r.top[1]
    a1, a2 = a.value(i1), a.value(i2)
    if a1 is None or a2 is None:
        return None
    return a1 - v1, (a1 - a2) - (v1 - v2)


def paired_t(diffs: Sequence[float]) -> float:
    """mean / standard error of ``diffs`` (0 where they are all zero; +-inf where they are all one value)."""
    n = len(diffs)
    if n < 2:
        return 0.0
    mean = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0.0:
        return 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    return mean / (sd / math.sqrt(n))


def signed_bias(rows: Sequence[tuple[ScoredToken, ScoredToken, ScoredToken]]) -> dict[str, dict[str, Any]]:
    """``rows``: (target, reference, yardstick) at each position. Per statistic: the target's and the
    yardstick's mean signed change, the paired t of their difference, the positions it read, and ``at``: the
    index into ``rows`` whose paired difference lies furthest in the t's direction (where a finding names it)."""
    pairs = [(j, t_, y_) for j, (t, r, y) in enumerate(rows) if len(r.top) > 1
             and (t_ := _changes(t, r)) is not None and (y_ := _changes(y, r)) is not None]
    out = {}
    for k, name in enumerate(STATISTICS):
        dt, dy = [t[k] for _, t, _ in pairs], [y[k] for _, _, y in pairs]
        diffs = [a - b for a, b in zip(dt, dy)]
        n, t_ = len(pairs), paired_t(diffs)
        at = max(range(n), key=lambda i: math.copysign(1.0, t_) * diffs[i]) if n else None
        out[name] = {"target": math.fsum(dt) / n if n else 0.0, "yardstick": math.fsum(dy) / n if n else 0.0,
                     "t": t_, "n": n, "at": pairs[at][0] if at is not None else None,
                     "largest": diffs[at] if at is not None else 0.0}
    return out
