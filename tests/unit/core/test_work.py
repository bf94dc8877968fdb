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


# issue 57: the edges a generated mutant moves, each pinned
def test_a_record_keeps_ties_by_name_and_an_other_entry_it_already_had():
    assert kept({"b": 1, "a": 1, "c": 1}, 2) == {"a": 1, "b": 1, "(other)": 1}
    assert kept({"(other)": 5, "x": 1, "y": 1}, 2) == {"(other)": 6, "x": 1}  # the rest adds to it
    assert kept({"a": 1}, 5) == {"a": 1} and kept({}, 3) == {}


def test_a_record_is_trimmed_to_its_top_and_still_adds_up():
    counts = {f"f{i}": float(i) for i in range(1, 51)}
    record = WorkCount(3, 1275.0, counts).to_dict(top=40)
    assert len(record["calls_by_function"]) == 41 and record["calls_by_function"]["(other)"] == sum(range(1, 11))
    assert sum(record["calls_by_function"].values()) == 1275.0
    assert len(WorkCount(3, 1275.0, counts).to_dict()["calls_by_function"]) == 41  # TOP, 40, by default


def test_an_old_record_without_the_optional_counts_reads_as_none_counted():
    w = WorkCount.from_dict({"steps": "3", "python_calls": "4000"})
    assert w == WorkCount(3, 4000.0, {}, 0.0, {}, 0.0, None, "")
    assert WorkCount.from_dict({"steps": 3, "python_calls": 1, "aten_ops": None, "instructions": 7.5}).instructions == 7.5


def test_each_count_that_moved_is_a_line_and_the_most_moved_come_first_at_most_five():
    base = WorkCount(3, 100.0, {f"m.f{i}": 10.0 for i in range(7)}, 50.0, {"mm": 10.0, "add": 5.0}, 1000.0)
    new = WorkCount(3, 80.0, {**{f"m.f{i}": 10.0 + i for i in range(7)}, "m.gone": 0.0}, 0.0, {"mm": 4.0}, 1000.0)
    lines = describe_change(base, new)
    assert lines[:2] == ["-20 Python calls/step (100 -> 80, -20.0%)", "-50 aten ops/step (50 -> 0, -100.0%)"]
    assert lines[2:7] == ["+6 Python calls/step in m.f6", "+5 Python calls/step in m.f5", "+4 Python calls/step in m.f4",
                          "+3 Python calls/step in m.f3", "+2 Python calls/step in m.f2"]
    assert lines[7:] == ["-6 calls/step of aten mm", "-5 calls/step of aten add"]
    assert changed({"a": 1.0, "b": 3.0}, {"a": 2.0, "b": 1.0}, limit=1) == [("b", -2.0)]
    assert changed({"a": 1.0}, {"b": 1.0}) == [("a", -1.0), ("b", 1.0)]  # ties by name


def test_work_from_none_is_shown_without_a_percentage():
    lines = describe_change(WorkCount(3, 0.0, bytes_allocated=0.0), WorkCount(3, 0.0, bytes_allocated=64.0))
    assert lines == ["+64 bytes allocated/step (0 -> 64)"]


def test_counts_are_unstable_when_calls_or_ops_differ_between_rounds_not_bytes():
    a = WorkCount(3, 4000.0, aten_ops=144.0, bytes_allocated=1.0)
    assert unstable([a, WorkCount(3, 4000.0, aten_ops=145.0)]) and not unstable([a, WorkCount(3, 4000.0, aten_ops=144.0)])
    assert not unstable([a]) and not unstable([])


def test_per_step_divides_each_total_by_the_steps_counted():
    from harness.core.work import per_step

    assert per_step({"a": 6, "b": 3}, 3) == {"a": 2.0, "b": 1.0} and per_step({}, 2) == {}


def test_ties_are_kept_by_name_and_a_records_instruction_count_travels():
    assert kept({"c": 1, "b": 1, "a": 1}, 1) == {"a": 1, "(other)": 2}
    w = WorkCount(3, 1.0, instructions=7.5, instructions_why="")
    assert w.to_dict()["instructions"] == 7.5 and WorkCount.from_dict(w.to_dict()).instructions == 7.5
