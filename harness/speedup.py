"""Speedup of one implementation over another, measured so that a loaded machine barely moves it.

Why: a wall-clock ratio of medians taken minutes apart swings 2-9x on a shared 2-core box (other
processes take the CPU from one measurement and not the other). Here both run in the same
process, interleaved round by round, timed with process CPU time (time spent descheduled does
not count), and each side keeps its fastest round (interference only ever adds time): the ratio
of minima estimates the ratio of uncontended costs.

When a speedup is gated: only when ``-m`` selects perf (``speed_gates_apply``). The main job runs
``pytest -m perf`` and gates speed; a plain ``pytest`` measures and records speedups without
failing on them, so the suite's own tests (plumbing, save/compare) never fail on machine noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Speedup:
    ratio: float  # reference_s / candidate_s
    reference_s: float  # fastest reference round, CPU seconds
    candidate_s: float  # fastest candidate round, CPU seconds
    reference_result: Any
    candidate_result: Any


def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def cpu_speedup(reference: Callable[[], Any], candidate: Callable[[], Any], rounds: int = 3,
                candidate_per_round: int = 3) -> Speedup:
    """``rounds`` reference calls, each followed by ``candidate_per_round`` candidate calls (the
    candidate is the fast one: more samples of it cost little and steady its minimum)."""
    if rounds < 1 or candidate_per_round < 1:
        raise ValueError(f"rounds={rounds} and candidate_per_round={candidate_per_round} must be at least 1")
    ref_best = cand_best = float("inf")
    ref_out = cand_out = None
    for _ in range(rounds):
        t, ref_out = _cpu(reference)
        ref_best = min(ref_best, t)
        for _ in range(candidate_per_round):
            t, cand_out = _cpu(candidate)
            cand_best = min(cand_best, t)
    if cand_best <= 0:
        raise ValueError("the candidate took no measurable CPU time: give it more work")
    return Speedup(ref_best / cand_best, ref_best, cand_best, ref_out, cand_out)


@dataclass(frozen=True)
class Fastest:
    seconds: float  # the fastest timed round
    rounds: tuple[float, ...]  # every timed round, in order
    result: Any  # the last call's result


def fastest_interleaved(calls: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 1,
                        clock: Callable[[], float] = time.process_time) -> dict[str, Fastest]:
    """Every call once per round, the order rotated round by round (none always runs first, or right
    after the same neighbour), and each call's fastest timed round: the same rule as ``cpu_speedup``
    for more than two contenders. ``warmup`` rounds run first, untimed."""
    if rounds < 1 or warmup < 0 or not calls:
        raise ValueError(f"rounds={rounds} must be at least 1, warmup={warmup} at least 0, and calls non-empty")
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, Any] = {}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            results[name] = calls[name]()
            if r >= warmup:
                times[name].append(clock() - start)
    return {name: Fastest(min(times[name]), tuple(times[name]), results[name]) for name in names}


def speed_gates_apply(markexpr: str) -> bool:
    """Whether a ``-m`` expression selects perf explicitly: false with perf false, true with perf
    true (``perf``, ``perf and not slow``, ``compat or perf`` do; ``""`` and ``not unit`` don't)."""
    if not markexpr or not markexpr.strip():
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m parser (private, stable since 6)

        expr = Expression.compile(markexpr)
    except ImportError:
        return "perf" in markexpr.replace("not perf", "")
    return bool(expr.evaluate(lambda name, **kw: name == "perf")) and not expr.evaluate(lambda name, **kw: False)
