"""Percentiles and summaries (the one place every figure is computed)."""

import pytest

from harness.core.measure import Summary, interleaved_difference, percentile, throughput, time_calls

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


def test_a_noisy_negative_difference_is_kept_and_said_to_be_below_resolution():
    """Process CPU seconds of a loop with and without the hooks, round by round, where noise made
    the fastest round with them faster than the fastest without: the difference stays negative."""
    d = interleaved_difference([0.0512, 0.0498, 0.0507], [0.0503, 0.0509, 0.0500])
    assert d.value == pytest.approx(0.0498 - 0.0500)  # not 0
    assert (d.low, d.high) == (pytest.approx(-0.0011), pytest.approx(0.0009))
    assert d.below_resolution
    us = d.scaled(1e6 / 20_000)
    assert us.value == pytest.approx(-0.01) and us.describe("µs").startswith("below resolution: -0.01 µs")


def test_a_difference_every_round_agrees_on_is_resolved():
    d = interleaved_difference([0.062, 0.061, 0.063], [0.050, 0.051, 0.0505])
    assert d.value == pytest.approx(0.011) and not d.below_resolution
    assert d.describe("s") == "+0.011 s (rounds +0.01 to +0.0125 s)"


@pytest.mark.parametrize("with_, without", [([], []), ([1.0, 2.0], [1.0])])
def test_interleaved_difference_needs_paired_rounds(with_, without):
    with pytest.raises(ValueError, match="give the same number"):
        interleaved_difference(with_, without)
