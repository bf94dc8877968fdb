"""The CPU-time speedup measurement."""

from __future__ import annotations

import pytest

from harness.core.measure import cpu_speedup, fastest_interleaved

pytestmark = pytest.mark.unit


def test_cpu_speedup_keeps_each_sides_fastest_round_and_results():
    calls = {"reference": 0, "candidate": 0}

    def run(side, n):
        calls[side] += 1
        return sorted(range(n, 0, -1))

    speed = cpu_speedup(lambda: run("reference", 200_000), lambda: run("candidate", 20_000), rounds=2,
                        candidate_per_round=3)
    assert calls == {"reference": 2, "candidate": 6}  # interleaved: 3 candidate calls after each reference call
    assert speed.ratio > 1 and speed.reference_s > speed.candidate_s > 0  # 10x the work: faster candidate
    assert speed.reference_result[:2] == [1, 2] and len(speed.candidate_result) == 20_000


def test_cpu_speedup_ratio_is_the_fastest_reference_over_the_fastest_candidate_on_a_known_clock():
    """Hand-computed: reference rounds cost 8 and 6, candidate calls 3, 2, 4, 5, 3, 2 -> 6 / 2 = 3.0."""
    now = [0.0]
    costs = {"r": iter([8.0, 6.0]), "c": iter([3.0, 2.0, 4.0, 5.0, 3.0, 2.0])}

    def call(name):
        def run():
            now[0] += next(costs[name])
            return name
        return run

    speed = cpu_speedup(call("r"), call("c"), rounds=2, candidate_per_round=3, clock=lambda: now[0])
    assert (speed.ratio, speed.reference_s, speed.candidate_s) == (3.0, 6.0, 2.0)
    assert (speed.reference_result, speed.candidate_result) == ("r", "c")


def test_cpu_speedup_rejects_no_rounds():
    with pytest.raises(ValueError, match="rounds=0 and candidate_per_round=3 must be at least 1"):
        cpu_speedup(lambda: None, lambda: None, rounds=0)


def test_fastest_interleaved_rotates_the_order_and_keeps_each_calls_fastest_timed_round():
    """A clock that each call advances by a known cost: the slow first (warm-up) round is untimed,
    each round starts with the next contender, and a call's fastest round is its figure."""
    now, order = [0.0], []
    costs = {"a": iter([9.0, 3.0, 2.0, 4.0]), "b": iter([9.0, 5.0, 6.0, 1.0]), "c": iter([9.0, 7.0, 7.0, 7.0])}

    def call(name):
        def run():
            order.append(name)
            now[0] += next(costs[name])
            return name.upper()
        return run

    best = fastest_interleaved({n: call(n) for n in "abc"}, rounds=3, warmup=1, clock=lambda: now[0])
    assert order == list("abc" "bca" "cab" "abc")
    assert {n: (f.seconds, f.rounds, f.result) for n, f in best.items()} == {
        "a": (2.0, (3.0, 2.0, 4.0), "A"), "b": (1.0, (5.0, 6.0, 1.0), "B"), "c": (7.0, (7.0, 7.0, 7.0), "C")}


@pytest.mark.parametrize("rounds, warmup, calls", [(0, 1, {"a": int}), (1, -1, {"a": int}), (1, 0, {})])
def test_fastest_interleaved_rejects_no_rounds_or_no_calls(rounds, warmup, calls):
    with pytest.raises(ValueError, match=f"rounds={rounds} must be at least 1, warmup={warmup}"):
        fastest_interleaved(calls, rounds=rounds, warmup=warmup)
