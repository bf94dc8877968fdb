"""A side's batched rows (``harness.analysis.side_rows``) from a served side: a server's concurrent row scores
its decode steps only as far as its greedy tokens agree with its single run's (``diverged_at``: the first that
does not, written by ``harness.workloads.contract``). Such a row is judged over its agreeing positions and
named in a note, never refused as a malformed contract; a row count that is neither is refused. On the real
carbon-tiny contract of ``fixtures/contract/threeway-*.json``."""

from __future__ import annotations

import copy
import json

import pytest

from harness.analysis.contract import ContractError, judge_side, load_tolerances
from harness.core.paths import REPO_ROOT

pytestmark = pytest.mark.unit

FIXTURES = REPO_ROOT / "fixtures" / "contract"
SIDE, REFERENCE, YARDSTICK = (json.loads((FIXTURES / f"threeway-{n}.json").read_text())
                              for n in ("side", "reference", "yardstick"))
AT = 3  # the concurrent row's first greedy token that differs from the single run's


def served(diverged_at: int | None = AT, rows: int | None = None, shift: float = 0.0, shift_at: int = 1) -> dict:
    """The fixture's side as a server writes it: each prompt's concurrent ``own`` row, its own single-run rows
    up to ``rows`` (``diverged_at`` by default), one position moved by ``shift`` nats."""
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        own = copy.deepcopy(p["sequences"]["own"]["rows"])[:rows if rows is not None else diverged_at]
        if shift:
            own[shift_at][1] += shift
            own[shift_at][2] = [[i, v + shift * (-1) ** n] for n, (i, v) in enumerate(own[shift_at][2])]
            own[shift_at][3:] = []
        p["batched"] = {"rows_of": ["own"], "rows": [own]}
        if diverged_at is not None:
            p["batched"]["diverged_at"] = diverged_at
    return side


def judged(side):
    return judge_side("candidate", side, REFERENCE, YARDSTICK, load_tolerances()["bf16"])


def test_a_concurrent_row_that_diverged_is_judged_up_to_there_and_named():
    out = judged(served())
    assert out.passed and [b.what for b in out.batched] == ["batched-row log-probs (own)"]
    assert out.batched[0].positions == AT * len(SIDE["prompts"]) and out.batched[0].ratio == 0.0
    assert sum(f"the concurrent row's greedy token {AT} differs from its single run's" in n
               for n in out.notes) == len(SIDE["prompts"])


def test_a_concurrent_row_that_diverged_still_fails_where_its_agreeing_part_moved():
    out = judged(served(shift=0.5, shift_at=1))
    found = [f for f in out.findings if f.criterion == "batched-row log-probs (own)"]
    assert found and found[0].position == SIDE["prompts"][0]["sequences"]["own"]["from"] + 1


@pytest.mark.parametrize("diverged_at, rows", [(AT, AT + 1), (AT, AT - 1), (None, AT)])
def test_rows_that_are_not_as_far_as_the_row_agrees_are_refused(diverged_at, rows):
    with pytest.raises(ContractError, match=f"{rows} batched rows for .* unpadded own rows"):
        judged(served(diverged_at, rows=rows))


def test_a_divergence_past_the_single_runs_end_is_refused():
    n = len(SIDE["prompts"][0]["sequences"]["own"]["rows"])
    side = served(diverged_at=None, rows=n)
    side["prompts"][0]["batched"]["diverged_at"] = n + 1
    side["prompts"][0]["batched"]["rows"][0].append(side["prompts"][0]["batched"]["rows"][0][-1])
    with pytest.raises(ContractError, match=f"{n + 1} batched rows for {n} unpadded own rows"):
        judged(side)


# side_rows called directly (survivors of the generated mutants, nox -s mutation)
def test_without_cut_rows_there_is_nothing_to_pair_and_why_a_side_scored_none_is_its_first_reason():
    from harness.analysis.side_rows import padded_rows
    from harness.analysis.threeway import Aligned

    assert padded_rows(SIDE, None) == ([], "")
    side = {"prompts": [{"name": "a", "padded": {"rows_not_measured": "first"}, "sequences": {}},
                        {"name": "b", "padded": {"rows_not_measured": "second"}, "sequences": {}}]}
    assert padded_rows(side, Aligned("cut")) == ([], "first")


