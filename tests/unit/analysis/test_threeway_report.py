"""The three-way rule's findings as a user reads them (``harness.analysis.threeway``): each finding's words,
figures and position, the tiers' record, the lower bound on a difference a side did not report, which ids
each tier compares, and the JSON of a spread and a padded spread (issue 57, generated mutants). Hand-built
rows, as in ``test_threeway``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.threeway import (
    Aligned,
    Finding,
    delta,
    iter_rows,
    margin_change,
    padded_spread,
    spread,
    tie_at,
    tier_available,
    tier_ids,
)
from harness.core.scored import ScoredToken
from tests.unit.analysis.test_threeway import CRIT, REFERENCE, aligned, row

pytestmark = pytest.mark.unit

DROPPED = tuple(x for x in REFERENCE if x[0] != 11) + ((16, -6.5),)  # the reference's second id gone
FLIPPED = ((11, -0.99), (10, -1.0), *REFERENCE[2:])


def test_a_side_off_the_reference_reads_each_finding_with_its_figures_and_position():
    s = spread(aligned([row(DROPPED)]), CRIT, 0.1)
    assert [f.describe() for f in s.findings] == [
        "sigma ratio (scored): sigma(target - fp32) / sigma(yardstick - fp32) = 2.04 / 0.001 = 2.04e+03 > 1.5; the "
        "position's rms difference 2.04 nats (prompt balanced, largest at position 7)",
        "per-position sigma ratio (scored): rms(target - fp32) / rms(yardstick - fp32) at one position = 2.04e+03 > 3 "
        "(pooled sigma ratio 2.04e+03) (prompt balanced, largest at position 7)",
        "top-5 log-prob tier (scored): |target - fp32| up to 5 nats > 1.9 x the yardstick's 0.001; 5 there (prompt "
        "balanced, first at position 7)"]
    five = s.tiers["5"]
    assert five["measured"] and five["target"] == 5.0 and five["yardstick"] == pytest.approx(1e-3)
    assert five["bound"] == pytest.approx(1.9e-3) and five["ratio"] == pytest.approx(5000.0)
    assert s.tiers["50"] == s.tiers["1000"] == s.tiers["all"] == {"measured": False}
    assert (s.kind, s.positions, s.top1_checked, s.top1_agree, s.tie_allowance) == ("scored", 1, 1, 1, 0.1)


def test_a_flipped_top1_names_both_ids_the_margin_and_both_allowances():
    s = spread(aligned([row(FLIPPED)]), CRIT, 0.1)
    assert s.findings[-1].describe() == (
        "top-1 agreement (scored): agreement 0/1; top-1 11 where the fp32 reference has 10 by a margin of 1 nats (> the "
        "near-tie allowance there 0.1; 0.1 anywhere) (prompt balanced, first at position 7)")
    assert s.target_margin_change == pytest.approx(1.01)
    assert s.position_margin_ratio == pytest.approx(1.01 / CRIT.margin_floor)  # the yardstick moves no margin here
    assert s.position_margin_at == ("balanced", 7)


def test_a_tier_finding_names_the_first_position_past_the_bound_and_its_own_difference():
    a = aligned([row(REFERENCE), row(REFERENCE, shift=0.3), row(REFERENCE, shift=0.2)], positions=(3, 4, 5))
    s = spread(a, CRIT, 0.1)
    tier = next(f for f in s.findings if f.criterion == "top-5 log-prob tier (scored)")
    assert (tier.prompt, tier.position, tier.at) == ("balanced", 4, "first")
    assert tier.detail == "|target - fp32| up to 0.3 nats > 1.9 x the yardstick's 0.001; 0.3 there"


def test_the_all_tier_adds_the_probes_and_is_measured_only_where_every_row_has_them():
    def probed(shift: float, probes: tuple[float, ...]) -> ScoredToken:
        r = row(REFERENCE, shift=shift)
        return ScoredToken(r.token, r.logprob, r.top, (), probes)

    a = Aligned("scored", [("p", 0, probed(0.0, (-9.0, -8.0)), probed(0.0, (-9.0, -8.5)), probed(1e-3, (-9.0, -8.5)))])
    s = spread(a, CRIT, 0.1)
    found = [f for f in s.findings if f.criterion.startswith("all-vocabulary")]
    assert [f.criterion for f in found] == ["all-vocabulary (top-1000 and probes) log-prob tier (scored)"]
    assert s.tiers["all"]["target"] == pytest.approx(0.5) and s.tiers["all"]["measured"]
    no_probe = Aligned("scored", [("p", 0, row(REFERENCE), probed(0.0, (-9.0,)), probed(0.0, (-9.0,)))])
    assert spread(no_probe, CRIT, 0.1).tiers["all"] == {"measured": False}


def test_a_difference_the_side_did_not_report_is_bounded_below_by_its_last_reported_id():
    ref = ScoredToken(10, -0.5, ((10, -0.5), (11, -1.5), (12, -2.5)))
    side = ScoredToken(10, -0.5, ((10, -0.5), (11, -2.0)))
    assert delta(side, ref, 11) == pytest.approx(-0.5)
    assert delta(side, ref, 12) is None  # the reference puts 12 below the side's last: nothing is known
    above = ScoredToken(10, -0.5, ((10, -0.5), (11, -3.0)))
    assert delta(above, ScoredToken(10, -0.5, ((10, -0.5), (12, -1.0))), 12) == pytest.approx(-2.0)
    assert delta(side, ref, 99) is None and delta(ScoredToken(10, -0.5, ()), ref, 12) is None


def test_each_tier_compares_both_rows_top_k_and_the_all_tier_the_token_too():
    a = ScoredToken(7, -9.0, tuple((i, -float(i)) for i in range(1, 8)))
    b = ScoredToken(7, -9.0, tuple((i, -float(i)) for i in range(20, 27)))
    assert tier_ids(a, b, "5") == {1, 2, 3, 4, 5, 20, 21, 22, 23, 24}
    assert tier_ids(a, b, "all") == set(range(1, 8)) | set(range(20, 27)) | {7}
    c = ScoredToken(99, -9.0, ((1, -1.0),))
    assert 99 in tier_ids(c, b, "all") and 99 not in tier_ids(c, b, "50")
    assert tier_available(a, "5", False) and not tier_available(a, "50", True)
    assert tier_available(a, "all", True) and not tier_available(a, "all", False)
    assert tier_available(ScoredToken(1, -1.0, tuple((i, -1.0) for i in range(5))), "5", False)
    assert not tier_available(ScoredToken(1, -1.0, tuple((i, -1.0) for i in range(4))), "5", False)


def test_a_margin_change_needs_both_of_the_references_ids():
    r = ScoredToken(1, -0.5, ((1, -0.5), (2, -1.5)))
    assert margin_change([(ScoredToken(1, -0.4, ((1, -0.4), (2, -1.9))), r)]) == pytest.approx(0.5)
    assert margin_change([(ScoredToken(1, -0.4, ((1, -0.4),)), r)]) == 0.0  # the second id not reported
    assert margin_change([(r, ScoredToken(1, -0.5, ((1, -0.5),)))]) == 0.0  # a reference with one id: no margin
    assert margin_change([(ScoredToken(1, -0.5, ((1, -0.5), (2, -1.0))), r),
                          (ScoredToken(1, -0.5, ((1, -0.5), (2, -1.3))), r)]) == pytest.approx(0.5)
    per_position = replace(CRIT, tie_position_factor=2.0)
    assert tie_at(0.01, per_position, 1.0) == pytest.approx(0.02) and tie_at(10.0, per_position, 1.0) == 1.0
    assert tie_at(0.01, CRIT, 1.0) == 1.0  # no per-position factor: the global allowance everywhere


def test_a_spread_and_a_padded_spread_write_their_findings_in_words():
    s = spread(aligned([row(DROPPED)]), CRIT, 0.1)
    data = s.to_dict()
    assert data["findings"] == [f.describe() for f in s.findings] and data["ratio"] == s.ratio
    assert data["kind"] == "scored" and data["position_at"] == ("balanced", 7) and "bias" in data
    ref = row(REFERENCE)
    moved = ScoredToken(10, -0.0, tuple((i, v + 0.5 * (-1) ** k) for k, (i, v) in enumerate(REFERENCE)))
    rows = [("p", 3, moved, ref, ref, row(REFERENCE, shift=1e-3))]
    p = padded_spread(rows, CRIT)
    assert p.to_dict() == {"what": "padded-row log-probs (cut)", "positions": 1, "ratio": p.ratio, "at": ["p", 3],
                           "findings": [f"padded-row log-probs (cut): rms(padded - unpadded single run) over the "
                                        f"yardstick's rounding there = {p.ratio:.3g} > 3 (prompt p, largest at "
                                        "position 3)"]}
    b = padded_spread(rows, CRIT, "batched-row log-probs (own)")
    assert b.findings[0].detail.startswith("rms(batched - unpadded single run) over the yardstick's rounding there = ")
    assert padded_spread([], CRIT).to_dict() == {"what": "padded-row log-probs (cut)", "positions": 0, "ratio": 0.0,
                                                 "at": None, "findings": []}


def test_a_finding_without_a_position_names_its_prompt_only():
    assert Finding("c", "p", None, "d").describe() == "c: d (prompt p)"
    assert Finding("c", "p", 0, "d", "largest").describe() == "c: d (prompt p, largest at position 0)"


def test_a_prompts_rows_are_read_from_their_first_position():
    prompt = {"sequences": {"own": {"from": 5, "rows": [[1, -0.5, [[1, -0.5]]], [2, -0.25, [[2, -0.25]]]]}}}
    assert [(pos, r.token, r.logprob) for pos, r in iter_rows(prompt, "own")] == [(5, 1, -0.5), (6, 2, -0.25)]


def test_a_criterion_writes_its_tier_factors_as_an_object_and_an_ungated_bias_bound_as_null():
    import json

    from dataclasses import fields

    from harness.analysis.threeway import Criterion

    data = json.loads(json.dumps(CRIT.to_dict()))
    assert set(data) == {f.name for f in fields(Criterion)}  # its own fields, no other key
    assert data["tier_factor"] == {"5": 1.9, "50": 2.2, "1000": 2.0, "all": 1.8}
    assert data["bias_t"] is None and data["pad_factor"] == 3.0 and data["dtype"] == "bf16"
    assert replace(CRIT, bias_t=2.5).to_dict()["bias_t"] == 2.5


def test_a_padded_row_exactly_at_its_bound_passes_and_rows_of_none_keep_their_name():
    ref = row(REFERENCE)
    rows = [("p", 3, row(REFERENCE, shift=0.5), ref, ref, row(REFERENCE, shift=0.25))]  # 0.5 over 0.25: exactly 2
    at_bound = padded_spread(rows, replace(CRIT, pad_factor=2.0))
    assert at_bound.ratio == 2.0 and at_bound.findings == []
    assert [f.criterion for f in padded_spread(rows, replace(CRIT, pad_factor=1.99)).findings] == [
        "padded-row log-probs (cut)"]
    assert padded_spread([], CRIT, "batched-row log-probs (own)").what == "batched-row log-probs (own)"
