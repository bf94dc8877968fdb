"""Speedup of one implementation over another, measured so that a loaded machine barely moves it.

Why: a wall-clock ratio of medians taken minutes apart swings 2-9x on a shared 2-core box (other
processes take the CPU from one measurement and not the other). Here both run in the same
process, interleaved round by round, timed with process CPU time (time spent descheduled does
not count), and each side keeps its fastest round (interference only ever adds time): the ratio
of minima estimates the ratio of uncontended costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