def test_a_batched_row_is_paired_position_by_position_from_where_its_sequence_starts():
    from harness.analysis.side_rows import batched_rows, paired
    from harness.core.scored import ScoredToken

    single = {("p", 7): ("t7", "r7", "y7"), ("p", 8): ("t8", "r8", "y8")}
    rows = [[1, -0.5, [[1, -0.5]]], [2, -0.25, [[2, -0.25]]]]
    got = paired("p", 7, rows, single)
    assert got == [("p", 7, ScoredToken.from_list(rows[0]), "t7", "r7", "y7"),
                   ("p", 8, ScoredToken.from_list(rows[1]), "t8", "r8", "y8")]
    unmeasured = {"prompts": [{"name": "a", "batched": {"rows_not_measured": "one request at a time"}},
                              {"name": "b", "batched": {"rows_not_measured": "later"}}]}
    assert batched_rows(unmeasured, []) == ({}, "one request at a time")
    assert batched_rows({"prompts": [{"name": "a"}]}, []) == ({}, "")


def test_a_side_without_prompts_or_sequences_has_no_reason_and_no_rows():
    from harness.analysis.side_rows import batched_rows, padded_rows
    from harness.analysis.threeway import Aligned

    assert batched_rows({"prompts": []}, []) == ({}, "")
    assert padded_rows({"prompts": []}, Aligned("cut")) == ([], "")
    no_seq = {"prompts": [{"name": "a", "padded": {"rows": [[1, -0.5, [[1, -0.5]]]]}},
                          {"name": "b", "padded": {}}, {"name": "c", "padded": {"rows_not_measured": "third"}}]}
    assert padded_rows(no_seq, Aligned("cut")) == ([], "third")


def test_batched_rows_of_a_sequence_the_side_or_the_judge_lacks_are_refused_naming_what_it_scored():
    from harness.analysis.side_rows import batched_rows
    from harness.analysis.threeway import Aligned

    rows = [[1, -0.5, [[1, -0.5]]]]
    bare = {"prompts": [{"name": "a", "batched": {"rows_of": ["own"], "rows": [rows]}}]}
    with pytest.raises(ContractError, match=r"^prompt 'a': batched rows of 'own', a sequence this side did not score; "
                                            r"known: $"):
        batched_rows(bare, [Aligned("own")])
    scored = {"prompts": [{"name": "a", "sequences": {"own": {"from": 4, "rows": rows}, "cut": {"from": 2, "rows": []}},
                           "batched": {"rows_of": ["own"], "rows": [rows]}}]}
    with pytest.raises(ContractError, match=r"batched rows of 'own', a sequence this side did not score; known: cut, "
                                            r"own$"):
        batched_rows(scored, [Aligned("cut")])


def test_padded_rows_on_a_later_prompt_only_are_paired_and_a_measured_batch_has_no_reason():
    side = copy.deepcopy(SIDE)
    later = side["prompts"][1]
    later["padded"]["rows"] = copy.deepcopy(later["sequences"]["cut"]["rows"])
    side["prompts"][0]["padded"].pop("rows", None)
    out = judged(side)
    assert out.padded is not None and out.padded.positions == len(later["sequences"]["cut"]["rows"])
    mixed = served()
    mixed["prompts"][1]["batched"] = {"rows_not_measured": "the second prompt could not batch"}
    notes = judged(mixed).notes
    assert not any("not scored by log-probabilities (the second prompt" in n for n in notes), notes


def test_a_side_that_scored_batched_rows_has_no_reason_though_another_prompt_gives_one_and_padded_none_gives_none():
    """Generated-mutant survivors (issue 57): the reason a side scored no rows is said only where it scored none,
    and is the empty string, never None, where no prompt gave one."""
    from harness.analysis.side_rows import batched_rows, padded_rows
    from harness.analysis.threeway import Aligned
    from harness.core.scored import ScoredToken

    rows = [[1, -0.5, [[1, -0.5]]]]
    side = {"prompts": [{"name": "a", "sequences": {"own": {"from": 4, "rows": rows}},
                         "batched": {"rows_of": ["own"], "rows": [rows]}},
                        {"name": "b", "batched": {"rows_not_measured": "one request at a time"}}]}
    out, why = batched_rows(side, [Aligned("own", [("a", 4, "t", "r", "y")])])
    assert (out, why) == ({"own": [("a", 4, ScoredToken.from_list(rows[0]), "t", "r", "y")]}, "")
    assert padded_rows({"prompts": [{"name": "a", "padded": {}}, {"name": "b"}]}, Aligned("cut")) == ([], "")
