"""Each bound of the three-way rule (``harness.analysis.threeway.spread``) as a user reads it: a figure exactly at
its calibrated bound passes (the bound is the largest a correct stack may show, as a gate's max is) and one a hair
past it fails; a finding names the first position beyond the bound, never one at it; the signed-bias finding names
the statistic whose |t| is the larger. Small hand-built rows, as in ``test_threeway`` (issue 57, generated mutants:
each ``>`` read as ``>=`` survived)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.threeway import Aligned, spread
from tests.unit.analysis.test_contract_verdict import RANKS, ranked
from tests.unit.analysis.test_threeway import CRIT, NO_TIERS, REFERENCE, row, sequence_with_one_bad_position
from tests.unit.analysis.test_threeway_floors import rows

pytestmark = pytest.mark.unit

LOOSE = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, tier_factor={k: 1e9 for k in CRIT.tier_factor})
HAIR = 1 - 1e-9


def names(a: Aligned, crit, tie: float = 0.1) -> list[str]:
    return [f.criterion for f in spread(a, crit, tie).findings]


def test_a_pooled_sigma_ratio_exactly_at_its_bound_passes():
    a = rows({k: 1.6e-3 for k in range(20)})
    ratio = spread(a, LOOSE, 0.1).ratio
    assert ratio == pytest.approx(1.6)
    assert names(a, replace(LOOSE, sigma_ratio=ratio)) == []
    assert names(a, replace(LOOSE, sigma_ratio=ratio * HAIR)) == ["sigma ratio (own)"]


def test_a_per_position_ratio_exactly_at_its_bound_passes():
    a = sequence_with_one_bad_position(5e-3, at=3)
    worst = spread(a, NO_TIERS, 0.1).position_ratio
    assert worst == pytest.approx(5.0)
    assert names(a, replace(NO_TIERS, position_ratio=worst)) == []
    assert names(a, replace(NO_TIERS, position_ratio=worst * HAIR)) == ["per-position sigma ratio (own)"]


def tier_rows(*moves: float) -> Aligned:
    """One row per move: the reference's third id moved by it (binary fractions: every figure exact), the yardstick
    exact, so a tier's bound is ``tier_factor`` x ``abs_floor``."""
    a = Aligned("scored")
    for k, m in enumerate(moves):
        target = tuple((i, v + (m if j == 2 else 0.0)) for j, (i, v) in enumerate(REFERENCE))
        a.rows.append(("balanced", 3 + k, row(target), row(REFERENCE), row(REFERENCE)))
    return a


TIER = replace(LOOSE, abs_floor=0.25, tier_factor={**LOOSE.tier_factor, "5": 2.0})  # a top-5 bound of 0.5 nats


def test_a_tier_exactly_at_its_bound_passes_and_past_it_fails():
    s = spread(tier_rows(0.5), TIER, 0.1)
    assert (s.tiers["5"]["target"], s.tiers["5"]["bound"], s.findings) == (0.5, 0.5, [])
    assert names(tier_rows(0.5), replace(TIER, tier_factor={**TIER.tier_factor, "5": 2.0 * HAIR})) == [
        "top-5 log-prob tier (scored)"]


def test_a_tier_finding_names_the_first_position_past_the_bound_not_one_at_it():
    [f] = spread(tier_rows(0.5, 0.75, 1.0), TIER, 0.1).findings
    assert (f.position, f.at) == (4, "first")
    assert f.detail == "|target - fp32| up to 1 nats > 2 x the yardstick's 0.25; 0.75 there"


def test_a_top1_flip_where_the_references_margin_is_exactly_the_near_tie_allowance_is_excused():
    """The reference leads by exactly 1 nat; an allowance of 1 nat excuses the flip (checked: none), a hair less
    does not."""
    flipped = row(((11, -0.4), (10, -0.5), *REFERENCE[2:]))
    a = Aligned("scored", [("balanced", 7, flipped, row(REFERENCE), row(REFERENCE, shift=1e-3))])
    s = spread(a, LOOSE, 1.0)
    assert row(REFERENCE).margin == 1.0 and (s.top1_checked, s.findings) == (0, [])
    again = spread(a, LOOSE, HAIR)
    assert again.top1_checked == 1 and [f.criterion for f in again.findings] == ["top-1 agreement (scored)"]


def test_an_fns_sigma_ratio_exactly_at_its_bound_passes():
    a = Aligned("own", [("balanced", 7, row(REFERENCE), row(REFERENCE), row(REFERENCE))])
    reference = [-1.0, -1.2, -1.4, -1.6]
    a.fns.append(("balanced", 7, [x + 5e-3 * (-1) ** i for i, x in enumerate(reference)], reference,
                  [x + 1e-3 * (-1) ** i for i, x in enumerate(reference)]))
    ratio = spread(a, LOOSE, 0.1).fns_ratio
    assert ratio == pytest.approx(5.0)
    assert names(a, replace(LOOSE, fns_sigma_ratio=ratio)) == []
    assert names(a, replace(LOOSE, fns_sigma_ratio=ratio * HAIR)) == ["FNS sigma ratio (own)"]


def bias_rows(top1: float, top2: float, n: int = 30, noise: float = 2e-3) -> Aligned:
    """``n`` positions where the target moves the reference's top-1 log-prob by ``top1`` and its top-2 by ``top2``
    besides the yardstick's rounding (on the top-1, alternating, of three sizes; the target 0.8 of it)."""
    a = Aligned("own")
    for k in range(n):
        jitter = noise * (-1) ** k * (1 + (k % 3))
        moves_t, moves_y = {0: jitter * 0.8 + top1, 1: top2}, {0: jitter}
        t = ranked((i, v + moves_t.get(j, 0.0)) for j, (i, v) in enumerate(RANKS[:50]))
        y = ranked((i, v + moves_y.get(j, 0.0)) for j, (i, v) in enumerate(RANKS[:50]))
        a.rows.append(("balanced", 31 + k, t, ranked(RANKS[:50]), y))
    return a


@pytest.mark.parametrize("top1, top2, label, key", [
    (-1e-3, 1e-3, "top-1 / top-2 margin", "margin"),  # the margin moved twice the top-1: its |t| the larger
    (-2e-3, -1e-3, "top-1 log-prob", "top1_logprob"),  # both moved down: the margin half the top-1
])
def test_the_signed_bias_finding_names_the_statistic_whose_t_is_larger(top1, top2, label, key):
    """Both statistics beyond a bound of 2: the finding is the one with the larger |t|, with its mean changes, its
    positions, its t and the bound, at the row where its paired difference lies furthest."""
    s = spread(bias_rows(top1, top2), replace(LOOSE, bias_t=2.0), 1.0)
    other = "top1_logprob" if key == "margin" else "margin"
    b = s.bias[key]
    assert abs(b["t"]) > abs(s.bias[other]["t"]) > 2.0
    [f] = s.findings
    assert f.criterion == "signed bias (own)" and (f.prompt, f.position, f.at) == ("balanced", 31 + b["at"], "largest")
    assert f.detail == (f"the {label}'s mean change {b['target']:+.3g} nats against the yardstick's "
                        f"{b['yardstick']:+.3g} over 30 positions: paired t {b['t']:+.3g}, beyond ±2; "
                        f"{b['largest']:+.3g} nats more than the yardstick's here")

