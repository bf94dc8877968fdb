"""Where the contract plants EOS (``harness.workloads.contract.eos_stop``): at a greedy token's first
occurrence, so that a stack honouring EOS stops exactly there; from ``EOS_FROM`` on where one exists, and
on a sequence caught in a repeat (carbon-tiny-trained's greedy tokens cycle with period 3) the last first
occurrence, so the EOS check still runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.workloads.contract import EOS_FROM, eos_stop

pytestmark = pytest.mark.unit


@given(st.lists(st.integers(0, 6), min_size=0, max_size=20))
def test_eos_is_planted_at_a_first_occurrence_from_position_1(greedy):
    stop = eos_stop(greedy)
    if stop is None:
        assert all(t == greedy[0] for t in greedy)
        return
    assert 1 <= stop < len(greedy) and greedy[stop] not in greedy[:stop]
    later = [j for j in range(EOS_FROM, len(greedy)) if greedy[j] not in greedy[:j]]
    assert stop == (later[0] if later else max(j for j in range(1, len(greedy)) if greedy[j] not in greedy[:j]))


def test_a_period_3_cycle_still_gets_an_eos_check():
    assert eos_stop([7, 8, 9] * 5 + [7]) == 2
