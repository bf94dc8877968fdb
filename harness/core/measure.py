"""Timers and percentiles: every figure in a report is computed here, in one place.

Percentiles use linear interpolation (numpy's default), the convention of vLLM's benchmarks and
NxDI's latency collectors, so p50/p99 agree with the reference runs' tooling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    if len(values) == 0:
        raise ValueError("percentile of an empty sample: nothing was measured")
    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True)
class Summary:
    """Latency summary of one sample, in the unit it was given."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Summary":
        arr = np.asarray(values, dtype=float)
        if arr.size == 0:
            raise ValueError("summary of an empty sample: nothing was measured")
        return cls(int(arr.size), float(arr.mean()), percentile(arr, 50), percentile(arr, 90), percentile(arr, 99),
                   float(arr.min()), float(arr.max()))


class Timer:
    """perf_counter timing that waits for the device first (CUDA, XLA) so asynchronous work is
    counted in the step that launched it."""

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self._sync = synchronize or (lambda: None)

    def __enter__(self) -> "Timer":
        self._sync()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sync()
        self.ms = (time.perf_counter() - self.start) * 1000.0


def time_calls(fn: Callable[[], object], runs: int, synchronize: Callable[[], None] | None = None) -> list[float]:
    """Milliseconds of ``runs`` calls of ``fn``."""
    out = []
    for _ in range(runs):
        with Timer(synchronize) as t:
            fn()
        out.append(t.ms)
    return out


def throughput(count: float, ms: float) -> float:
    """Items per second from a count and a duration in milliseconds."""
    if ms <= 0:
        raise ValueError(f"duration {ms} ms must be positive")
    return count / (ms / 1000.0)


@dataclass(frozen=True)
class Speedup:
    ratio: float  # reference_s / candidate_s
    reference_s: float  # fastest reference round, CPU seconds
    candidate_s: float  # fastest candidate round, CPU seconds
    reference_result: Any
    candidate_result: Any


def _cpu(fn: Callable[[], Any], clock: Callable[[], float] = time.process_time) -> tuple[float, Any]:
    start = clock()
    out = fn()
    return clock() - start, out


def cpu_speedup(reference: Callable[[], Any], candidate: Callable[[], Any], rounds: int = 3,
                candidate_per_round: int = 3, clock: Callable[[], float] = time.process_time) -> Speedup:
    """``rounds`` reference calls, each followed by ``candidate_per_round`` candidate calls (the
    candidate is the fast one: more samples of it cost little and steady its minimum)."""
    if rounds < 1 or candidate_per_round < 1:
        raise ValueError(f"rounds={rounds} and candidate_per_round={candidate_per_round} must be at least 1")
    ref_best = cand_best = float("inf")
    ref_out = cand_out = None
    for _ in range(rounds):
        t, ref_out = _cpu(reference, clock)
        ref_best = min(ref_best, t)
        for _ in range(candidate_per_round):
            t, cand_out = _cpu(candidate, clock)
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


@dataclass(frozen=True)
class Difference:
    """An added cost timed as (with - without) over interleaved rounds. ``value``: the fastest round
    with it less the fastest round without, as measured: noise can make it negative, and clamping
    it to 0 would hide that. ``low`` / ``high``: the range of the rounds' paired differences, its
    spread; where the rounds disagree on its sign, the cost is below what the loops resolve."""

    value: float
    low: float
    high: float

    @property
    def below_resolution(self) -> bool:
        return self.low <= 0.0 <= self.high

    def scaled(self, factor: float) -> "Difference":
        """The same difference in another unit (``factor`` > 0), e.g. seconds per loop to µs per call."""
        if not factor > 0:
            raise ValueError(f"factor={factor!r} must be > 0")
        return Difference(self.value * factor, self.low * factor, self.high * factor)

    def describe(self, unit: str) -> str:
        text = f"{self.value:+.3g} {unit} (rounds {self.low:+.3g} to {self.high:+.3g} {unit})"
        return f"below resolution: {text}" if self.below_resolution else text


def interleaved_difference(with_: Sequence[float], without: Sequence[float]) -> Difference:
    """``Difference`` of the timed rounds with and without an addition, round ``i`` of each run
    next to the other's (``with_[i]`` paired with ``without[i]``)."""
    if not with_ or len(with_) != len(without):
        raise ValueError(f"{len(with_)} rounds with and {len(without)} without: give the same number, at least 1")
    pairs = [w - o for w, o in zip(with_, without)]
    return Difference(min(with_) - min(without), min(pairs), max(pairs))


def latency_stats(name: str, values_ms: Sequence[float]) -> dict[str, float]:
    """``{mean,median,std,p90,p99}_{name}_ms`` of one sample (population std, as numpy / vLLM)."""
    if len(values_ms) == 0:
        return {}
    arr = np.asarray(values_ms, dtype=float)
    return {f"mean_{name}_ms": float(arr.mean()), f"median_{name}_ms": percentile(arr, 50),
            f"std_{name}_ms": float(arr.std()), f"p90_{name}_ms": percentile(arr, 90),
            f"p99_{name}_ms": percentile(arr, 99)}
