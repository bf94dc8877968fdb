"""The three-way rule on one side's rows: the side under test ("target"), the fp32 transformers reference
and the yardstick (transformers in the side's dtype, or for an fp32 side another fp32 path), all three
scoring the same token sequence position by position (``harness.analysis.contract`` holds the format).

Every bound is relative to what the yardstick does to the same positions, so a bf16 side is held to
what correct bf16 does to this model's logits (flat or peaked), and an fp32 side to fp32's spread:

- sigma ratio: sqrt(mean (target - reference)^2) / sqrt(mean (yardstick - reference)^2), over each
  position's token and the reference's top ``sigma_tokens`` (the same (position, id) set for both);
- tiers (as NxDI's logit validation: top-5 / 50 / 1000 / all): the largest |target - reference| over the
  reference's and the target's top-k ids, at most ``factor`` x the yardstick's largest over its own;
  "all" adds the contract's probe ids spread over the whole vocabulary;
- per position: each position's rms difference (its token and the reference's top ``sigma_tokens``)
  over the yardstick's there, floored by the yardstick's pooled sigma, at most ``position_ratio``: a
  defect confined to a few positions (a KV slot dropped late in decode) is diluted by the pooled sigma
  over every position of every prompt, never by this one; the verdict names where it is largest;
- signed bias (``harness.analysis.bias``): the paired t of the target's signed change to the reference's top-1
  log-prob and top-1 / top-2 margin less the yardstick's, per statistic, at most ``bias_t`` in size (bf16: a
  defect of rounding's size that pushes one way at every position, as RMSNorm kept in bf16 in decode does;
  fp32 has no bound: shown only);
- near-tie allowance: ``tie_factor`` x the largest change the yardstick makes to the reference's
  top-1 / top-2 margin, and at each position at most ``tie_position_factor`` x the change it makes there
  (floored by ``margin_floor``); a top-1 that differs from the reference's where the reference's margin is
  wider fails.

A yardstick's spread is floored (``sigma_floor``, ``margin_floor``): an fp32 yardstick can come out
near zero, and no stack is held to less than the spread correct fp32 stacks were measured to have.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.bias import signed_bias
from harness.core.scored import ScoredToken

TIERS = ("5", "50", "1000", "all")


@dataclass(frozen=True)
class Criterion:
    """The bounds for one dtype (``fixtures/contract/tolerances.json``; each derived in the calibration
    file beside it)."""

    dtype: str
    sigma_ratio: float
    tier_factor: Mapping[str, float]
    tie_factor: float
    fns_sigma_ratio: float
    sigma_floor: float  # nats rms: the least spread a yardstick is credited with
    abs_floor: float  # nats: the least largest-difference a yardstick is credited with (the tiers)
    margin_floor: float  # nats: the least margin noise
    position_ratio: float  # the largest per-position sigma ratio a correct stack may show (x headroom)
    pad_factor: float  # a padded row's per-position rms difference from its unpadded run, over the yardstick's
    # the near-tie allowance at one position: this x the yardstick's margin change there (floored by margin_floor),
    # never wider than the global allowance (the calibration's per_position_tie)
    tie_position_factor: float = math.inf
    sigma_tokens: int = 50
    bias_t: float = math.inf  # the largest |signed-bias t| (inf: shown, not gated; the calibration's signed_bias)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: an unbounded ``bias_t`` (shown, not gated) is null."""
        return self.__dict__ | {"tier_factor": dict(self.tier_factor),
                                "bias_t": self.bias_t if math.isfinite(self.bias_t) else None}


@dataclass(frozen=True)
class Finding:
    """One broken criterion, named with its prompt and first position (index in the token sequence)."""

    criterion: str
    prompt: str
    position: int | None
    detail: str
    at: str = "first"  # "first": where it first breaks; "largest": where a per-position figure peaks

    def describe(self) -> str:
        where = f"prompt {self.prompt}" + (f", {self.at} at position {self.position}" if self.position is not None
                                           else "")
        return f"{self.criterion}: {self.detail} ({where})"


