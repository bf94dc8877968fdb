"""The device's own clock, beside the host's wall clock.

A CUDA call returns once its kernels are queued: a host timer around it reads the launch unless the
device is waited on at both ends (``Engine.synchronize``), and the next timed call pays for the work
left queued. Waited on, a GPU's wall time still mixes the device's work with the host's Python that
launches it (a 28-layer decode step on an H100 in eager mode: 2.7 ms of kernels in a 26.6 ms step,
924 launches). So an engine with a device clock also gives:

- ``span``: CUDA events recorded at a call's start and end on the device's stream, the device's own
  clock between them (``device_ms``): from the call's first queued work to its last. Where the host
  launches slower than the kernels run, the device idles between kernels and the span is close to
  the wall time; under CUDA graphs (``--carbon-hf-compile``) it is the device's time;
- ``busy_ms``: the kernels' own time in one call (the torch profiler's CUDA activity, the union of
  the kernels' intervals), from which ``host_bound_fraction = 1 - busy / wall``: the share of a call
  the device sat waiting for the host.

A CPU engine has no device clock (None): its wall time is its device's time, and the figures and
the report say the device time is absent.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Any

import torch


class DeviceSpan(abc.ABC):
    """One call's interval on the device's timeline: entered before the call is queued, left after.
    ``ms`` is read once the device has been waited on."""

    def __enter__(self) -> DeviceSpan:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @property
    @abc.abstractmethod
    def ms(self) -> float: ...


class DeviceClock(abc.ABC):
    """How an engine's device is waited on and timed (``Engine.device_clock``)."""

    name: str = "device"

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until every queued piece of work is done."""

    @abc.abstractmethod
    def span(self) -> DeviceSpan:
        """A span to enter around one call."""

    @abc.abstractmethod
    def busy_ms(self, call: Callable[[], Any]) -> float | None:
        """The device's busy time (kernels running) during one call of ``call``, waited on; None where
        nothing could be recorded (a profiler without device activity)."""


def union_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals: kernels on two streams at once count once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def host_bound_fraction(busy_ms: float, wall_ms: float) -> float:
    """The share of a call's wall time the device was not running kernels (0: the device never waited
    on the host; near 1: the host's launches are the step). Refuses a wall time that is not positive."""
    if not wall_ms > 0:
        raise ValueError(f"wall time {wall_ms!r} ms must be positive")
    return min(1.0, max(0.0, 1.0 - busy_ms / wall_ms))


class CudaSpan(DeviceSpan):
    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.current_stream(device)
        self.begin = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self.begin.record(self.stream)

    def stop(self) -> None:
        self.end.record(self.stream)

    @property
    def ms(self) -> float:
        self.end.synchronize()
        return float(self.begin.elapsed_time(self.end))


class CudaClock(DeviceClock):
    name = "cuda events"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def span(self) -> CudaSpan:
        return CudaSpan(self.device)

    def busy_ms(self, call: Callable[[], Any]) -> float | None:
        """Kernels, copies and sets on the device during ``call`` (CUPTI through the torch profiler),
        as the union of their intervals; None when the profiler recorded no device activity (no CUPTI):
        a busy time of 0 would read as a wholly host-bound call."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        self.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            self.synchronize()
        spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
                 if e.device_type == DeviceType.CUDA]
        return union_ms(spans) / 1000.0 if spans else None  # the profiler's times are in microseconds


def device_clock_for(device: torch.device) -> DeviceClock | None:
    """The clock of a torch device: CUDA events on a GPU, none on a CPU."""
    return CudaClock(device) if device.type == "cuda" else None
