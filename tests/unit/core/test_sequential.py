"""The sequential rule of a release check on drawn log ratios (the rates through
``harness.release.power.simulate``, the same replay the verdict runs): its looks, its Holm step-down, what it
decides and when it stops, and its error rates, which must hold on any draw (the seeds are random
and named in the failure)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from harness.core.sequential import (
    FAIL,
    OPEN,
    PASS,
    UNRESOLVED,
    Decision,
    Design,
    Series,
    decide,
    p_within_tolerance,
    pairs_to_decide,
    settled,
    spread_to_decide,
)
from harness.core.stats import paired_ratio_ci
from harness.release.power import Family, normal, simulate

pytestmark = pytest.mark.unit


def series(logs, key="tkg", tolerance=0.05, **kw) -> Series:
    return Series(key, tuple((k + 1, float(x)) for k, x in enumerate(logs)), tolerance, **kw)


@pytest.mark.parametrize("kwargs, looks", [({}, (4, 8, 12, 16)), ({"min_pairs": 5, "max_pairs": 10, "step": 2},
                                                                 (5, 7, 9, 10)),
                                           ({"min_pairs": 6, "max_pairs": 6}, (6,))])
def test_looks_run_from_the_minimum_to_the_cap(kwargs, looks):
    assert Design(**kwargs).looks == looks


@pytest.mark.parametrize("kwargs, message", [({"min_pairs": 2}, "need 3 <= min <= max"),
                                             ({"min_pairs": 8, "max_pairs": 6}, "need 3 <= min <= max"),
                                             ({"alpha": 0.0}, "alpha=0.0 must be between 0 and 1"),
                                             ({"resolve": -0.1}, "resolve=-0.1 must be a positive"),
                                             ({"legs": 0}, "legs=0 must be at least 1")])
def test_a_design_that_cannot_decide_is_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Design(**kwargs)


def test_nothing_is_decided_before_the_first_look_and_a_steady_slowdown_fails_at_it():
    slow = series([math.log(1.3) + e for e in (0.01, -0.01, 0.02, -0.02, 0.0, 0.01)])
    assert decide([slow], Design(), 3)[0].state == OPEN  # three pairs: no look yet
    d = decide([slow], Design(), 4)[0]
    assert d.state == FAIL and d.at_pairs == 4 and d.holm_level == pytest.approx(0.05)


def test_identical_code_passes_once_a_large_change_is_ruled_out():
    d = decide([series([0.02, -0.03, 0.01, 0.0])], Design(), 4)[0]
    assert d.state == PASS and d.upper is not None and d.upper < 0.30


def test_noise_too_wide_for_the_cap_is_unresolved_not_passed():
    wide = [0.5, -0.5, 0.4, -0.45, 0.55, -0.5]
    assert decide([series(wide)], Design(min_pairs=6, max_pairs=6), 6)[0].state == UNRESOLVED
    assert decide([series(wide)], Design(), 6)[0].state == OPEN  # the cap (16) is not reached: look again later
    assert decide([series(wide)], Design(), 6, final=True)[0].state == UNRESOLVED


def test_a_change_under_the_floor_passes_even_when_large():
    doubled = series([math.log(2.0)] * 4, floor=0.05, base_median=0.01, absolute=0.01)
    assert decide([doubled], Design(), 4)[0].state == PASS
    real = series([math.log(2.0)] * 4, floor=0.05, base_median=10.0, absolute=10.0)
    assert decide([real], Design(), 4)[0].state == FAIL


def borderline(spread: float, key: str = "borderline") -> Series:
    """+10% with a spread whose p-value against the 5% tolerance is set by ``spread``."""
    return series(math.log(1.10) + spread * np.array([1.0, -1.0, 1.2, -0.8]), key)


def test_holm_holds_the_weakest_of_several_figures_to_a_stricter_level():
    rng = np.random.Generator(np.random.PCG64(7))
    clear = series(math.log(1.5) + rng.normal(0, 0.01, 4), "clear")
    flat = [series([0.0, 0.01, -0.01, 0.0], f"flat{i}") for i in range(16)]
    one_look = Design(min_pairs=4, max_pairs=4)
    strong, weak = borderline(0.01), borderline(0.02)  # p 0.0019 and 0.012: both under 5%, one under 5% / 17
    for figure in (strong, weak):
        alone = decide([figure], one_look, 4)[0]
        assert alone.state == FAIL and alone.holm_level == pytest.approx(0.05)
    first, second = decide([clear, strong] + flat, one_look, 4)[:2]
    assert first.state == FAIL and first.holm_level == pytest.approx(0.05 / 18)
    assert second.state == FAIL and second.holm_level == pytest.approx(0.05 / 17)
    held = decide([clear, weak] + flat, one_look, 4, final=False)[1]
    assert held.state == PASS and 0.05 / 17 < held.p_fail < 0.05  # Holm stops at it: not failed at 5%


def test_p_fail_pays_for_every_planned_look():
    """Bonferroni over looks: the p-value a figure is held to is its one-sided p times the number of
    looks the design plans, so a figure that fails a single look's 5% can stand at four looks."""
    logs = [math.log(1.10) + x for x in (0.035, -0.035, 0.042, -0.028)]
    p = p_within_tolerance(logs, 0.05)
    assert 0.05 / 4 < p < 0.05
    d = decide([series(logs)], Design(), 4)[0]  # looks at 4, 8, 12, 16
    assert d.p_fail == pytest.approx(4 * p) and d.state == PASS  # not failed; a 30% change ruled out
    single = decide([series(logs)], Design(min_pairs=4, max_pairs=4), 4)[0]
    assert single.p_fail == pytest.approx(p) and single.state == FAIL