@dataclass
class Aligned:
    """The three computations' rows of one sequence kind, prompt by prompt, position by position."""

    kind: str
    rows: list[tuple[str, int, ScoredToken, ScoredToken, ScoredToken]] = field(default_factory=list)
    fns: list[tuple[str, int, Sequence[float], Sequence[float], Sequence[float]]] = field(default_factory=list)


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


def delta(target: ScoredToken, reference: ScoredToken, token: int) -> float | None:
    """target - reference at ``token``; where the target did not report it but lists its top-N and the
    reference puts the token above the target's N-th, the least it can differ (a lower bound, signed)."""
    r = reference.value(token)
    if r is None:
        return None
    t = target.value(token)
    if t is not None:
        return t - r
    if target.top and r > target.top[-1][1]:
        return target.top[-1][1] - r
    return None


def tier_ids(row: ScoredToken, other: ScoredToken, tier: str) -> set[int]:
    if tier == "all":
        return {i for i, _ in row.top} | {i for i, _ in other.top} | {row.token}
    k = int(tier)
    return {i for i, _ in row.top[:k]} | {i for i, _ in other.top[:k]}


def tier_available(side: ScoredToken, tier: str, probes: bool) -> bool:
    if tier == "all":
        return probes
    return len(side.top) >= int(tier)


def _probe_deltas(a: ScoredToken, r: ScoredToken) -> list[float]:
    return [x - y for x, y in zip(a.probes, r.probes)] if a.probes and r.probes else []


@dataclass
class Spread:
    """The three-way figures of one sequence kind of one side."""

    kind: str
    positions: int
    sigma_target: float
    sigma_yardstick: float
    ratio: float
    tiers: dict[str, dict[str, Any]]
    tie_allowance: float
    top1_checked: int
    top1_agree: int
    fns_ratio: float | None = None
    position_ratio: float = 0.0  # the largest per-position sigma ratio
    position_at: tuple[str, int] | None = None  # (prompt, position) where it is largest
    target_margin_change: float = 0.0  # the largest change the target makes to the reference's margin
    # reported, not gated: the largest change the target makes to the reference's margin at one position over
    # the yardstick's change there (floored by ``margin_floor``), and where (the calibration's per-position tie)
    position_margin_ratio: float = 0.0
    position_margin_at: tuple[str, int] | None = None
    # shown, not gated (``harness.analysis.bias``): per statistic, the mean signed change of the target and the
    # yardstick to the reference's top-1 log-prob / top-1-top-2 margin, and the paired t of their difference
    bias: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "findings"}
        out["findings"] = [f.describe() for f in self.findings]
        return out


def margin_change(rows: Sequence[tuple[ScoredToken, ScoredToken]]) -> float:
    """The largest change ``a`` makes to ``r``'s top-1 / top-2 margin (r's two ids), over ``(a, r)`` rows."""
    worst = 0.0
    for a, r in rows:
        if len(r.top) < 2:
            continue
        (i1, v1), (i2, v2) = r.top[0], r.top[1]
        a1, a2 = a.value(i1), a.value(i2)
        if a1 is not None and a2 is not None:
            worst = max(worst, abs((a1 - a2) - (v1 - v2)))
    return worst


def margin_noise(aligned: Sequence[Aligned]) -> float:
    """The largest change the yardstick makes to the reference's top-1 / top-2 margin, over every
    position of every kind: how far correct rounding in the side's dtype moves a near-tie."""
    return margin_change([(y, r) for a in aligned for _, _, _, r, y in a.rows])


def yardstick_moves(a: Aligned, crit: Criterion) -> list[float]:
    """At each row, the change the yardstick makes to the reference's margin there, floored by ``margin_floor``:
    what one position's margin is held to (the per-position ratio and the near-tie allowance there)."""
    return [max(margin_change([(y, r)]), crit.margin_floor) for *_, r, y in a.rows]


