"""Work counts compared (``harness.core.work``): what moved, named; a record that stays small and adds up."""

from __future__ import annotations

import pytest

from harness.core.work import WorkCount, changed, describe_change, kept, unstable

pytestmark = pytest.mark.unit


def test_a_record_keeps_the_largest_counts_and_sums_the_rest():
    assert kept({"a": 5, "b": 3, "c": 1, "d": 1}, 2) == {"a": 5, "b": 3, "(other)": 2}


def test_a_grown_step_is_named_by_its_counts_and_the_function_that_grew():
    base = WorkCount(3, 4000.0, {"m.f": 100.0, "m.g": 50.0}, 144.0, {"mm": 20.0})
    new = WorkCount(3, 4400.0, {"m.f": 100.0, "m.g": 50.0, "plant._planted_host_work": 400.0}, 144.0, {"mm": 20.0})
    lines = describe_change(base, new)
    assert lines[0] == "+400 Python calls/step (4000 -> 4400, +10.0%)"
    assert "+400 Python calls/step in plant._planted_host_work" in lines
    assert describe_change(base, base) == [] and changed({"a": 1.0}, {"a": 1.0}) == []


def test_counts_that_differ_between_rounds_are_unstable():
    one = WorkCount(3, 4000.0, aten_ops=144.0)
    assert not unstable([one, one]) and unstable([one, WorkCount(3, 4001.0, aten_ops=144.0)])


def test_a_record_survives_its_json_form():
    w = WorkCount(3, 4000.0, {"m.f": 1.0}, 144.0, {"mm": 2.0}, 1024.0, None, "no counter")
    assert WorkCount.from_dict(w.to_dict()) == w
