"""Greedy repeatability up to a measured near-tie (issue 40, item 4): the first divergence of each row
found on random draws; a divergence allowed only where the engine itself measures the two tokens
within the near-tie bound (carbon-tiny in fp32, a real divergence planted at the runner-up token)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.backends.base import Batch
from harness.core.spec import SHAPES
from harness.workloads.repeatability import (
    Divergence,
    divergence_margin,
    divergences,
    max_abs,
    near_tie,
    repeatability_problems,
)

pytestmark = pytest.mark.unit


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_first_differing_position_of_each_row(data):
    rows, width = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 12))
    base = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 9), min_size=width, max_size=width),
                                           min_size=rows, max_size=rows)))
    other = base.clone()
    cut = {}
    for row in range(rows):
        at = data.draw(st.none() | st.integers(0, width - 1))
        if at is not None:
            other[row, at] = (base[row, at] + 1) % 10
            other[row, at + 1:] = torch.tensor(data.draw(st.lists(st.integers(0, 9), min_size=width - at - 1,
                                                                  max_size=width - at - 1)), dtype=torch.long)
            cut[row] = at
    found = divergences([base, base.clone(), other])
    assert [(d.round, d.row, d.position) for d in found] == [(2, row, at) for row, at in sorted(cut.items())]
    assert all(d.tokens == (int(base[d.row, d.position]), int(other[d.row, d.position])) for d in found)


def test_rounds_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match=r"round 1 generated \(1, 3\) tokens, round 0 \(1, 4\)"):
        divergences([torch.zeros(1, 4), torch.zeros(1, 3)])


@pytest.fixture(scope="module")
def planted(tiny_hf_engine, carbon_tokenizer):
    """carbon-tiny's greedy tokens, and the same with the runner-up token at position 5 of row 1."""
    engine = tiny_hf_engine(SHAPES["smoke"])
    batch = Batch.from_prompts(carbon_tokenizer, ["<dna>ACGTACGTAAACCCGT"])
    tokens = engine.generate(batch, 10).tokens
    prompt = batch.input_ids[0].tolist()
    runner_up = engine.scored(prompt, tokens[0, :6].tolist(), top_k=2)[-1].top[1][0]
    other = tokens.clone()
    other[0, 5] = runner_up
    return engine, batch, tokens, other


def test_a_divergence_is_allowed_only_within_the_measured_near_tie(planted):
    engine, batch, tokens, other = planted
    d = divergences([tokens, other])[0]
    assert (d.row, d.position) == (0, 5)
    margin = divergence_margin(engine, batch, [tokens, other], d)
    assert margin > 0
    assert repeatability_problems(engine, batch, [tokens, other], margin * 1.001) == []
    problems = repeatability_problems(engine, batch, [tokens, other], margin * 0.999)
    assert len(problems) == 1 and "round 1 row 0 generated token 5" in problems[0] and "beyond a near-tie" in problems[0]


def test_identical_rounds_pass_and_no_tie_allows_nothing(planted):
    engine, batch, tokens, other = planted
    assert repeatability_problems(engine, batch, [tokens, tokens.clone()], 0.0) == []
    assert repeatability_problems(engine, batch, [tokens, other], 0.0) == [
        Divergence(1, 0, 5, (int(tokens[0, 5]), int(other[0, 5]))).describe() + " (no near-tie allowed at this dtype)"]


def test_the_near_tie_is_twice_the_dtypes_bound_and_none_for_an_unlisted_dtype(tmp_path):
    """fixtures/repeatability/bounds.json: twice max_abs; none for a dtype it does not list; a malformed
    entry is refused naming the file and the dtype."""
    assert near_tie("bf16") == 2 * max_abs("bf16") and near_tie("fp32") == 2 * max_abs("fp32")
    assert max_abs("fp16") is None and near_tie("fp16") == 0.0
    bad = tmp_path / "bounds.json"
    bad.write_text('{"bf16": {"max_abs": -1}}')
    with pytest.raises(ValueError, match=f"{bad}: 'bf16' must be"):
        near_tie("bf16", bad)
