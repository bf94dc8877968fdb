"""What the harness's timing hooks cost a TKG step, two ways, reported in extra_info and not gated:

- the decode loop itself: NxDI's CPU mode on the embedded default, the same decode steps with the
  per-sub-model latency hooks attached and detached, interleaved rounds, process CPU time, fastest
  round each (``hook_overhead_fraction``): honest, but a difference of two noisy loops;
- the hooks alone: the same ``SubmodelLatency`` attached to a module that does nothing, so all that is
  timed is what the hooks add to one call (``hook_us_per_step``), against the TKG step
  (``hook_fraction_of_step``): the figure docs/release-check.md quotes.

Both are recorded as measured, negative where noise made them so, with the spread of the rounds'
paired differences (``*_spread``), and say "below resolution" where the rounds disagree on the sign."""

from __future__ import annotations

import time

import pytest
import torch

from harness.backends.base import Batch
from harness.backends.neuron.engine import SubmodelLatency
from harness.carbon.dna import shape_prompts
from harness.core.measure import Difference, interleaved_difference
from harness.core.spec import get_shape

pytestmark = [pytest.mark.perf, pytest.mark.neuron]

STEPS = 24
ROUNDS = 7
CALLS = 20_000


def hook_cost_us() -> Difference:
    """Microseconds the latency hooks add to one call of a module (fastest of interleaved rounds,
    with the rounds' spread)."""
    module, latency, x = torch.nn.Identity(), SubmodelLatency(), torch.zeros(1)
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(ROUNDS):
        for hooked in ((True, False) if r % 2 else (False, True)):
            if hooked:
                latency.attach(module)
            start = time.process_time()
            for _ in range(CALLS):
                module(x)
            times[hooked].append(time.process_time() - start)
            latency.detach()
            latency.ms.clear()
    return interleaved_difference(times[True], times[False]).scaled(1e6 / CALLS)


def decode_cpu_s(engine, batch: Batch, hooked: bool) -> float:
    if not hooked:
        engine.tkg.detach()
    try:
        engine.prefill(batch)
        start = time.process_time()
        for _ in range(STEPS):
            engine.decode_step()
        return time.process_time() - start
    finally:
        if not hooked:
            engine.tkg.attach(engine.model.token_generation_model)


@pytest.mark.fixed_shape("smoke")
def test_timing_hooks_cost_of_a_tkg_step(benchmark, nxdi_cpu_engine, carbon_tokenizer):
    shape = get_shape("smoke")
    engine = nxdi_cpu_engine(shape)
    batch = Batch.from_prompts(carbon_tokenizer, shape_prompts(shape))
    times: dict[bool, list[float]] = {True: [], False: []}

    def compare() -> None:
        for r in range(ROUNDS + 1):  # the first round warms up
            for hooked in ((True, False) if r % 2 else (False, True)):
                t = decode_cpu_s(engine, batch, hooked)
                if r:
                    times[hooked].append(t)

    benchmark.pedantic(compare, rounds=1, iterations=1)
    hooked, bare = min(times[True]), min(times[False])
    loop = interleaved_difference(times[True], times[False]).scaled(1 / bare)  # a fraction of the bare loop
    engine.tkg.ms.clear()
    decode_cpu_s(engine, batch, hooked=True)
    assert len(engine.tkg.ms) == STEPS  # the hooks are back on and time every step
    decode_cpu_s(engine, batch, hooked=False)
    assert len(engine.tkg.ms) == STEPS  # detached, nothing was timed
    hook = hook_cost_us()
    step = hook.scaled(1 / (1e6 * bare / STEPS))  # a fraction of the unhooked TKG step
    benchmark.extra_info.update({
        "hook_us_per_step": hook.value, "hook_us_spread": [hook.low, hook.high],
        "hook_fraction_of_step": step.value, "hook_fraction_spread": [step.low, step.high],
        "hook_cost": hook.describe("µs per call"),
        "hook_overhead_fraction": loop.value, "hook_overhead_spread": [loop.low, loop.high],
        "hook_overhead": loop.scaled(100).describe("% of the bare decode loop"), "hooked_ms_per_step": 1000 * hooked / STEPS,
        "unhooked_ms_per_step": 1000 * bare / STEPS, "rounds": ROUNDS, "steps": STEPS, "clock": "process_time"})
    assert loop.value == pytest.approx(hooked / bare - 1.0)  # as measured: a negative difference stays negative