def test_legs_hold_each_check_to_its_share_of_alpha():
    """decide() with legs > 1: a figure that fails one check at 5% stands in one leg of three (5% / 3),
    and one clear enough fails there at that level."""
    one_look = Design(min_pairs=4, max_pairs=4)
    weak = borderline(0.025)  # p 0.022
    assert decide([weak], one_look, 4)[0].state == FAIL
    legs = Design(min_pairs=4, max_pairs=4, legs=3)
    held = decide([weak], legs, 4, final=False)[0]
    assert held.state == PASS and held.p_fail > 0.05 / 3  # not failed: 30% ruled out
    strong = decide([borderline(0.01)], legs, 4)[0]  # p 0.0019
    assert strong.state == FAIL and strong.holm_level == pytest.approx(0.05 / 3)


def test_legs_share_the_false_alarm_budget():
    assert Design(legs=3).fail_alpha == pytest.approx(0.05 / 3)


def test_rounds_a_figure_lacks_are_skipped_not_shifted():
    # pairs at rounds 2..5 (round 1 lost): the first look comes at round 5, with four pairs
    s = Series("tkg", tuple((k, 0.0) for k in (2, 3, 4, 5)), 0.05)
    assert decide([s], Design(), 4)[0].state == OPEN
    d = decide([s], Design(), 5)[0]
    assert d.state == PASS and d.at_pairs == 4 and d.at_round == 5


def test_decisions_are_final_and_the_check_settles_when_none_is_open():
    design = Design()
    logs = [0.0, 0.01, -0.01, 0.0] + [0.9] * 12  # passes at 4; later pairs do not reopen it
    d = decide([series(logs)], design, 16)[0]
    assert d.state == PASS and d.at_pairs == 4 and d.looks == [4]  # never looked at again
    assert d.upper == decide([series(logs[:4])], design, 4)[0].upper
    assert settled([d]) and not settled(decide([series(logs[:4] + [0.9, 0.9])], design, 3))


def test_the_upper_bound_is_the_one_sided_t_bound_of_the_mean_log_ratio():
    logs = [0.05, -0.02, 0.11, 0.03]
    d = decide([series(logs)], Design(min_pairs=4, max_pairs=4, beta=0.05), 4)[0]
    ci = paired_ratio_ci([1.0] * 4, list(np.exp(logs)), confidence=0.90)  # two-sided 90% = one-sided 95%
    assert d.upper == pytest.approx(ci.high - 1.0, rel=1e-6)
    looks = decide([series(logs)], Design(), 4)[0]  # four planned looks spread beta: one-sided 1 - 0.05 / 4
    ci = paired_ratio_ci([1.0] * 4, list(np.exp(logs)), confidence=1 - 2 * 0.05 / 4)
    assert looks.upper == pytest.approx(ci.high - 1.0, rel=1e-6)


