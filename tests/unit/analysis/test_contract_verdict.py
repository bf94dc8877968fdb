"""What the output contract's verdict says of itself (``harness.analysis.contract``, ``threeway``): which leg
ran, decided by the candidate's dtype; which top-1 flip broke it; where the FNS marginals are most off; the
largest position its shapes reached. Real contracts of carbon-tiny at the smoke shape
(``fixtures/contract/threeway-*.json``: NxDI 0.9's CPU mode in bf16, its fp32 reference and bf16 yardstick),
changed in a copy only, and small hand-built rows."""

from __future__ import annotations

import pytest

from harness.analysis.contract import legs_note

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("baseline", ["fp32", "bf16"])
def test_a_bf16_candidate_is_the_bf16_leg_only_whatever_the_baselines_dtype(baseline):
    """An fp32 baseline is not an fp32 leg: the candidate is judged in bf16, held to bf16's rounding."""
    [note] = legs_note({"baseline": baseline, "candidate": "bf16"})
    assert "bf16 leg only: defects below bf16 rounding not excluded" in note
    assert "no fp32 leg ran" in note and "--dtype fp32" in note
    assert "the fp32 leg holds" not in note
    assert f"baseline {baseline}" in note and "candidate bf16" in note


def test_an_fp32_candidate_is_the_fp32_leg():
    [note] = legs_note({"baseline": "bf16", "candidate": "fp32"})
    assert "the fp32 leg holds each side to fp32's spread" in note
    assert "leg only" not in note and "no fp32 leg ran" not in note


def test_without_a_candidate_the_leg_is_fp32_only_where_every_side_ran_fp32():
    assert "the fp32 leg holds" in legs_note({"baseline": "fp32"})[0]
    assert "no fp32 leg ran" in legs_note({"baseline": "bf16"})[0]


from dataclasses import replace  # noqa: E402

from harness.analysis.threeway import Aligned, Criterion, spread  # noqa: E402
from harness.core.scored import ScoredToken  # noqa: E402

CRIT = Criterion("bf16", sigma_ratio=1.5, tier_factor={"5": 1.9, "50": 2.2, "1000": 2.0, "all": 1.8},
                 tie_factor=8.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4, margin_floor=1e-4,
                 position_ratio=3.0, pad_factor=3.0)
RANKS = tuple((100 + j, -0.5 - j * 0.01) for j in range(1000))  # every finite tier measured; margins 0.01


def ranked(values) -> ScoredToken:
    top = tuple(sorted(values, key=lambda t: -t[1]))
    return ScoredToken(100, dict(top)[100], top)


def yardstick(k: int) -> ScoredToken:
    return ranked((i, v + 1e-4 * (-1) ** (j + k)) for j, (i, v) in enumerate(RANKS))


def test_a_top1_flip_is_named_beside_a_top1000_tier_finding():
    """A flip at position 8, where a top-1000 id moved at position 7 already broke the top-1000 tier: the
    top-1 finding names the prompt, the flip's position, the reference's margin there, the allowance and the
    agreement over the checked positions (its prefix is not the tier's)."""
    late = tuple((i, v + (0.05 if j == 999 else 0.0)) for j, (i, v) in enumerate(RANKS))  # rank 1000 only
    flip = ((101, RANKS[0][1]), (100, RANKS[1][1]), *RANKS[2:])
    a = Aligned("own")
    for k, target in enumerate([ranked(late), ranked(flip), ranked(RANKS)]):
        a.rows.append(("GC-rich", 7 + k, target, ranked(RANKS), yardstick(k)))
    found = spread(a, replace(CRIT, sigma_ratio=1e9, position_ratio=1e9), 1.2e-3)
    names = [f.criterion for f in found.findings]
    assert "top-1000 log-prob tier (own)" in names, names
    [top1] = [f for f in found.findings if f.criterion == "top-1 agreement (own)"]
    assert (top1.prompt, top1.position) == ("GC-rich", 8)
    assert "agreement 2/3" in top1.detail and "margin of 0.01 nats" in top1.detail
    assert "near-tie allowance there 0.0012" in top1.detail, top1.detail
    assert top1.describe().endswith("(prompt GC-rich, first at position 8)")
