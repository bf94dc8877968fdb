"""Percentiles and summaries (the one place every figure is computed)."""

import pytest

from harness.core.measure import Summary, percentile, throughput, time_calls

pytestmark = pytest.mark.unit


def test_percentiles_interpolate_linearly():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 99) == pytest.approx(3.97)
    s = Summary.of(values)
    assert (s.n, s.mean, s.min, s.max) == (4, 2.5, 1.0, 4.0)


@pytest.mark.parametrize("fn", [lambda: percentile([], 50), lambda: Summary.of([]), lambda: throughput(1, 0)])
def test_empty_or_zero_is_an_error(fn):
    with pytest.raises(ValueError):
        fn()


def test_throughput_units():
    assert throughput(180, 500.0) == 360.0


def test_time_calls_counts_every_call():
    calls = []
    ms = time_calls(lambda: calls.append(1), runs=4)
    assert len(ms) == 4 and len(calls) == 4 and all(m >= 0 for m in ms)