def test_a_figure_at_the_tolerance_false_alarms_at_most_alpha():
    """One figure exactly at the tolerance (the worst case of "within tolerance"), quiet noise: the rule
    fails it in at most 1 in 20 checks. The draw is random; its seed is in the message. (Whole families at
    the measured noise: tests/unit/release/test_power_aims.py.)"""
    seed = int.from_bytes(os.urandom(4), "little")
    rate = simulate(Design(), normal(0.05), Family.uniform(1), 0.05, "all", 300, seed).rate("FAIL")
    # 300 checks: a true rate of 5% exceeds 9% with probability < 0.3%
    assert rate <= 0.09, f"seed {seed}: {rate:.3f}"


def test_a_figure_that_lost_a_pair_gets_its_last_look_at_the_cap():
    logs = (0.3, -0.3, 0.25, -0.25, 0.0, 0.02, -0.02)  # too wide to pass at 4 pairs, narrow enough at 7
    s = Series("tkg", tuple(zip(range(2, 9), logs)), 0.05)  # rounds 2..8: 7 pairs, round 1 lost
    design = Design(min_pairs=4, max_pairs=8, resolve=0.5)
    assert decide([s], design, 5)[0].state == OPEN
    d = decide([s], design, 8)[0]
    assert d.looks == [4, 7] and d.state == PASS and d.at_pairs == 7


def test_a_late_look_needs_the_designs_minimum_of_pairs():
    """A figure that lost pairs gets a last look at the final round only with at least ``min_pairs``:
    five steady pairs pass at a 5-pair minimum, and stay open (unresolved) at a 6-pair one."""
    s = Series("tkg", tuple((k, 0.001 * (-1) ** k) for k in range(4, 9)), 0.05)  # rounds 4..8: 5 pairs
    assert decide([s], Design(min_pairs=5, max_pairs=8), 8)[0].state == PASS
    d = decide([s], Design(min_pairs=6, max_pairs=8), 8)[0]
    assert d.state == UNRESOLVED and d.looks == []


def pattern(mean: float, sd: float, n: int) -> list[float]:
    """``n`` log ratios with exactly this mean and sample standard deviation (+a, -a, ..., and 0 when
    ``n`` is odd)."""
    even = n - n % 2
    a = sd * math.sqrt((n - 1) / even)
    return [mean + a * (-1) ** k for k in range(even)] + [mean] * (n % 2)


@pytest.mark.parametrize("mean", [0.0, 0.05, 0.12, 0.25])
def test_the_pairs_estimated_to_decide_a_figure_do_decide_it_at_that_spread(mean):
    sd = 0.25
    n = pairs_to_decide(pattern(mean, sd, 4), 0.05, Design(), figures=1)
    assert n is not None and n > 4
    # n pairs with the same mean and spread, looked at once, at n: decided
    assert decide([series(pattern(mean, sd, n))], Design(min_pairs=n, max_pairs=n), n)[0].state in (PASS, FAIL)
    # and n is the fewest: the spread that decides it by a cap of n pairs admits this one, by n - 1 it does not
    by = [spread_to_decide(pattern(mean, sd, 4), 0.05, Design(max_pairs=cap)) for cap in (n - 1, n)]
    assert by[0] < sd <= by[1]
    wider = pairs_to_decide(pattern(mean, 2 * sd, 4), 0.05, Design(), figures=1)
    assert wider is None or wider > n


def test_the_spread_estimated_to_decide_a_figure_is_the_boundary_at_the_cap():
    design = Design(min_pairs=8, max_pairs=8)  # one look, at 8 pairs
    for mean in (0.02, 0.15):  # a pass to rule out 30%, a failure beyond 5%
        need = spread_to_decide(pattern(mean, 0.3, 4), 0.05, design)
        assert need is not None and need > 0
        assert decide([series(pattern(mean, 0.98 * need, 8))], design, 8)[0].state in (PASS, FAIL)
        assert decide([series(pattern(mean, 1.02 * need, 8))], design, 8)[0].state == UNRESOLVED
    assert pairs_to_decide([0.1, math.nan, 0.2], 0.05, design) is None
    assert spread_to_decide([0.1, math.nan, 0.2], 0.05, design) is None