def tie_at(moved: float, crit: Criterion, tie: float) -> float:
    """The near-tie allowance at one position: ``tie_position_factor`` x the yardstick's (floored) margin change
    there, at most the global allowance ``tie``. Where the yardstick's rounding barely moves a margin, a correct
    stack's seldom moves it far either (calibrated), so a top-1 flip there is held to less than the worst
    position's allowance."""
    return min(tie, crit.tie_position_factor * moved)


def spread(a: Aligned, crit: Criterion, tie: float) -> Spread:
    """The sigma ratio, the tiers and top-1 agreement of one kind, with the first position each breaks."""
    ids_sigma: list[tuple[str, int, list[float], list[float]]] = []
    for name, pos, t, r, y in a.rows:
        ids = {r.token} | {i for i, _ in r.top[:crit.sigma_tokens]}
        dt, dy = [], []
        for i in sorted(ids):
            d_t, d_y = delta(t, r, i), delta(y, r, i)
            if d_t is not None and d_y is not None:
                dt.append(d_t)
                dy.append(d_y)
        ids_sigma.append((name, pos, dt, dy))
    all_t = [v for *_, dt, _ in ids_sigma for v in dt]
    all_y = [v for *_, dy in ids_sigma for v in dy]
    sigma_t, sigma_y = _rms(all_t), _rms(all_y)
    floor_y = max(sigma_y, crit.sigma_floor)
    ratio = sigma_t / floor_y
    out = Spread(a.kind, len(a.rows), sigma_t, sigma_y, ratio, {}, tie, 0, 0,
                 target_margin_change=margin_change([(t, r) for _, _, t, r, _ in a.rows]),
                 bias=signed_bias([(t, r, y) for *_, t, r, y in a.rows]))
    moves = yardstick_moves(a, crit)
    margins = [(n, p, margin_change([(t, r)]) / moved)
               for (n, p, t, r, _), moved in zip(a.rows, moves) if len(r.top) > 1]
    if margins:
        name, pos, out.position_margin_ratio = max(margins, key=lambda x: x[2])
        out.position_margin_at = (name, pos)
    per_position = [(n, p, _rms(dt) / max(_rms(dy), floor_y)) for n, p, dt, dy in ids_sigma if dt]
    if per_position:
        name, pos, worst = max(per_position, key=lambda x: x[2])
        out.position_ratio, out.position_at = worst, (name, pos)
    if ratio > crit.sigma_ratio:
        # named where the position's own ratio peaks: where the defect is, not the first position whose
        # rounding happens to exceed the pooled bound
        name, pos = out.position_at or (a.rows[0][0], a.rows[0][1])
        value = next(_rms(dt) for n, p, dt, _ in ids_sigma if (n, p) == (name, pos))
        out.findings.append(Finding(f"sigma ratio ({a.kind})", name, pos,
                                    f"sigma(target - fp32) / sigma(yardstick - fp32) = {sigma_t:.3g} / {floor_y:.3g} "
                                    f"= {ratio:.3g} > {crit.sigma_ratio:g}; the position's rms difference "
                                    f"{value:.3g} nats", "largest"))
    if out.position_at is not None and out.position_ratio > crit.position_ratio:  # after the pooled one: a defect
        # spread over every position is named by the pooled sigma first, one confined to a few by this alone
        name, pos = out.position_at
        out.findings.append(Finding(f"per-position sigma ratio ({a.kind})", name, pos,
                                    f"rms(target - fp32) / rms(yardstick - fp32) at one position = "
                                    f"{out.position_ratio:.3g} > {crit.position_ratio:g} (pooled sigma ratio "
                                    f"{ratio:.3g})", "largest"))
    probes = all(t.probes and r.probes and y.probes for _, _, t, r, y in a.rows) and bool(a.rows)
    for tier in TIERS:
        if not a.rows or not all(tier_available(t, tier, probes) for _, _, t, _, _ in a.rows):
            out.tiers[tier] = {"measured": False}
            continue
        worst_t, worst_y, first = 0.0, 0.0, None
        per_pos = []
        for name, pos, t, r, y in a.rows:
            dt = [abs(d) for i in tier_ids(r, t, tier) if (d := delta(t, r, i)) is not None]
            dy = [abs(d) for i in tier_ids(r, y, tier) if (d := delta(y, r, i)) is not None]
            if tier == "all":
                dt += [abs(d) for d in _probe_deltas(t, r)]
                dy += [abs(d) for d in _probe_deltas(y, r)]
            per_pos.append((name, pos, max(dt, default=0.0)))
            worst_t, worst_y = max(worst_t, *dt, 0.0), max(worst_y, *dy, 0.0)
        floor = max(worst_y, crit.abs_floor)
        bound = crit.tier_factor[tier] * floor
        if worst_t > bound:
            first = next((n, p, v) for n, p, v in per_pos if v > bound)
            label = f"top-{tier}" if tier != "all" else "all-vocabulary (top-1000 and probes)"
            out.findings.append(Finding(f"{label} log-prob tier ({a.kind})", first[0], first[1],
                                        f"|target - fp32| up to {worst_t:.3g} nats > {crit.tier_factor[tier]:g} x the "
                                        f"yardstick's {floor:.3g}; {first[2]:.3g} there"))
        out.tiers[tier] = {"measured": True, "target": worst_t, "yardstick": worst_y, "bound": bound,
                           "ratio": worst_t / floor}
    flip = None  # the first top-1 that differs beyond the near-tie there: named with its margin and allowance
    for (name, pos, t, r, _), moved in zip(a.rows, moves):
        allow = tie_at(moved, crit, tie)
        if len(r.top) > 1 and r.margin > allow:
            out.top1_checked += 1
            if t.top[0][0] == r.top[0][0]:
                out.top1_agree += 1
            elif flip is None:
                flip = (name, pos, f"top-1 {t.top[0][0]} where the fp32 reference has {r.top[0][0]} by a margin of "
                                   f"{r.margin:.3g} nats (> the near-tie allowance there {allow:.3g}; {tie:.3g} "
                                   "anywhere)")
    if flip is not None:
        out.findings.append(Finding(f"top-1 agreement ({a.kind})", flip[0], flip[1],
                                    f"agreement {out.top1_agree}/{out.top1_checked}; {flip[2]}"))
    if a.fns:
        ft = [x - y for _, _, t, r, _ in a.fns for x, y in zip(t, r)]
        fy = [x - y for _, _, _, r, y in a.fns for x, y in zip(y, r)]
        floor_f = max(_rms(fy), crit.sigma_floor)
        out.fns_ratio = _rms(ft) / floor_f
        if out.fns_ratio > crit.fns_sigma_ratio:  # named where its own ratio peaks, as the sigma ratio is:
            # each position over the yardstick there, floored by the pooled yardstick (not its noisiest position)
            per = [(n, p, _rms([x - w for x, w in zip(t, r)]), _rms([x - w for x, w in zip(y, r)]))
                   for n, p, t, r, y in a.fns]
            name, pos, value, there = max(per, key=lambda x: x[2] / max(x[3], floor_f))
            out.findings.append(Finding(f"FNS sigma ratio ({a.kind})", name, pos,
                                        f"per-base log-marginals: sigma ratio {out.fns_ratio:.3g} > "
                                        f"{crit.fns_sigma_ratio:g}; {value / max(there, floor_f):.3g} at its largest "
                                        f"position (rms difference {value:.3g} nats over the yardstick's "
                                        f"{max(there, floor_f):.3g})", "largest"))
    out.findings += bias_findings(a, out.bias, crit)  # last: a gross defect is named by its sigma ratio first
    return out


