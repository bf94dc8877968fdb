"""Timed calls that wait for the device: every engine benchmark's ``pedantic`` goes through here.

pytest-benchmark reads its timer right before and right after the target. On an asynchronous device
(CUDA) a call returns once its work is queued, so unsynchronized the timer reads the launch, and the
work left queued (by this call, or by the untimed setup before it: test_tkg's re-prefill) lands in
the next timed call. Here:

- the setup ends by waiting for the device, so its work is done before the timer starts;
- the timed call waits for the device at its start and at its end (``Engine.synchronize``);
- where the engine has a device clock (``Engine.device_clock``: CUDA events), a span is taken around
  the call inside those waits and read after the rounds (``device_ms``, its p50 a figure beside the
  wall time's), and with ``busy=True`` one more call, untimed, is profiled for the kernels' own time:
  the host-bound fraction (``harness.backends.device``).

On an engine without a device clock (a CPU, NxDI, a server) the device figures are absent and
``extra_info["device_clock"]`` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.backends.base import Engine
from harness.backends.device import host_bound_fraction
from harness.core.measure import Summary

NO_DEVICE_CLOCK = "none: no device clock on this engine (a CPU's wall time is its device time)"


@dataclass
class DeviceTiming:
    """The device's side of a benchmark's timed rounds: ``clock`` None where the engine has none."""

    clock: str | None
    device_ms: list[float] = field(default_factory=list)  # the timed rounds' spans, in order
    busy_ms: float | None = None  # the kernels' time in one more (profiled, untimed) call

    def figures(self, prefix: str, wall_ms: list[float]) -> dict[str, float]:
        """``{prefix}_device_ms_p50`` and, where measured, ``{prefix}_device_busy_ms`` and
        ``{prefix}_host_bound_fraction`` (against the wall rounds' p50); empty without a clock."""
        if self.clock is None or not self.device_ms:
            return {}
        out = {f"{prefix}_device_ms_p50": Summary.of(self.device_ms).p50}
        if self.busy_ms is not None and wall_ms:
            out[f"{prefix}_device_busy_ms"] = self.busy_ms
            out[f"{prefix}_host_bound_fraction"] = host_bound_fraction(self.busy_ms, Summary.of(wall_ms).p50)
        return out

    def describe(self) -> str:
        return self.clock or NO_DEVICE_CLOCK


def timed_pedantic(benchmark: Any, engine: Engine, target: Callable[..., Any], *, args: tuple = (),
                   setup: Callable[[], Any] | None = None, rounds: int, warmup_rounds: int,
                   busy: bool = False) -> tuple[Any, DeviceTiming]:
    """``benchmark.pedantic(target, ...)`` with the engine's device waited on after the setup and at
    both ends of each timed call; returns the target's last result and the device's timing (its
    spans for the timed rounds only; ``busy``: profile one more call, after a setup of its own)."""
    clock = engine.device_clock()
    spans: list[Any] = []

    def prepared() -> Any:
        out = setup() if setup is not None else None
        engine.synchronize()
        return out

    def timed(*a: Any, **kw: Any) -> Any:
        engine.synchronize()
        if clock is None:
            out = target(*a, **kw)
        else:
            with clock.span() as span:
                out = target(*a, **kw)
            spans.append(span)
        engine.synchronize()
        return out

    result = benchmark.pedantic(timed, args=args, setup=prepared, rounds=rounds, warmup_rounds=warmup_rounds)
    timing = DeviceTiming(clock.name if clock is not None else None)
    benchmark.extra_info["device_clock"] = timing.describe()
    if clock is None or getattr(benchmark, "disabled", False):
        return result, timing
    timing.device_ms = [s.ms for s in spans[warmup_rounds:warmup_rounds + rounds]]
    if busy:
        prepared()
        timing.busy_ms = clock.busy_ms(lambda: target(*args))
        if timing.busy_ms is None:
            benchmark.extra_info["device_busy"] = "not measured: the profiler recorded no device activity"
    return result, timing
