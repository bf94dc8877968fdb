"""The three-way rule's floors and where it names what it finds (``harness.analysis.threeway``): a yardstick that
rounds exactly at one position (its difference from the reference there is 0) must not explode that position's
ratio into a false FAIL of a correct stack, per position as in a padded row; the pooled sigma ratio is named
where the position's own ratio peaks; the per-position margin ratio the calibration reads is each position's
margin change over the yardstick's there, floored by ``margin_floor``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.threeway import Aligned, Criterion, padded_spread, spread
from harness.core.scored import ScoredToken

pytestmark = pytest.mark.unit

CRIT = Criterion("bf16", sigma_ratio=1.5, tier_factor={"5": 1e9, "50": 1e9, "1000": 1e9, "all": 1e9},
                 tie_factor=8.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4, margin_floor=1e-3,
                 position_ratio=3.0, pad_factor=3.0)
REFERENCE = ((10, -0.5), (11, -1.5), (12, -2.5), (13, -3.5), (14, -4.5), (15, -5.5))
TIE = 0.1
N = 20


def moved(shift: float, k: int = 0, margin: float = 0.0) -> ScoredToken:
    """The reference moved by +-``shift`` alternating over its ids (an rms of ``shift``), its top-1 / top-2
    margin changed by ``margin`` besides."""
    top = [(i, v + shift * (-1) ** (j + k)) for j, (i, v) in enumerate(REFERENCE)]
    top[0] = (top[0][0], top[0][1] + margin)
    return ScoredToken(10, top[0][1], tuple(top))


def rows(target_shift: dict[int, float], exact_at: int | None = None, base: float = 1e-3) -> Aligned:
    """``N`` positions where the target and the yardstick each differ from the reference by ``base`` (rms), the
    target by ``target_shift[k]`` at position k, the yardstick by exactly 0 at ``exact_at``."""
    a = Aligned("own")
    for k in range(N):
        yard = moved(0.0 if k == exact_at else base, k + 1)
        a.rows.append(("balanced", 30 + k, moved(target_shift.get(k, base), k), moved(0.0), yard))
    return a


@pytest.mark.parametrize("at", [0, 7, N - 1])
def test_a_yardstick_exact_at_one_position_is_floored_by_its_pooled_sigma_there(at):
    """At that position the correct target's 1e-3 is over the yardstick's pooled sigma (about 1e-3), not over
    its 0 there (a division by zero) nor over ``sigma_floor`` alone (1e-4: a ratio of 10, a false FAIL)."""
    found = spread(rows({}, exact_at=at), CRIT, TIE)
    pooled = 1e-3 * ((N - 1) / N) ** 0.5
    assert found.findings == []
    assert found.position_ratio == pytest.approx(1e-3 / pooled) and found.ratio == pytest.approx(1e-3 / pooled)


def test_a_stack_off_at_that_position_still_fails_there():
    found = spread(rows({7: 4e-3}, exact_at=7), CRIT, TIE)
    assert [f.criterion for f in found.findings] == ["per-position sigma ratio (own)"]
    assert found.findings[0].position == 37 and found.position_ratio == pytest.approx(4e-3 / (1e-3 * (19 / 20) ** .5))


@pytest.mark.parametrize("at", [2, 11])
def test_the_pooled_sigma_ratio_is_named_where_the_positions_own_ratio_peaks(at):
    """Every position 3x the yardstick (the pooled ratio fails), one 10x: the finding names that one, with its
    own rms difference, not the first position."""
    found = spread(rows({k: (1e-2 if k == at else 3e-3) for k in range(N)}), CRIT, TIE)
    sigma = [f for f in found.findings if f.criterion == "sigma ratio (own)"]
    assert len(sigma) == 1 and sigma[0].position == 30 + at and sigma[0].at == "largest"
    assert "the position's rms difference 0.01 nats" in sigma[0].detail
    assert found.position_at == ("balanced", 30 + at)


def test_the_pooled_sigma_ratio_fails_only_beyond_its_bound():
    assert spread(rows({k: 1.4e-3 for k in range(N)}), CRIT, TIE).findings == []
    found = spread(rows({k: 1.6e-3 for k in range(N)}), CRIT, TIE)
    assert [f.criterion for f in found.findings] == ["sigma ratio (own)"]
    assert found.ratio == pytest.approx(1.6)


def margin_rows(at_33: float, at_35: float) -> Aligned:
    """The target moves the reference's margin by ``at_33`` at position 33 and ``at_35`` at 35; the yardstick
    moves it by 0.01 at 33 and not at all at 35 (floored to margin_floor there)."""
    a = Aligned("own")
    for k in range(N):
        target = moved(0.0, margin={3: at_33, 5: at_35}.get(k, 0.0))
        yard = moved(0.0, margin=0.01 if k == 3 else 0.0)
        a.rows.append(("balanced", 30 + k, target, moved(0.0), yard))
    return a


@pytest.mark.parametrize("at_33, at_35, floor, where, ratio", [
    (0.02, 0.05, 1e-3, 35, 50.0),  # 0.05 over the floor beats 0.02 over the yardstick's 0.01
    (0.2, 0.01, 1e-3, 33, 20.0),  # 0.2 over 0.01 (not over 0.01 + the floor) beats 0.01 over the floor
    (0.02, 0.05, 0.02, 35, 2.5),  # a floor above the yardstick's change at 33 holds both positions
])
def test_the_margin_ratio_is_each_positions_change_over_the_yardsticks_floored(at_33, at_35, floor, where, ratio):
    loose = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, margin_floor=floor)
    found = spread(margin_rows(at_33, at_35), loose, 1.0)
    assert found.position_margin_at == ("balanced", where)
    assert found.position_margin_ratio == pytest.approx(ratio)
    assert found.target_margin_change == pytest.approx(max(at_33, at_35))


def test_a_yardstick_exact_everywhere_is_floored_by_sigma_floor():
    """A yardstick that rounds nothing (sigma 0): the target's 1e-5 is over ``sigma_floor`` (1e-4), a ratio of
    0.1, pooled and per position."""
    a = Aligned("own")
    for k in range(N):
        a.rows.append(("balanced", 30 + k, moved(1e-5, k), moved(0.0), moved(0.0)))
    found = spread(a, CRIT, TIE)
    assert found.findings == [] and found.ratio == pytest.approx(0.1) and found.position_ratio == pytest.approx(0.1)


def padded_rows(pad_shift: dict[int, float], exact_at: int | None) -> list[tuple]:
    out = []
    for k in range(N):
        unpadded = moved(1e-3, k)
        top = tuple((i, v + pad_shift.get(k, 1e-3) * (-1) ** j) for j, (i, v) in enumerate(unpadded.top))
        pad = ScoredToken(10, top[0][1], top)
        out.append(("GC-rich", 20 + k, pad, unpadded, moved(0.0), moved(0.0 if k == exact_at else 1e-3, k + 1)))
    return out


@pytest.mark.parametrize("at", [0, 9])
def test_a_padded_row_where_the_yardstick_is_exact_is_floored_by_its_pooled_rounding(at):
    found = padded_spread(padded_rows({}, exact_at=at), CRIT)
    pooled = 1e-3 * ((N - 1) / N) ** 0.5
    assert found.findings == [] and found.ratio == pytest.approx(1e-3 / pooled)


def test_a_padded_row_off_where_the_yardstick_is_exact_still_fails_there():
    found = padded_spread(padded_rows({9: 5e-3}, exact_at=9), CRIT)
    assert [f.position for f in found.findings] == [29] and found.at == ("GC-rich", 29)


def test_padded_rows_of_a_yardstick_exact_everywhere_are_floored_by_sigma_floor():
    found = padded_spread([(n, p, pad, un, r, moved(0.0)) for n, p, pad, un, r, _ in padded_rows({}, None)], CRIT)
    assert found.ratio == pytest.approx(1e-3 / CRIT.sigma_floor) and len(found.findings) == 1


def test_a_position_where_the_yardstick_rounds_more_than_its_pooled_sigma_is_held_to_its_own_rounding_there():
    """The yardstick 5x noisier at position 37 than elsewhere, the target as noisy there as it: that position's
    ratio is 5e-3 over the yardstick's own 5e-3 (1), not over the pooled sigma (about 1.5e-3: a ratio of 3.4 past
    the per-position bound 3, a false FAIL of a correct stack)."""
    a = Aligned("own")
    for k in range(N):
        shift = 5e-3 if k == 7 else 1e-3
        a.rows.append(("balanced", 30 + k, moved(shift, k), moved(0.0), moved(shift, k + 1)))
    found = spread(a, CRIT, TIE)
    assert found.findings == [] and found.position_ratio == pytest.approx(1.0)
    assert found.sigma_yardstick == pytest.approx(((19 * 1e-6 + 25e-6) / 20) ** 0.5)


def test_a_yardstick_that_rounds_less_than_the_floors_is_held_to_the_floors():
    """The yardstick 1e-6 off the reference (below ``sigma_floor`` and ``abs_floor``, 1e-4), the target 1e-5: its
    ratios are over the floors (0.1), pooled, per position and in a tier, not over the yardstick's 1e-6 (10: a false
    FAIL of a stack closer to the reference than the floors)."""
    crit = replace(CRIT, tier_factor={**CRIT.tier_factor, "5": 2.0})
    found = spread(rows({k: 1e-5 for k in range(N)}, base=1e-6), crit, TIE)
    assert found.findings == []
    assert found.ratio == pytest.approx(0.1) and found.position_ratio == pytest.approx(0.1)
    assert found.tiers["5"]["ratio"] == pytest.approx(0.1) and found.tiers["5"]["bound"] == pytest.approx(2e-4)
