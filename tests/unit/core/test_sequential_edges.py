"""The sequential rule's edges a release check's verdict turns on (``harness.core.sequential``): Holm's order
across figures, a figure decided at its second look beside one decided at its first, a change exactly at a
floor, a level or a bound, and the guides an INCONCLUSIVE verdict prints (``pairs_to_decide``,
``spread_to_decide``) held to the rule they predict under every parameter of the design. Each case is one a
generated mutant got wrong with every other test green (nox -s mutation, issue 57)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from harness.core.sequential import (
    FAIL,
    OPEN,
    PASS,
    UNRESOLVED,
    Design,
    Series,
    decide,
    pairs_to_decide,
    p_within_tolerance,
    spread_to_decide,
)
from tests.unit.core.test_sequential import pattern, series

pytestmark = pytest.mark.unit

ONE_LOOK = Design(min_pairs=4, max_pairs=4)
STEADY_30 = [math.log(1.3) + e for e in (0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0)]  # fails at its first look
NARROWING = [0.3, -0.3, 0.25, -0.25, 0.0, 0.0, 0.0, 0.0]  # too wide at 4 pairs, a 30% change ruled out at 8


def test_each_decision_is_its_figures_and_a_decided_figure_leaves_the_others_looked_at():
    first, second = decide([series(STEADY_30, "tkg"), series(NARROWING, "e2e")], Design(), 8)
    assert (first.key, first.state, first.at_pairs, first.looks) == ("tkg", FAIL, 4, [4])
    assert (second.key, second.state, second.at_pairs, second.at_round, second.looks) == ("e2e", PASS, 8, 8, [4, 8])
    assert second.p_fail == 1.0  # four looks' Bonferroni on a p near 1: capped at 1


def weak_p(target: float) -> list[float]:
    """Four pairs of a +10% change whose one-sided p against the 5% tolerance is ``target`` (bisection on the
    spread)."""
    lo, hi = 1e-4, 0.5
    for _ in range(80):
        mid = (lo + hi) / 2
        logs = pattern(math.log(1.10), mid, 4)
        lo, hi = (mid, hi) if p_within_tolerance(logs, 0.05) < target else (lo, mid)
    return pattern(math.log(1.10), (lo + hi) / 2, 4)


def test_holm_steps_from_the_smallest_p_whatever_the_figures_order():
    weak, strong = weak_p(0.035), STEADY_30[:4]  # 0.035: above 5% / 2, under 5%
    assert 0.025 < p_within_tolerance(weak, 0.05) < 0.05 and p_within_tolerance(strong, 0.05) < 0.001
    for order in ((weak, strong), (strong, weak)):
        decisions = decide([series(order[0], "a"), series(order[1], "b")], ONE_LOOK, 4)
        assert [d.state for d in decisions] == [FAIL, FAIL]
        levels = {d.key: d.holm_level for d in decisions}
        assert levels == {"a": pytest.approx(0.025 if order[0] is strong else 0.05),
                          "b": pytest.approx(0.05 if order[0] is strong else 0.025)}


def test_a_p_value_exactly_at_its_holm_level_fails():
    logs = weak_p(0.03)
    p = p_within_tolerance(logs, 0.05)
    d = decide([series(logs)], Design(min_pairs=4, max_pairs=4, alpha=p), 4)[0]
    assert (d.state, d.holm_level) == (FAIL, p)


def test_a_change_exactly_at_the_floor_never_counts():
    at = series([math.log(2.0)] * 4, floor=5.0, base_median=10.0, absolute=5.0)
    assert decide([at], ONE_LOOK, 4)[0].state == UNRESOLVED  # not beyond the floor, and a doubling not ruled out
    beyond = series([math.log(2.0)] * 4, floor=5.0, base_median=10.0, absolute=5.0001)
    assert decide([beyond], ONE_LOOK, 4)[0].state == FAIL


def test_a_bound_under_the_floor_in_the_figures_own_unit_passes():
    """+50% of 0.04 ms is 0.02 ms, under a 0.05 ms floor: passed though 50% is beyond the 30% ruled out."""
    d = decide([series([math.log(1.5)] * 4, floor=0.05, base_median=0.04, absolute=0.02)], ONE_LOOK, 4)[0]
    assert d.state == PASS and d.upper == pytest.approx(0.5)
    wide = decide([series([math.log(1.5)] * 4, floor=0.05, base_median=0.2, absolute=0.02)], ONE_LOOK, 4)[0]
    assert wide.state == UNRESOLVED  # 0.1 ms: not under the floor


def test_a_bound_exactly_at_the_floor_or_at_the_change_ruled_out_does_not_pass():
    upper = decide([series([math.log(1.5)] * 4)], ONE_LOOK, 4)[0].upper
    at_floor = series([math.log(1.5)] * 4, floor=0.04 * upper, base_median=0.04, absolute=0.0)
    assert decide([at_floor], ONE_LOOK, 4)[0].state == UNRESOLVED
    noisy = [0.2, 0.0, 0.3, 0.05]
    upper = decide([series(noisy)], ONE_LOOK, 4)[0].upper
    assert upper > 0.30
    assert decide([series(noisy, tolerance=upper)], ONE_LOOK, 4)[0].state == UNRESOLVED
    assert decide([series(noisy, tolerance=upper * 1.0001)], ONE_LOOK, 4)[0].state == PASS


DESIGNS = [Design(), Design(alpha=0.1), Design(beta=0.2), Design(resolve=0.5), Design(legs=3),
           Design(min_pairs=5, step=3, alpha=0.02, beta=0.1, resolve=0.2, legs=2)]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("mean, figures", [(0.0, 1), (0.12, 1), (0.4, 1), (0.4, 3)])
def test_the_pairs_a_guide_names_are_the_fewest_the_designs_spread_allows(design, mean, figures):
    """``pairs_to_decide`` and ``spread_to_decide`` computed apart: the spread that decides a figure by a cap of
    n pairs admits this one, by n - 1 it does not, for every parameter of the design and Holm's figures."""
    sd = 0.4
    logs = pattern(mean, sd, 4)
    n = pairs_to_decide(logs, 0.05, design, figures=figures)
    assert n is not None and n - 1 >= design.min_pairs
    by = [spread_to_decide(logs, 0.05, replace(design, max_pairs=cap), figures=figures) for cap in (n - 1, n)]
    assert by[0] < sd <= by[1]


