"""A TEST DOUBLE of an asynchronous device (a GPU), for the timing tests: no GPU exists on a CI box.

``VirtualDevice`` keeps the two timelines CUDA gives a host in effect, in virtual milliseconds: the
host's, which moves only by the host's own cost of launching work and by waiting for the device;
and the device's queue, which runs each launched kernel, in order, as soon as the device is free.
A launch returns at once, so a timer that does not wait reads the launch alone, deterministically:
no thread, no sleep and no real clock decides what a test sees. pytest-benchmark times with
``host_clock`` (``--benchmark-timer device_double.host_clock``).

``AsyncEngineDouble`` is an ``Engine`` on it: a prefill and a decode step are a number of kernels
each with a host (launch) cost and a device cost (and, with ``cold``, a decode step at a KV length
the engine has not met before costs that much more, as an eager GPU step's first meeting with a
length did on an H100); ``synchronize`` and ``device_clock`` (spans and
busy time from the timeline itself) are what ``harness.plugin.timing`` calls on a real GPU engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.backends.base import Batch, Engine, EngineInfo, GenerationResult
from harness.backends.device import DeviceClock, DeviceSpan, union_ms
from harness.core.errors import BackendCannot
from harness.core.spec import get_shape


@dataclass
class VirtualDevice:
    host_ms: float = 0.0
    free_at: float = 0.0  # when the device finishes what is queued
    kernels: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of every kernel run

    def launch(self, host_ms: float, device_ms: float) -> float:
        """Queue one kernel: the host pays ``host_ms``; the device runs it for ``device_ms`` once free.
        Returns when it will end on the device."""
        self.host_ms += host_ms
        start = max(self.host_ms, self.free_at)
        self.free_at = start + device_ms
        if device_ms > 0:
            self.kernels.append((start, self.free_at))
        return self.free_at

    def synchronize(self) -> None:
        self.host_ms = max(self.host_ms, self.free_at)


DEVICE = VirtualDevice()


def host_clock() -> float:
    """The host's clock in seconds, as pytest-benchmark's timers are."""
    return DEVICE.host_ms / 1000.0


@dataclass(frozen=True)
class Step:
    """One call's work: ``kernels`` launches, each costing the host ``host_ms`` and the device ``device_ms``."""

    kernels: int
    host_ms: float
    device_ms: float

    def run(self, device: VirtualDevice) -> None:
        for _ in range(self.kernels):
            device.launch(self.host_ms, self.device_ms)

    @property
    def busy_ms(self) -> float:
        return self.kernels * self.device_ms


class VirtualSpan(DeviceSpan):
    """CUDA events on the double: a zero-cost marker queued at the start and at the end."""

    def __init__(self, device: VirtualDevice) -> None:
        self.device = device
        self.begin = self.end = 0.0

    def start(self) -> None:
        self.begin = self.device.launch(0.0, 0.0)

    def stop(self) -> None:
        self.end = self.device.launch(0.0, 0.0)

    @property
    def ms(self) -> float:
        return self.end - self.begin


class VirtualClock(DeviceClock):
    name = "virtual device (test double)"

    def __init__(self, device: VirtualDevice) -> None:
        self.device = device

    def synchronize(self) -> None:
        self.device.synchronize()

    def span(self) -> VirtualSpan:
        return VirtualSpan(self.device)

    def busy_ms(self, call: Callable[[], Any]) -> float:
        self.synchronize()
        before = len(self.device.kernels)
        call()
        self.synchronize()
        return union_ms(self.device.kernels[before:])


class AsyncEngineDouble(Engine):
    """An engine whose calls return once their kernels are queued on ``DEVICE``, as CUDA's do."""

    def __init__(self, prefill: Step, decode: Step, cold: Step | None = None) -> None:
        self.shape = get_shape("smoke")
        self.info = EngineInfo("double", "carbon-tiny", "-", self.shape.name, "virtual", "bf16", 0.0)
        self.prefill_step, self.decode_step_work, self.cold = prefill, decode, cold
        self.prefills = 0
        self.position = 0  # decode steps since the last prefill
        self.met: set[int] = set()  # the positions (KV lengths) decode steps have met

    def prefill(self, batch: Batch) -> torch.Tensor:
        self.prefill_step.run(DEVICE)
        self.prefills += 1
        self.position = 0
        return torch.zeros(batch.size, dtype=torch.long)

    def decode_step(self) -> torch.Tensor:
        self.position += 1
        if self.cold is not None and self.position not in self.met:
            self.cold.run(DEVICE)
        self.met.add(self.position)
        self.decode_step_work.run(DEVICE)
        return torch.zeros(1, dtype=torch.long)

    def generate(self, batch: Batch, max_new_tokens: int, select: Any = None) -> GenerationResult:
        self.prefill(batch)
        for _ in range(max_new_tokens - 1):
            self.decode_step()
        return GenerationResult(torch.zeros(batch.size, max_new_tokens, dtype=torch.long), 0.0)

    def logits(self, batch: Batch) -> torch.Tensor:
        raise BackendCannot("the device double computes nothing")

    def synchronize(self) -> None:
        DEVICE.synchronize()

    def device_clock(self) -> DeviceClock:
        return VirtualClock(DEVICE)
