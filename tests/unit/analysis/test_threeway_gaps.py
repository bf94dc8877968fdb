"""What the three-way rule (``harness.analysis.threeway``) does where a row lacks something: an id the side did not
report (bounded below by its last reported one, else left out of both sides' figures, never read as no
difference), a row with no id a tier can compare (it adds nothing and is never the one named), a reference row
with one id (no margin: no top-1 to hold, no margin ratio) or two (a margin like any other), a yardstick row
without figures (it credits no rounding there); and which ids and rows each figure reads (the position's own
token in the sigma, the yardstick's own top ids in its tier figure, the reference's top ids in a padded row's, the
"all" tier only where every row has probes, the margin noise over every kind). Hand-built rows, as in
``test_threeway`` (issue 57, generated mutants and a held-out-style audit of this session's own)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.threeway import Aligned, delta, margin_change, margin_noise, padded_spread, spread
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


def test_the_positions_own_token_counts_in_the_sigma_where_the_reference_ranks_it_below_its_top():
    """``sigma_tokens`` 2; the sequence's token (15) is the reference's sixth: a side off only there (0.05 nats) is
    seen by the sigma over the token and the reference's top two, an rms of 0.05 / sqrt(3)."""
    def at15(shift: float) -> ScoredToken:
        top = tuple((i, v + (shift if i == 15 else 0.0)) for i, v in REFERENCE)
        return ScoredToken(15, dict(top)[15], top)

    yard = ScoredToken(15, -5.5 + 1e-3, tuple((i, v + 1e-3) for i, v in REFERENCE))
    s = spread(Aligned("own", [("balanced", 40, at15(0.05), at15(0.0), yard)]), replace(LOOSE, sigma_tokens=2), 0.1)
    assert s.sigma_target == pytest.approx(0.05 / 3 ** 0.5) and s.sigma_yardstick == pytest.approx(1e-3)


def test_the_all_tier_is_not_measured_where_one_row_lacks_the_probes():
    def probed(r: ScoredToken, probes: tuple[float, ...]) -> ScoredToken:
        return ScoredToken(r.token, r.logprob, r.top, (), probes)

    ref, probes = row(REFERENCE), (-9.0, -8.5)
    a = Aligned("scored", [("p", 3, probed(ref, probes), probed(ref, probes), probed(ref, probes)),
                           ("p", 4, row(REFERENCE), probed(ref, probes), probed(ref, probes))])
    s = spread(a, CRIT, 0.1)
    assert s.tiers["all"] == {"measured": False} and s.tiers["5"]["measured"]


def test_a_tiers_yardstick_figure_is_over_its_own_top_ids():
    """The yardstick ranks the reference's sixth id (15) fifth, 1.5 nats up: its top-5 figure is that 1.5, so the
    side's 0.3 on the reference's third id is within 1.9 x it (over the side's ids it would read 0: a false FAIL)."""
    yard = row(tuple(sorted(((i, v + (1.5 if i == 15 else 0.0)) for i, v in REFERENCE), key=lambda t: -t[1])))
    target = row(tuple((i, v + (0.3 if i == 12 else 0.0)) for i, v in REFERENCE))
    s = spread(Aligned("scored", [("balanced", 7, target, row(REFERENCE), yard)]),
               replace(LOOSE, tier_factor={**LOOSE.tier_factor, "5": 1.9}), 0.1)
    assert s.tiers["5"]["yardstick"] == pytest.approx(1.5) and s.tiers["5"]["target"] == pytest.approx(0.3)
    assert s.findings == []


def test_a_padded_row_is_compared_on_the_references_top_ids_whatever_its_unpadded_run_ranks():
    """``sigma_tokens`` 2: the reference's top two are 10 and 11; the unpadded run ranks 12 above 11. A padded row
    0.01 off at 11 fails (an rms of 0.01 / sqrt(2) over the yardstick's 1e-3), though 11 is not the run's second."""
    unpadded = ScoredToken(10, -0.5, ((10, -0.5), (12, -1.4), (11, -1.5), (13, -3.5)))
    padded = ScoredToken(10, -0.5, ((10, -0.5), (12, -1.4), (11, -1.49), (13, -3.5)))
    found = padded_spread([("GC-rich", 20, padded, unpadded, row(REFERENCE), row(REFERENCE, shift=1e-3))],
                          replace(CRIT, sigma_tokens=2))
    assert found.ratio == pytest.approx(0.01 / 2 ** 0.5 / 1e-3, rel=1e-6)
    assert [f.position for f in found.findings] == [20]


def test_the_margin_noise_is_the_largest_over_every_kind():
    """The yardstick moves the reference's margin by 0.01 in the scored rows and 0.05 in the own rows: the near-tie
    allowance is set by the larger, wherever it lies."""
    def kind(name: str, moves: float) -> Aligned:
        yard = ScoredToken(10, -0.5, ((10, -0.5), (11, -1.5 + moves), *REFERENCE[2:]))
        return Aligned(name, [("balanced", 7, row(REFERENCE), row(REFERENCE), yard)])

    assert margin_noise([kind("scored", 0.01), kind("own", 0.05)]) == pytest.approx(0.05)
    assert margin_noise([kind("scored", 0.05), kind("own", 0.01)]) == pytest.approx(0.05)