def test_a_guides_defaults_one_figure_and_a_thousand_pairs():
    fail = pattern(0.4, 0.4, 4)  # above the 30% ruled out: only a failure decides it, at Holm's level
    one = pairs_to_decide(fail, 0.05, Design())
    assert one == pairs_to_decide(fail, 0.05, Design(), figures=1) != pairs_to_decide(fail, 0.05, Design(), figures=3)
    edge = pattern(math.log1p(0.3) + 0.02807635498046875, 0.25, 4)  # 1001 pairs decide it
    assert pairs_to_decide(edge, 0.3, Design(), limit=1001) == 1001
    assert pairs_to_decide(edge, 0.3, Design()) is None


def test_a_guide_names_more_pairs_than_the_figure_has_and_no_more_than_its_limit():
    strong = pattern(0.4, 0.05, 8)  # decided already at 8: the guide's next count is 9
    assert pairs_to_decide(strong, 0.05, Design(max_pairs=32)) == 9
    logs = pattern(0.12, 0.25, 4)
    n = pairs_to_decide(logs, 0.05, Design())
    assert pairs_to_decide(logs, 0.05, Design(), limit=n) == n and pairs_to_decide(logs, 0.05, Design(),
                                                                                   limit=n - 1) is None


def test_no_spread_decides_a_mean_exactly_at_a_tolerance_at_the_change_ruled_out():
    at = [math.log1p(0.3)] * 2
    assert spread_to_decide(at, 0.3, Design()) is None