BIAS_LABELS = {"top1_logprob": "top-1 log-prob", "margin": "top-1 / top-2 margin"}


def bias_findings(a: Aligned, bias: Mapping[str, Mapping[str, Any]], crit: Criterion) -> list[Finding]:
    """The signed-bias statistic whose |t| is largest, where it exceeds ``bias_t``: named at the row whose paired
    difference lies furthest in its direction (the bias is every position's; that row is where it is largest)."""
    over = [(k, b) for k, b in bias.items() if abs(b["t"]) > crit.bias_t and b.get("at") is not None]
    if not over:
        return []
    key, b = max(over, key=lambda kb: abs(kb[1]["t"]))
    name, pos, *_ = a.rows[b["at"]]
    return [Finding(f"signed bias ({a.kind})", name, pos,
                    f"the {BIAS_LABELS[key]}'s mean change {b['target']:+.3g} nats against the yardstick's "
                    f"{b['yardstick']:+.3g} over {b['n']} positions: paired t {b['t']:+.3g}, beyond ±{crit.bias_t:g}; "
                    f"{b['largest']:+.3g} nats more than the yardstick's here", "largest")]


@dataclass
class PaddedSpread:
    """A side's padded (or batched) rows against its own unpadded single-run rows, position by position."""

    positions: int
    ratio: float  # the largest per-position rms(padded - unpadded) / the yardstick's rounding there
    at: tuple[str, int] | None
    findings: list[Finding] = field(default_factory=list)
    what: str = "padded-row log-probs (cut)"  # which rows, against which: the finding's criterion

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "positions": self.positions, "ratio": self.ratio,
                "at": list(self.at) if self.at else None, "findings": [f.describe() for f in self.findings]}