def test_a_tolerance_above_the_resolve_is_what_a_pass_rules_out():
    """Trust IV: with a 50% tolerance (above the default 30% resolve), a steady +40% change is within it and
    passes; a +60% one, beyond it, fails. A rule that ruled out only the resolve would leave the first open."""
    steady = [math.log(1.40) + e for e in (0.004, -0.003, 0.002, -0.001)]
    assert decide([series(steady, tolerance=0.5)], Design(), 4)[0].state == PASS
    beyond = [math.log(1.60) + e for e in (0.004, -0.003, 0.002, -0.001)]
    assert decide([series(beyond, tolerance=0.5)], Design(), 4)[0].state == FAIL


# survivors of the generated mutants (nox -s mutation, issue 57): the design's bounds, its words, a decision's record
@pytest.mark.parametrize("kw, message", [
    (dict(min_pairs=2, max_pairs=8), r"^min_pairs=2, max_pairs=8: need 3 <= min <= max \(an interval from the spread "
                                     r"between rounds needs at least two degrees of freedom\)$"),
    (dict(min_pairs=9, max_pairs=8), "min_pairs=9, max_pairs=8: need 3 <= min <= max"),
    (dict(step=0), r"^step=0 must be at least 1$"),
    (dict(alpha=1.0), r"^alpha=1.0 must be between 0 and 1$"), (dict(beta=0.0), r"^beta=0.0 must be between 0 and 1$"),
    (dict(resolve=0.0), r"^resolve=0.0 must be a positive fraction \(0.30 for 30%\)$"),
    (dict(legs=0), r"^legs=0 must be at least 1$"),
])
def test_a_design_outside_its_bounds_is_refused_naming_the_value(kw, message):
    with pytest.raises(ValueError, match=message):
        Design(**kw)


def test_a_design_at_its_bounds_is_accepted():
    assert Design(min_pairs=3, max_pairs=3, step=1).looks == (3,)
    assert Design(min_pairs=3, max_pairs=5, step=1, alpha=0.999, beta=0.001, resolve=1e-9).looks == (3, 4, 5)


def test_a_design_says_its_looks_its_budgets_and_its_legs():
    assert Design().describe() == ("looks at 4, 8, 12, 16 pairs; FAIL: beyond tolerance, family-wise false alarm <= 5% "
                                   "(Holm across figures, Bonferroni across looks); PASS: a 30% change ruled out at 95%")
    assert Design(min_pairs=5, max_pairs=5, alpha=0.1, beta=0.2, resolve=0.25, legs=3).describe() == (
        "5 pairs; FAIL: beyond tolerance, family-wise false alarm <= 10% over 3 legs (Holm across figures, Bonferroni "
        "across looks); PASS: a 25% change ruled out at 80%")
    assert Design(min_pairs=4, max_pairs=10, step=4).looks == (4, 8, 10)


def test_a_decisions_record_names_each_field():
    d = Decision("k", state="fail", at_pairs=4, at_round=4, p_fail=0.001, holm_level=0.0125, upper=0.4, looks=[4])
    assert d.to_dict() == {"state": "fail", "at_pairs": 4, "at_round": 4, "p_fail": 0.001, "holm_level": 0.0125,
                           "upper_bound": 0.4, "looks": [4]}


def test_pairs_without_spread_are_within_tolerance_only_up_to_it_and_guide_no_count():
    import math

    at = [math.log1p(0.25)] * 4
    assert p_within_tolerance(at, 0.25) == 1.0  # exactly at the tolerance: within it
    assert p_within_tolerance([math.log1p(0.5)] * 4, 0.25) == 0.0
    assert pairs_to_decide([0.1] * 5, 0.1, Design()) is None  # no spread to go by
    assert pairs_to_decide([0.1, 0.2], 0.1, Design(min_pairs=3, max_pairs=8)) is not None  # two pairs are enough
    assert pairs_to_decide([0.1], 0.1, Design()) is None and pairs_to_decide([0.1, float("nan"), 0.2], 0.1,
                                                                            Design()) is None
    assert spread_to_decide([0.1, 0.2], 0.05, Design()) is not None and spread_to_decide([0.1], 0.05, Design()) is None
