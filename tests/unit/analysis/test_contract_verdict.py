"""What the output contract's verdict says of itself (``harness.analysis.contract``, ``threeway``): which leg
ran, decided by the candidate's dtype; which top-1 flip broke it; where the FNS marginals are most off; the
largest position its shapes reached. Real contracts of carbon-tiny at the smoke shape
(``fixtures/contract/threeway-*.json``: NxDI 0.9's CPU mode in bf16, its fp32 reference and bf16 yardstick),
changed in a copy only, and small hand-built rows."""

from __future__ import annotations

import pytest

from harness.analysis.contract import legs_note

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("baseline", ["fp32", "bf16"])
def test_a_bf16_candidate_is_the_bf16_leg_only_whatever_the_baselines_dtype(baseline):
    """An fp32 baseline is not an fp32 leg: the candidate is judged in bf16, held to bf16's rounding."""
    [note] = legs_note({"baseline": baseline, "candidate": "bf16"})
    assert "bf16 leg only: defects below bf16 rounding not excluded" in note
    assert "no fp32 leg ran" in note and "--dtype fp32" in note
    assert "the fp32 leg holds" not in note
    assert f"baseline {baseline}" in note and "candidate bf16" in note


def test_an_fp32_candidate_is_the_fp32_leg():
    [note] = legs_note({"baseline": "bf16", "candidate": "fp32"})
    assert "the fp32 leg holds each side to fp32's spread" in note
    assert "leg only" not in note and "no fp32 leg ran" not in note


def test_without_a_candidate_the_leg_is_fp32_only_where_every_side_ran_fp32():
    assert "the fp32 leg holds" in legs_note({"baseline": "fp32"})[0]
    assert "no fp32 leg ran" in legs_note({"baseline": "bf16"})[0]