def padded_spread(rows: Sequence[tuple[str, int, ScoredToken, ScoredToken, ScoredToken, ScoredToken]],
                  crit: Criterion, what: str = "padded-row log-probs (cut)") -> PaddedSpread:
    """``rows``: (prompt, position, padded, unpadded, reference, yardstick). A padded row runs other kernel
    shapes than the unpadded one, so it may differ by rounding: at most ``pad_factor`` x what the yardstick's
    rounding does at that position (floored by its pooled sigma over the rows and ``sigma_floor``), over
    the position's token and the reference's top ``sigma_tokens``. A decode that ignores the padding mask
    attends to pad slots and moves every later position by far more, even where the greedy tokens survive."""
    per: list[tuple[str, int, float, float]] = []
    for name, pos, padded, unpadded, r, y in rows:
        ids = sorted({r.token} | {i for i, _ in r.top[:crit.sigma_tokens]})
        dp = [d for i in ids if (d := delta(padded, unpadded, i)) is not None]
        dy = [d for i in ids if (d := delta(y, r, i)) is not None]
        if dp:
            per.append((name, pos, _rms(dp), _rms(dy)))
    pooled = max(_rms([v for *_, _, v in per]), crit.sigma_floor)
    ratios = [(n, p, d / max(y, pooled)) for n, p, d, y in per]
    if not ratios:
        return PaddedSpread(0, 0.0, None, what=what)
    name, pos, worst = max(ratios, key=lambda x: x[2])
    out = PaddedSpread(len(ratios), worst, (name, pos), what=what)
    if worst > crit.pad_factor:
        out.findings.append(Finding(what, name, pos,
                                    f"rms({what.split('-row')[0]} - unpadded single run) over the yardstick's "
                                    f"rounding there = {worst:.3g} > "
                                    f"{crit.pad_factor:g}", "largest"))
    return out


def iter_rows(prompt: Mapping[str, Any], kind: str) -> Iterator[tuple[int, ScoredToken]]:
    seq = prompt["sequences"][kind]
    for j, row in enumerate(seq["rows"]):
        yield seq["from"] + j, ScoredToken.from_list(row)
