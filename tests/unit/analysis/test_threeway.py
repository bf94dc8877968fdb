"""The three-way criterion itself (``harness.analysis.threeway.spread``), pinned rule by rule on small
hand-built rows: the side (target), the fp32 reference and the side's yardstick at the same positions. Each
test holds one rule that a held-out mutation audit (issue 47) found no test holding: the FNS floor is the
yardstick's, the reference's own ids are always compared, a near-tie is the reference's margin, and the
first position of a sequence is judged like any other."""

from __future__ import annotations

import pytest

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis.threeway import Aligned, Criterion, padded_spread, spread
from harness.core.scored import ScoredToken

pytestmark = pytest.mark.unit

CRIT = Criterion("bf16", sigma_ratio=1.5, tier_factor={"5": 1.9, "50": 2.2, "1000": 2.0, "all": 1.8},
                 tie_factor=8.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4, margin_floor=1e-4,
                 position_ratio=3.0, pad_factor=3.0)
REFERENCE = ((10, -0.5), (11, -1.5), (12, -2.5), (13, -3.5), (14, -4.5), (15, -5.5))
TIE = 0.1


def row(top, token: int = 10, shift: float = 0.0) -> ScoredToken:
    top = tuple((i, v + shift) for i, v in top)
    return ScoredToken(token, dict(top).get(token, top[-1][1] - 1.0), top)


def aligned(targets, positions=(7,)) -> Aligned:
    """One prompt's rows at ``positions``: each target against the reference and a yardstick within 1e-3."""
    a = Aligned("scored")
    for k, (pos, target) in enumerate(zip(positions, targets)):
        a.rows.append(("balanced", pos, target, row(REFERENCE), row(REFERENCE, shift=1e-3 if k % 2 else -1e-3)))
    return a


def criteria(a: Aligned) -> list[str]:
    return [f.criterion for f in spread(a, CRIT, TIE).findings]


def test_the_same_rows_as_the_reference_break_nothing():
    assert criteria(aligned([row(REFERENCE)])) == []


def test_fns_marginals_five_times_the_yardsticks_spread_fail_against_the_yardsticks_floor():
    a = aligned([row(REFERENCE)])
    reference = [-1.0, -1.2, -1.4, -1.6]
    a.fns.append(("balanced", 7, [x + 0.005 * (-1) ** i for i, x in enumerate(reference)], reference,
                  [x + 0.001 * (-1) ** i for i, x in enumerate(reference)]))
    found = spread(a, CRIT, TIE)
    assert found.fns_ratio == pytest.approx(5.0) and "FNS sigma ratio (scored)" in [f.criterion for f in found.findings]


def test_a_side_that_drops_the_references_second_id_breaks_the_tier_and_the_sigma_ratio():
    dropped = tuple(x for x in REFERENCE if x[0] != 11) + ((16, -6.5),)
    found = criteria(aligned([row(dropped)]))
    assert "top-5 log-prob tier (scored)" in found and "sigma ratio (scored)" in found, found


def test_a_flipped_top1_where_the_reference_is_clear_fails_however_close_the_side_calls_it():
    """The near-tie allowance is judged on the reference's margin (1.0 nats here), never the side's (0.01)."""
    flipped = ((11, -0.99), (10, -1.0), *REFERENCE[2:])
    found = spread(aligned([row(flipped)]), CRIT, TIE)
    assert found.top1_checked == 1 and found.top1_agree == 0
    assert "top-1 agreement (scored)" in [f.criterion for f in found.findings]


def test_the_first_position_of_a_sequence_is_judged_like_any_other():
    flipped = ((11, -0.4), (10, -0.5), *REFERENCE[2:])
    found = spread(aligned([row(flipped), row(REFERENCE)], positions=(31, 32)), CRIT, TIE)
    top1 = [f for f in found.findings if f.criterion == "top-1 agreement (scored)"]
    assert found.top1_checked == 2 and top1 and top1[0].position == 31


