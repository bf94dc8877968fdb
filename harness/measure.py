"""Timers and percentiles: every figure in a report is computed here, in one place.

Percentiles use linear interpolation (numpy's default), the convention of vLLM's benchmarks and
NxDI's latency collectors, so p50/p99 agree with the reference runs' tooling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
