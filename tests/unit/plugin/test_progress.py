"""A benchmark's rounds show as they end, at the rate pytest's verbosity asks for (issue 32, item 2):
the line and its throttle on a given clock, then real pytest sessions of a real pytest-benchmark
benchmark under -q, the default and -v."""

from __future__ import annotations

import re

import pytest

from harness.plugin.progress import DEFAULT_EVERY_S, RoundProgress, interval_for
from tests.helpers import run_pytest

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_says_which_round_how_long_a_round_takes_and_the_eta():
    clock = Clock()
    p = RoundProgress("test_batch_suite[carbon-tiny-a100-style-bs16]", rounds=5, warmup=1, every_s=0.0, clock=clock)
    clock.now += 30.0
    assert p.round_ended() == ("test_batch_suite[carbon-tiny-a100-style-bs16]: warm-up 1/1 (30 s a round, 30 s so far), "
                               "eta 2 min 30 s")
    clock.now += 30.0
    assert p.round_ended() == ("test_batch_suite[carbon-tiny-a100-style-bs16]: round 1/5 (30 s a round, "
                               "1 min 00 s so far), eta 2 min 00 s")
    for _ in range(4):
        clock.now += 30.0
        line = p.round_ended()
    assert line is not None and line.endswith("round 5/5 (30 s a round, 3 min 00 s so far), done")


def test_the_default_verbosity_shows_only_a_slow_benchmark():
    clock = Clock()
    fast = RoundProgress("fast", rounds=5, warmup=1, every_s=DEFAULT_EVERY_S, clock=clock)
    lines = []
    for _ in range(6):
        clock.now += 0.5
        lines.append(fast.round_ended())
    assert lines == [None] * 6  # three seconds of rounds: pytest's dot is enough
    slow = RoundProgress("slow", rounds=5, warmup=1, every_s=DEFAULT_EVERY_S, clock=clock)
    lines = []
    for _ in range(6):
        clock.now += 10.0
        lines.append(slow.round_ended())
    shown = [line for line in lines if line]
    # every 15 s at most, and the end of a benchmark that was shown
    assert [line.split(": ")[1].split(" (")[0] for line in shown] == ["round 1/5", "round 3/5", "round 5/5"]


@pytest.mark.parametrize("verbosity,expected", [(-2, None), (-1, None), (0, DEFAULT_EVERY_S), (1, 1.0), (2, 0.0)])
def test_verbosity_sets_the_rate(verbosity, expected):
    assert interval_for(verbosity) == expected


BENCH = '''
import time


def test_rounds(benchmark):
    benchmark.extra_info["model"] = "none"
    calls = []
    assert benchmark.pedantic(lambda: calls.append(1) or len(calls), rounds=4, warmup_rounds=1,
                              teardown=lambda: calls.append("t")) == 9
    assert calls.count("t") == 5  # the test's own teardown still runs once a round
'''

LINE = re.compile(r"^\[carbon-harness\] test_rounds: (warm-up|round) (\d)/(\d) \(.*\), (eta .*|done)$", re.M)


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("progress")
    (tmp / "test_bench.py").write_text(BENCH)
    return tmp


@pytest.mark.parametrize("flags,rounds_shown", [(("-q",), []), (("-vv",), ["1/1", "1/4", "2/4", "3/4", "4/4"])])
def test_a_real_session_shows_rounds_by_verbosity(bench_dir, tmp_path, flags, rounds_shown):
    r = run_pytest("--rootdir", str(bench_dir), "-p", "no:randomly", *flags, "test_bench.py",
                   cache_dir=tmp_path / "cache", cwd=bench_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert [f"{m[1]}/{m[2]}" for m in LINE.findall(r.stdout)] == rounds_shown, r.stdout[-3000:]
    if rounds_shown:  # pytest rewrites the test's name before its outcome, on a line of its own
        assert re.search(r"^test_bench.py::test_rounds PASSED", r.stdout, re.M), r.stdout[-3000:]