def noisy(shift: float, k: int) -> ScoredToken:
    """The reference moved by +-``shift`` alternating over its ids (an rms of ``shift``, the top-1 kept)."""
    return ScoredToken(10, REFERENCE[0][1] + shift * (-1) ** 0,
                       tuple((i, v + shift * (-1) ** (j + k)) for j, (i, v) in enumerate(REFERENCE)))


def sequence_with_one_bad_position(bad: float, at: int, n: int = 40) -> Aligned:
    """``n`` positions whose target is as far from the reference as the yardstick (1e-3), but ``bad`` at
    position ``at``: diluted in the pooled sigma, whole at its own position."""
    a = Aligned("own")
    for k in range(n):
        target = noisy(bad if k == at else 1e-3, k)
        a.rows.append(("balanced", 30 + k, target, row(REFERENCE), noisy(1e-3, k + 1)))
    return a


NO_TIERS = replace(CRIT, tier_factor={k: 1e9 for k in CRIT.tier_factor})  # the sigma criteria alone


@pytest.mark.parametrize("at", [0, 12, 39])
def test_one_position_five_times_off_fails_per_position_where_the_pooled_sigma_passes_and_names_it(at):
    found = spread(sequence_with_one_bad_position(5e-3, at=at), NO_TIERS, TIE)
    names = [f.criterion for f in found.findings]
    assert found.ratio < CRIT.sigma_ratio and "sigma ratio (own)" not in names
    assert names == ["per-position sigma ratio (own)"]
    assert found.position_at == ("balanced", 30 + at) and found.findings[0].position == 30 + at
    assert found.position_ratio == pytest.approx(5.0)


@given(st.floats(min_value=1e-3, max_value=2.9e-3), st.integers(min_value=0, max_value=39))
def test_a_position_within_the_bound_passes_wherever_it_is(bad, at):
    found = spread(sequence_with_one_bad_position(bad, at), NO_TIERS, TIE)
    assert not found.findings and found.position_ratio == pytest.approx(bad / 1e-3)


def test_the_per_position_bound_is_the_criterions_own():
    """At 5x: the default criterion (3.0) fails it, one calibrated at 6.0 does not."""
    a = sequence_with_one_bad_position(5e-3, at=3)
    assert [f.criterion for f in spread(a, NO_TIERS, TIE).findings] == ["per-position sigma ratio (own)"]
    assert spread(a, replace(NO_TIERS, position_ratio=6.0), TIE).findings == []


@pytest.mark.parametrize("tier", ["5", "50", "1000"])
def test_each_tier_fails_alone_on_an_id_only_that_tier_holds(tier):
    """The reference's id at rank ``k`` (in tier k, in no smaller one) moved 10x the yardstick's largest,
    with sigma tokens set to 2, so nothing but the tier that holds the id sees it."""
    k = int(tier)
    ranks = [(100 + j, -0.5 - j * 0.01) for j in range(1000)]  # every finite tier measured
    moved = tuple((i, v + (0.01 if j == k - 1 else 0.0)) for j, (i, v) in enumerate(ranks))
    ref = ScoredToken(100, ranks[0][1], tuple(ranks))
    yard = ScoredToken(100, ranks[0][1] + 1e-3, tuple((i, v + 1e-3 * (-1) ** j) for j, (i, v) in enumerate(ranks)))
    a = Aligned("scored")
    a.rows.append(("balanced", 7, ScoredToken(100, moved[0][1], moved), ref, yard))
    crit = replace(CRIT, sigma_tokens=2, position_ratio=1e9)
    found = spread(a, crit, TIE)
    failed = sorted(f.criterion for f in found.findings)
    expected = [f"top-{t} log-prob tier (scored)" for t in ("5", "50", "1000") if int(t) >= k]
    assert failed == sorted(expected), failed


def test_a_flipped_top1_within_the_near_tie_passes():
    """The reference's margin 1.0 below an allowance of 2.0: a top-1 that differs there is excused."""
    flipped = ((11, -0.99), (10, -1.0), *REFERENCE[2:])
    found = spread(aligned([row(flipped)]), replace(CRIT, sigma_ratio=1e9, position_ratio=1e9,
                                                  tier_factor={k: 1e9 for k in CRIT.tier_factor}), 2.0)
    assert found.top1_checked == 0 and found.findings == []