def test_more_figures_need_a_quieter_host_to_fail_one():
    beyond = pattern(0.4, 0.1, 4)  # above the 30% ruled out: only a failure decides it
    one, three = (spread_to_decide(beyond, 0.05, Design(), figures=f) for f in (1, 3))
    assert 0 < three < one


@pytest.mark.parametrize("design", [Design(min_pairs=8, max_pairs=8), Design(min_pairs=4, max_pairs=12)])
def test_the_spread_that_fails_a_change_beyond_the_ruled_out_is_the_boundary_at_the_cap(design):
    need = spread_to_decide(pattern(0.4, 0.1, 4), 0.05, design)
    cap = design.max_pairs
    assert decide([series(pattern(0.4, 0.999 * need, cap))], design, cap)[0].state == FAIL
    assert decide([series(pattern(0.4, 1.001 * need, cap))], design, cap)[0].state == UNRESOLVED


def test_two_legs_are_named():
    assert " over 2 legs (Holm" in Design(legs=2).describe() and "legs" not in Design(legs=1).describe()


def test_a_figure_open_between_its_looks_stays_open():
    d = decide([series(NARROWING)], Design(), 7)[0]
    assert (d.state, d.looks) == (OPEN, [4])
    s = Series("tkg", tuple((k, x) for k, x in enumerate(NARROWING, 1)), 0.05)
    assert decide([s], Design(), 8, final=False)[0].state == PASS


def boundary(logs: list[float], n: int) -> tuple[float, float, int]:
    """The guide's own figures at ``n`` pairs of this mean and spread: the t statistic's standard error, the
    mean, and the looks of the design capped at ``n``."""
    from harness.core.sequential import _moments

    mean, sd = _moments(logs)
    return sd / math.sqrt(n), mean, len(Design(min_pairs=4, max_pairs=n).looks)


def test_a_guides_failure_at_exactly_its_level_counts_and_a_pass_at_exactly_its_level_does_not():
    """The guide holds a figure to the rule's own edges: a look-adjusted p equal to alpha fails it (as decide()
    fails a p at its Holm level); a bound whose confidence equals 1 - beta / looks has not ruled the change out."""
    from harness.core.stats import student_t_cdf

    beyond = pattern(0.4, 0.4, 4)
    n = pairs_to_decide(beyond, 0.05, Design())
    se, mean, looks = boundary(beyond, n)
    alpha = looks * (1.0 - student_t_cdf((mean - math.log1p(0.05)) / se, n - 1))
    assert pairs_to_decide(beyond, 0.05, Design(alpha=alpha)) == n
    assert pairs_to_decide(beyond, 0.05, Design(alpha=math.nextafter(alpha, 0))) > n
    within = pattern(0.0, 0.4, 4)
    n = pairs_to_decide(within, 0.05, Design())
    se, mean, looks = boundary(within, n)
    level = student_t_cdf((math.log1p(0.3) - mean) / se, n - 1)
    beta = (1 - level) * looks
    for _ in range(200):  # the beta whose 1 - beta / looks is that confidence to the last bit
        if 1.0 - beta / looks == level:
            break
        beta = math.nextafter(beta, 1.0 if 1.0 - beta / looks > level else 0.0)
    assert 1.0 - beta / looks == level
    assert pairs_to_decide(within, 0.05, Design(beta=beta)) == n + 1


@pytest.mark.parametrize("design", [Design(resolve=1.5), Design(resolve=9.0, legs=2)])
def test_the_pairs_guide_takes_every_resolve_the_cli_takes(design):
    """``--resolve`` takes up to 1000% (``parse_fraction``; a noisy host may rule out only 150%): the guide an
    INCONCLUSIVE verdict prints caps the design's looks with its own error budget, never reading the resolve as
    a beta (which must be under 1) and refusing the user's design."""
    logs = [0.01, 0.03, -0.01, 0.02]
    assert pairs_to_decide(logs, 0.05, design) == 5 == pairs_to_decide(logs, 0.05, Design())
