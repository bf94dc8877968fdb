"""The three-way criterion itself (``harness.analysis.threeway.spread``), pinned rule by rule on small
hand-built rows: the side (target), the fp32 reference and the side's yardstick at the same positions. Each
test holds one rule that a held-out mutation audit (issue 47) found no test holding: the FNS floor is the
yardstick's, the reference's own ids are always compared, a near-tie is the reference's margin, and the
first position of a sequence is judged like any other."""

from __future__ import annotations

import pytest

from harness.analysis.threeway import Aligned, Criterion, spread
from harness.core.scored import ScoredToken

pytestmark = pytest.mark.unit

CRIT = Criterion("bf16", sigma_ratio=1.5, tier_factor={"5": 1.9, "50": 2.2, "1000": 2.0, "all": 1.8},
                 tie_factor=8.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4, margin_floor=1e-4)
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