def flip_at(margin: float, yardstick_moves: float) -> Aligned:
    """One position where the reference's top-1 leads by ``margin`` and the target flips it, the yardstick moving
    that margin by ``yardstick_moves`` there."""
    ref = ((10, -1.0), (11, -1.0 - margin), *REFERENCE[2:])
    a = Aligned("scored")
    target = row(((11, -0.9), (10, -1.0), *REFERENCE[2:]))
    yard = row(((10, -1.0), (11, -1.0 - margin + yardstick_moves), *REFERENCE[2:]))
    a.rows.append(("balanced", 7, target, row(ref), yard))
    return a


LOOSE = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, tier_factor={k: 1e9 for k in CRIT.tier_factor},
                margin_floor=1e-3, tie_position_factor=10.0)


@settings(deadline=None)
@given(margin=st.floats(0.05, 0.95), moves=st.floats(0.0, 0.04))
def test_a_flip_beyond_the_allowance_at_its_own_position_fails_though_within_the_global_one(margin, moves):
    """The global allowance (1.0 here) is set by the worst position; at a position where the yardstick moves the
    margin by ``moves``, the allowance is ``tie_position_factor`` x that (floored): a flip of a wider margin fails
    there, naming both allowances; one within it passes."""
    allow = min(1.0, 10.0 * max(moves, 1e-3))
    found = spread(flip_at(margin, moves), LOOSE, 1.0)
    top1 = [f for f in found.findings if f.criterion.startswith("top-1")]
    if margin > allow * (1 + 1e-9) + 1e-9:
        assert top1 and f"near-tie allowance there {allow:.3g}; 1 anywhere" in top1[0].detail, (margin, allow)
    elif margin < allow * (1 - 1e-6):
        assert not top1 and found.top1_checked == 0


def test_the_per_position_allowance_never_exceeds_the_global_one():
    """A yardstick that moves the margin a lot at one position does not widen the allowance past the global."""
    found = spread(flip_at(0.5, 0.2), LOOSE, 0.3)  # 10 x 0.2 = 2.0, capped at 0.3: a margin of 0.5 is checked
    assert [f.criterion for f in found.findings] == ["top-1 agreement (scored)"]


def test_the_per_position_margin_ratio_is_reported_where_it_is_largest():
    found = spread(flip_at(0.5, 0.02), LOOSE, 1.0)
    assert found.position_margin_at == ("balanced", 7)
    assert found.position_margin_ratio == pytest.approx(abs((-1.0 + 0.9) - 0.5) / 0.02, rel=1e-6)  # its 0.6 over 0.02


def padded(shift_at: dict[int, float], n: int = 20) -> list[tuple]:
    """A side's padded rows against its unpadded ones, with the yardstick 1e-3 from the reference."""
    out = []
    for k in range(n):
        unpadded = noisy(1e-3, k)
        pad = ScoredToken(10, unpadded.logprob, tuple((i, v + shift_at.get(k, 0.0) * (-1) ** j)
                                                      for j, (i, v) in enumerate(unpadded.top)))
        out.append(("GC-rich", 20 + k, pad, unpadded, row(REFERENCE), noisy(1e-3, k + 1)))
    return out


def test_a_padded_row_identical_to_its_unpadded_run_passes():
    found = padded_spread(padded({}), CRIT)
    assert found.positions == 20 and found.ratio == 0.0 and found.findings == []


def test_a_padded_row_far_from_its_unpadded_run_at_one_position_fails_naming_it():
    found = padded_spread(padded({4: 1e-2}), CRIT)
    assert [f.criterion for f in found.findings] == ["padded-row log-probs (cut)"]
    assert found.at == ("GC-rich", 24) and found.findings[0].position == 24
    assert 9.0 < found.ratio < 10.0  # 1e-2 over a yardstick a little above 1e-3 there


@given(st.floats(min_value=0.0, max_value=2.9e-3), st.integers(min_value=0, max_value=19))
def test_a_padded_row_within_rounding_passes(shift, at):
    assert padded_spread(padded({at: shift}), CRIT).findings == []
