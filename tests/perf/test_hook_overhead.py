"""What the harness's timing hooks cost a TKG step: NxDI's CPU mode on the embedded default, the same
decode steps with the per-sub-model latency hooks attached and detached, interleaved rounds, process
CPU time, fastest round each. Reported in extra_info (``hook_overhead_fraction``), not gated: the
difference of two fastest rounds is noise at the level the hooks cost."""

from __future__ import annotations

import time

import pytest

from harness.backends.base import Batch
from harness.carbon.dna import shape_prompts
from harness.core.spec import get_shape

pytestmark = [pytest.mark.perf, pytest.mark.neuron]

STEPS = 24
ROUNDS = 7


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
    engine.tkg.ms.clear()
    decode_cpu_s(engine, batch, hooked=True)
    assert len(engine.tkg.ms) == STEPS  # the hooks are back on and time every step
    decode_cpu_s(engine, batch, hooked=False)
    assert len(engine.tkg.ms) == STEPS  # detached, nothing was timed
    benchmark.extra_info.update({
        "hook_overhead_fraction": hooked / bare - 1.0, "hooked_ms_per_step": 1000 * hooked / STEPS,
        "unhooked_ms_per_step": 1000 * bare / STEPS, "rounds": ROUNDS, "steps": STEPS, "clock": "process_time"})
