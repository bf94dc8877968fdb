"""What the three-way rule (``harness.analysis.threeway``) does where a row lacks something: an id the side did not
report (bounded below by its last reported one, else left out of both sides' figures, never read as no
difference), a row with no id a tier can compare (it adds nothing and is never the one named), a reference row
with one id (no margin: no top-1 to hold, no margin ratio) or two (a margin like any other), a yardstick row
without figures (it credits no rounding there). Hand-built rows, as in ``test_threeway`` (issue 57, generated
mutants)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.threeway import Aligned, delta, margin_change, padded_spread, spread
from harness.core.scored import ScoredToken
from tests.unit.analysis.test_threeway import CRIT, REFERENCE, noisy, row

pytestmark = pytest.mark.unit

LOOSE = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, tier_factor={k: 1e9 for k in CRIT.tier_factor})


def test_an_unreported_difference_is_bounded_by_the_sides_last_id_not_an_earlier_one_and_a_tie_bounds_nothing():
    """The side lists three ids; the reference's id 13 at -1.5 lies below the side's second (-1.0) but above its last
    (-2.0): the side's value there is at most -2.0, a difference of at least 0.5 down. At exactly the last's
    value the bound is 0: nothing is known."""
    side = ScoredToken(10, -0.5, ((10, -0.5), (11, -1.0), (12, -2.0)))
    assert delta(side, ScoredToken(10, -0.5, ((10, -0.5), (13, -1.5))), 13) == pytest.approx(-0.5)
    assert delta(side, ScoredToken(10, -0.5, ((10, -0.5), (13, -2.0))), 13) is None


def test_an_id_the_side_cannot_be_compared_on_is_left_out_of_both_sides_sigma():
    """The side reports the reference's top two ids only (0.02 off each), the rest below its last: the sigma is
    over those two, the yardstick's (1e-3 on every id) over the same two."""
    two = ScoredToken(10, -0.48, ((10, -0.48), (11, -1.52)))
    a = Aligned("scored", [("balanced", 7, two, row(REFERENCE), noisy(1e-3, 0))])
    s = spread(a, LOOSE, 0.1)
    assert s.sigma_target == pytest.approx(0.02) and s.sigma_yardstick == pytest.approx(1e-3)
    assert s.ratio == pytest.approx(20.0) and s.position_at == ("balanced", 7)


def unrelated(token: int) -> ScoredToken:
    """A row scoring ``token`` whose top-5 the reference does not list, each above every id the reference lists: no
    difference of a top-5 id can be told or bounded."""
    return ScoredToken(token, -9.0, tuple((20 + j, -0.01 * (j + 1)) for j in range(5)))


def test_a_row_with_no_comparable_id_in_a_tier_adds_nothing_and_the_first_row_past_the_bound_is_named():
    """Position 3: the target's top-5 unrelated to the reference's; 4: the target 0.3 off (past the bound); 5: the
    yardstick's top-5 unrelated. The tier's figures are the other rows', and it names position 4."""
    ref99 = ScoredToken(99, -9.0, REFERENCE)
    a = Aligned("scored", [
        ("balanced", 3, unrelated(99), ref99, ScoredToken(99, -9.0, tuple((i, v + 1e-3) for i, v in REFERENCE))),
        ("balanced", 4, row(REFERENCE, shift=0.3), row(REFERENCE), row(REFERENCE, shift=-1e-3)),
        ("balanced", 5, ScoredToken(99, -9.0, REFERENCE), ref99, unrelated(99))])
    s = spread(a, replace(LOOSE, tier_factor={**LOOSE.tier_factor, "5": 1.9}), 0.1)
    five = s.tiers["5"]
    assert five["target"] == pytest.approx(0.3) and five["yardstick"] == pytest.approx(1e-3)
    [tier] = [f for f in s.findings if f.criterion == "top-5 log-prob tier (scored)"]
    assert tier.position == 4 and tier.detail.endswith("; 0.3 there")


def test_a_reference_row_with_two_ids_has_a_margin_and_one_with_a_single_id_has_none():
    """Two ids: a flip beyond the near-tie fails there and its margin change is the figure; a single id: no top-1
    is held to it (its margin unknown) and it has no margin ratio, and it does not end the scan of the others."""
    two, one = ScoredToken(10, -0.5, REFERENCE[:2]), ScoredToken(10, -0.5, REFERENCE[:1])
    flipped = ScoredToken(10, -1.0, ((11, -0.9), (10, -1.0)))
    s = spread(Aligned("scored", [("balanced", 7, flipped, two, two)]), LOOSE, 0.1)
    assert s.top1_checked == 1 and [f.position for f in s.findings if f.criterion.startswith("top-1")] == [7]
    assert s.position_margin_at == ("balanced", 7) and s.position_margin_ratio == pytest.approx(1.1 / 1e-4)
    alone = spread(Aligned("scored", [("balanced", 7, flipped, one, one)]), LOOSE, 0.1)
    assert (alone.top1_checked, alone.findings, alone.position_margin_at, alone.position_margin_ratio) == (
        0, [], None, 0.0)
    assert margin_change([(flipped, one), (flipped, two)]) == pytest.approx(1.1)
    both = spread(Aligned("scored", [("balanced", 6, flipped, one, one), ("balanced", 7, flipped, two, two)]),
                  LOOSE, 0.1)
    assert both.target_margin_change == pytest.approx(1.1) and both.position_margin_at == ("balanced", 7)


def test_a_yardstick_row_without_figures_credits_no_rounding_to_a_padded_row():
    """The yardstick reports nothing at the position (no id of the reference's): its rounding there is 0, floored by
    ``sigma_floor`` (1e-4), so a padded row 5e-3 off its unpadded run fails (a ratio of 50), not held to 1 nat."""
    unpadded = noisy(1e-3, 0)
    top = tuple((i, v + 5e-3 * (-1) ** j) for j, (i, v) in enumerate(unpadded.top))
    padded = ScoredToken(10, top[0][1], top)
    found = padded_spread([("GC-rich", 20, padded, unpadded, row(REFERENCE), ScoredToken(99, -9.0, ()))], CRIT)
    assert found.ratio == pytest.approx(5e-3 / CRIT.sigma_floor)
    assert [f.position for f in found.findings] == [20]
