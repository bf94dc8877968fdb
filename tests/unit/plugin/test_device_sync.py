"""Every timed call waits for the device (issue 40, item 1), shown on a test double of a GPU: an
engine whose calls return once their kernels are queued (tests/unit/plugin/device_double.py), timed
by a real pytest-benchmark in a child pytest session with the double's host clock as its timer.

The child's tests: ``harness.plugin.timing.timed_pedantic`` reads each TKG round as the step's own
device work, whatever the untimed setup (a re-prefill) left queued; the same rounds unsynchronized
read the launches alone (the double is asynchronous, so the first test cannot pass without the
waits); waiting inside the call but not after the setup charges the prefill to the next round (the
test_tkg bug); the device span and the host-bound fraction are the double's own timeline's; and on an
engine whose first step at a KV length costs more (``cold``), TKG's rounds read warm steps only after
``DecodeRounds.warm`` has taken their positions (without it, each round read the cold step)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.backends.device import host_bound_fraction, union_ms
from tests.helpers import run_pytest

pytestmark = pytest.mark.unit

CHILD = '''
import pytest

from hypothesis import given, settings, strategies as st

from harness.backends.base import Batch
from harness.plugin.decode_rounds import DecodeRounds
from harness.plugin.timing import timed_pedantic
from device_double import AsyncEngineDouble, Step

PREFILL = Step(kernels=4, host_ms=0.01, device_ms=10.0)  # 40 ms of device work, 0.04 ms to launch
DECODE = Step(kernels=10, host_ms=0.01, device_ms=0.5)  # device-bound: the last kernel ends 5.01 ms in
HOST_BOUND = Step(kernels=10, host_ms=0.5, device_ms=0.1)  # the launches are the step: 5.1 ms, 1 ms busy
COLD = Step(kernels=1, host_ms=36.0, device_ms=0.0)  # a first step at a KV length: ~36 ms of host (H100, eager)
DECODE_WALL, HOST_BOUND_WALL = 0.01 + 10 * 0.5, 10 * 0.5 + 0.1
BATCH = Batch.from_ids([[1, 2, 3]])


def rounds_ms(benchmark):
    return [t * 1000.0 for t in benchmark.stats.stats.data]


def test_each_tkg_round_reads_its_step_and_none_of_the_setup_prefill(benchmark):
    engine = AsyncEngineDouble(PREFILL, DECODE)
    _, device = timed_pedantic(benchmark, engine, engine.decode_step, setup=DecodeRounds(engine, BATCH, 3).ready, rounds=7,
                               warmup_rounds=1)
    assert engine.prefills == 3
    assert rounds_ms(benchmark) == pytest.approx([DECODE_WALL] * 7, abs=1e-9)
    assert device.device_ms == pytest.approx([DECODE_WALL] * 7, abs=1e-9)
    assert benchmark.extra_info["device_clock"] == "virtual device (test double)"


def test_unsynchronized_the_same_rounds_read_the_launches_alone(benchmark):
    engine = AsyncEngineDouble(PREFILL, DECODE)
    benchmark.pedantic(engine.decode_step, setup=DecodeRounds(engine, BATCH, 3).ready, rounds=7, warmup_rounds=1)
    assert rounds_ms(benchmark) == pytest.approx([10 * 0.01] * 7, abs=1e-9)  # 5 ms of device work unseen


def test_waiting_inside_the_call_only_charges_the_setup_prefill_to_the_next_round(benchmark):
    engine = AsyncEngineDouble(PREFILL, DECODE)

    def waited():
        engine.synchronize()
        out = engine.decode_step()
        engine.synchronize()
        return out

    benchmark.pedantic(waited, setup=DecodeRounds(engine, BATCH, 3).ready, rounds=6, warmup_rounds=0)
    ms = rounds_ms(benchmark)
    assert ms[0] > PREFILL.busy_ms and ms[3] > PREFILL.busy_ms  # the rounds after a re-prefill
    assert [ms[i] for i in (1, 2, 4, 5)] == pytest.approx([DECODE_WALL] * 4, abs=1e-9)


@pytest.mark.parametrize("step,wall", [(DECODE, DECODE_WALL), (HOST_BOUND, HOST_BOUND_WALL)],
                         ids=["device-bound", "host-bound"])
def test_device_span_and_host_bound_fraction(benchmark, step, wall):
    engine = AsyncEngineDouble(PREFILL, step)
    _, device = timed_pedantic(benchmark, engine, engine.decode_step, setup=DecodeRounds(engine, BATCH, 3).ready, rounds=3,
                               warmup_rounds=0, busy=True)
    figures = device.figures("tkg", rounds_ms(benchmark))
    assert device.busy_ms == pytest.approx(step.busy_ms)
    assert figures["tkg_device_ms_p50"] == pytest.approx(wall)
    assert figures["tkg_host_bound_fraction"] == pytest.approx(1 - step.busy_ms / wall)


def test_after_the_warm_pass_tkg_rounds_read_warm_steps(benchmark):
    engine = AsyncEngineDouble(PREFILL, DECODE, cold=COLD)
    schedule = DecodeRounds(engine, BATCH, 5)
    warmed = schedule.warm(1 + 7)
    timed_pedantic(benchmark, engine, engine.decode_step, setup=schedule.ready, rounds=7, warmup_rounds=1)
    assert rounds_ms(benchmark) == pytest.approx([DECODE_WALL] * 7, abs=1e-9)
    assert schedule.positions == warmed == [1, 2, 3, 4, 5, 1, 2, 3]


def test_without_the_warm_pass_each_round_reads_a_lengths_first_step(benchmark):
    engine = AsyncEngineDouble(PREFILL, DECODE, cold=COLD)
    schedule = DecodeRounds(engine, BATCH, 5)
    timed_pedantic(benchmark, engine, engine.decode_step, setup=schedule.ready, rounds=7, warmup_rounds=1)
    ms = rounds_ms(benchmark)
    assert ms[:4] == pytest.approx([COLD.host_ms + DECODE_WALL] * 4, abs=1e-9)  # positions 2..5, met first here
    assert ms[4:] == pytest.approx([DECODE_WALL] * 3, abs=1e-9)  # 1, 2, 3 again after the re-prefill


@settings(max_examples=60, deadline=None)
@given(steps=st.integers(1, 40), calls=st.integers(1, 120))
def test_the_rounds_after_a_warm_pass_take_its_positions(steps, calls):
    schedule = DecodeRounds(AsyncEngineDouble(PREFILL, DECODE), BATCH, steps)
    warmed = schedule.warm(calls)
    for _ in range(calls):
        schedule.ready()
    assert schedule.positions == warmed
    assert warmed == [i % steps + 1 for i in range(calls)]


@pytest.mark.parametrize("steps,calls,match", [(0, 1, "steps_per_generation=0 must be at least 1"),
                                               (3, 0, "calls=0 must be at least 1")])
def test_decode_rounds_refuse_what_times_no_step(steps, calls, match):
    with pytest.raises(ValueError, match=match):
        DecodeRounds(AsyncEngineDouble(PREFILL, DECODE), BATCH, steps).warm(calls)
'''


@pytest.fixture(scope="module")
def child_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("device-sync")
    (tmp / "test_child.py").write_text(CHILD)
    shutil.copy(Path(__file__).with_name("device_double.py"), tmp / "device_double.py")
    return tmp


def test_timed_calls_wait_for_an_asynchronous_device(child_dir, tmp_path):
    r = run_pytest("--rootdir", str(child_dir), "-p", "no:randomly", "-q", "test_child.py",
                   "--benchmark-timer=device_double.host_clock", cache_dir=tmp_path / "cache", cwd=child_dir)
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert "10 passed" in out, out


def test_union_counts_overlapping_kernels_once():
    assert union_ms([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == pytest.approx(4.0)
    assert union_ms([]) == 0.0


@pytest.mark.parametrize("busy,wall,expected", [(2.7, 26.6, 1 - 2.7 / 26.6), (30.0, 26.6, 0.0), (0.0, 5.0, 1.0)])
def test_host_bound_fraction_is_the_share_the_device_waited(busy, wall, expected):
    assert host_bound_fraction(busy, wall) == pytest.approx(expected)


def test_host_bound_fraction_refuses_a_wall_time_that_is_not_positive():
    with pytest.raises(ValueError, match="wall time 0 ms must be positive"):
        host_bound_fraction(1.0, 0)
