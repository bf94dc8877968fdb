"""Counting a step's work (``harness.backends.work_counter.count_steps``) in this process, on a step whose
work is known exactly: its Python functions, the builtins it calls (``c_call``: a planted ``len`` or
``list.append`` is host work as much as a Python function is), its aten ops and their output bytes, per step;
the uncounted setup and the counter's own switch-off left out; the caller's profile hook restored. (The fresh-
process equality on the real hf backend is test_work_counter.py's.)"""

from __future__ import annotations

import math
import sys

import pytest
import torch

from harness.backends.work_counter import count_steps

pytestmark = pytest.mark.unit

HERE = __name__


def helper(x: int) -> int:
    return x + 1


def step() -> None:
    acc: list[int] = []
    for i in range(3):
        acc.append(helper(i))
    len(acc)
    math.sqrt(4.0)
    torch.ones(2).add(1)


def test_python_functions_builtins_and_aten_ops_are_counted_per_step():
    work = count_steps(step, steps=2)
    assert dict(work.calls_by_function) == {
        f"{HERE}.step": 1.0, f"{HERE}.helper": 3.0, "builtins.list.append": 3.0, "builtins.len": 1.0,
        "math.sqrt": 1.0, "builtins._VariableFunctionsClass.ones": 1.0, "torch.Tensor.add": 1.0}
    assert work.python_calls == 11.0 and work.steps == 2
    assert dict(work.ops_by_name) == {"ones": 1.0, "add": 1.0} and work.aten_ops == 2.0
    assert work.bytes_allocated == 2 * 2 * 4  # two float32 outputs of 2 elements
    assert work.instructions is not None or work.instructions_why


def test_a_planted_builtin_call_is_counted_and_named():
    base = count_steps(step, steps=2)
    planted = count_steps(lambda: (step(), [len("x") for _ in range(5)]), steps=2)
    assert planted.calls_by_function["builtins.len"] - base.calls_by_function["builtins.len"] == 5.0


def test_the_setup_is_not_counted_and_each_step_gets_it():
    seen = []
    work = count_steps(step, steps=3, setup=lambda: seen.append((helper(0), torch.zeros(1))))
    assert len(seen) == 6  # before each step of both passes
    assert work.calls_by_function[f"{HERE}.helper"] == 3.0 and work.python_calls == 11.0
    assert dict(work.ops_by_name) == {"ones": 1.0, "add": 1.0}


def test_the_callers_profile_hook_is_restored_and_its_calls_are_not_counted():
    calls = []

    def hook(frame, event, arg):
        calls.append(event)

    sys.setprofile(hook)
    try:
        work = count_steps(step, steps=1)
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(None)
    assert work.python_calls == 11.0 and calls


def test_no_step_is_refused():
    with pytest.raises(ValueError, match="steps=0: count at least one step"):
        count_steps(step, steps=0)
