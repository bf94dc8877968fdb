"""The one "first difference" of token sequences (harness.core.sequences) and the messages built on it."""

from __future__ import annotations

import pytest

from harness.core.sequences import describe_difference, first_difference
from harness.workloads.golden import compare_golden

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("got, expected, index", [
    ([1, 2, 3], [1, 2, 3], None),
    ([1, 9, 3], [1, 2, 3], 1),
    ([1, 2], [1, 2, 3], 2),  # a prefix: the first position only one of them has
    ([1, 2, 3, 4], [1, 2, 3], 3),
    ([], [5], 0),
])
def test_first_difference(got, expected, index):
    assert first_difference(got, expected) == index


def test_describe_difference_names_position_and_both_tokens():
    assert describe_difference([1, 9, 3], [1, 2, 3]) == "first differs at token 1 of 3: got 9, expected 2"
    assert describe_difference([1], [1, 2]) == ("first differs at token 1 of 2: got nothing (it ends after 1 tokens), "
                                                "expected 2")


def test_a_truncated_generation_against_a_golden_file_is_reported_not_raised():
    """Output that stops early is a mismatch message, not a StopIteration from the comparison."""
    golden = {"cases": {"case-a": {"tokens": [4, 5, 6], "margins": [1.0, 1.0, 1.0]}}}
    problems = compare_golden(golden, {"case-a": [4, 5]})
    assert problems == ["case-a: token 2 is nothing (it ends after 2 tokens), golden 6 (margin there 1)"]
