"""The output contract's token checks (``harness.analysis.side_checks``), called directly on small contracts
written in the contract's own format (a prompt's ``prompt_ids``, ``greedy``, ``eos``, ``padded`` and its
``sequences``' scored rows ``[token, logprob, top]``), so each rule's edge is reached exactly: a stack that
generates exactly one token past EOS, and the near-tie excuse, which is read from the reference's row at the
divergence and at no other, and never granted where that row is missing."""

from __future__ import annotations

import pytest

from harness.analysis.side_checks import greedy, pad_and_eos, padded_row

pytestmark = pytest.mark.unit

TIE = 0.3
PAD, EOS = 0, 2
WIDE, NARROW = 1.0, 0.1  # a reference margin beyond the near-tie allowance, and one within it


def row(token: int, margin: float) -> list:
    """A scored row whose top-1 is ``token`` by ``margin`` nats over the top-2."""
    return [token, -0.5, [[token, -0.5], [token + 1, -0.5 - margin]]]  # binary fractions: a margin of 0.25 is exact


def prompt(greedy_ids: list[int], margins: list[float] | None = None, **extra) -> dict:
    """A prompt of 4 ids; ``margins``: the reference's own rows over its greedy tokens (none: no rows)."""
    rows = [row(t, m) for t, m in zip(greedy_ids, margins)] if margins is not None else []
    return {"name": "p0", "prompt_ids": [5, 6, 7, 8], "greedy": list(greedy_ids),
            "sequences": {"own": {"rows": rows}}, **extra}


REF_GREEDY = [11, 12, 13, 14, 15, 16]


def diverged_at(k: int) -> list[int]:
    return REF_GREEDY[:k] + [REF_GREEDY[k] + 100] + REF_GREEDY[k + 1:]


@pytest.mark.parametrize("k", [0, 2, 5])
def test_a_divergence_is_excused_by_the_reference_margin_at_that_token_and_no_other(k):
    """The near-tie is the reference's margin at the divergence, row k: a wide margin next to it excuses
    nothing and a narrow one next to it blames nothing."""
    only_k_narrow = [WIDE] * 6
    only_k_narrow[k] = NARROW
    only_k_wide = [NARROW] * 6
    only_k_wide[k] = WIDE
    side = {"prompts": [prompt(diverged_at(k))]}
    assert greedy(side, {"prompts": [prompt(REF_GREEDY, only_k_narrow)]}, TIE) == []
    found = greedy(side, {"prompts": [prompt(REF_GREEDY, only_k_wide)]}, TIE)
    assert [(f.criterion, f.prompt, f.position) for f in found] == [("greedy tokens", "p0", 4 + k)]
    assert f"by a margin of {WIDE:.3g} nats (> the near-tie allowance {TIE:.3g})" in found[0].detail


def test_a_divergence_where_the_reference_has_no_row_is_not_excused():
    """A reference that scored fewer tokens than it generated has no margin at the divergence: a finding
    (an unknown margin), never an excuse."""
    side = {"prompts": [prompt(diverged_at(4))]}
    for rows in ([NARROW] * 4, None):
        found = greedy(side, {"prompts": [prompt(REF_GREEDY, rows)]}, TIE)
        assert [f.position for f in found] == [8] and "an unknown margin" in found[0].detail


def test_a_margin_exactly_at_the_allowance_is_a_near_tie():
    side = {"prompts": [prompt(diverged_at(1))]}
    assert greedy(side, {"prompts": [prompt(REF_GREEDY, [WIDE, 0.25, WIDE, WIDE, WIDE, WIDE])]}, 0.25) == []
    assert len(greedy(side, {"prompts": [prompt(REF_GREEDY, [WIDE, 0.25, WIDE, WIDE, WIDE, WIDE])]}, 0.24)) == 1


def test_a_shorter_generation_that_agrees_as_far_as_it_goes_is_no_divergence():
    assert greedy({"prompts": [prompt(REF_GREEDY[:3])]}, {"prompts": [prompt(REF_GREEDY, [WIDE] * 6)]}, TIE) == []


def eos_side(tokens: list[int], stop: int = 2, pad: int | None = PAD) -> dict:
    greedy_ids = [11, 12, EOS, 14, 15, 16]
    return {"pad_token_id": pad, "prompts": [prompt(greedy_ids, eos={"stop": stop, "tokens": tokens,
                                                                     "eos_token_id": EOS})]}


REFERENCE = {"prompts": [prompt([11, 12, EOS, 14, 15, 16], [WIDE] * 6)]}


@pytest.mark.parametrize("tokens, found", [
    ([11, 12, EOS], None),  # stopped at EOS
    ([11, 12, EOS, PAD, PAD], None),  # pad ids after it are the batch's padding, not generation
    ([11, 12, EOS, 14], "generated 1 token(s) past the EOS id 2 at generated position 2 (EOS ignored)"),
    ([11, 12, EOS, PAD, 14], "generated 1 token(s) past the EOS id 2"),
    ([11, 12, EOS, 14, 15], "generated 2 token(s) past the EOS id 2"),
    ([11, 12], "generated token 2 is (none: stopped early), not the greedy 2"),
    ([11, 13, EOS], "generated token 1 is 13, not the greedy 12"),
])
def test_eos_stops_generation_exactly_where_it_stands(tokens, found):
    out, notes = pad_and_eos(eos_side(tokens), REFERENCE, TIE)
    assert notes == []
    assert len(out) == (0 if found is None else 1), [f.detail for f in out]
    if found is not None:
        assert found in out[0].detail and out[0].criterion == "EOS honoured"
        assert out[0].position == 4 + (2 if "past" in found else int(found.split("generated token ")[1][0]))


def test_a_side_that_could_not_run_eos_is_a_note_not_a_pass_in_silence():
    side = {"pad_token_id": PAD, "prompts": [prompt([11, 12], eos={"skipped": "the server has no ignore_eos"})]}
    assert pad_and_eos(side, REFERENCE, TIE) == ([], ["EOS not checked on p0: the server has no ignore_eos"])


@pytest.mark.parametrize("pad_margin, ref_rows, fails", [
    (WIDE, True, True),  # the reference's top-1 beats the pad id beyond a near-tie
    (NARROW, True, False),  # within it: excused
    (NARROW, False, True),  # the reference has no row there: never excused
])
def test_the_pad_id_generated_is_excused_only_by_the_reference_row_at_that_position(pad_margin, ref_rows, fails):
    rows = [row(t, WIDE) for t in REF_GREEDY]
    rows[3] = [14, -0.1, [[14, -0.1], [PAD, -0.1 - pad_margin]]]
    rows[2] = [13, -0.1, [[13, -0.1], [PAD, -0.1 - NARROW]]]  # a near-tie one position early excuses nothing
    ref = {"prompts": [dict(prompt(REF_GREEDY), sequences={"own": {"rows": rows if ref_rows else rows[:3]}})]}
    side = {"pad_token_id": PAD, "prompts": [prompt([11, 12, 13, PAD, 15, 16])]}
    out, _ = pad_and_eos(side, ref, TIE)
    assert [f.position for f in out] == ([4 + 3] if fails else [])


def padded_prompt(padded_greedy: list[int], cut_margins: list[float] | None) -> dict:
    tokens = [5, 6, 7, 8, 11, 12, 13, 14]
    rows = [row(t, m) for t, m in zip(tokens[4:], cut_margins)] if cut_margins is not None else []
    return {"name": "p0", "prompt_ids": [5, 6, 7, 8], "greedy": [11, 12, 13, 14],
            "padded": {"pad": 3, "greedy": padded_greedy},
            "sequences": {"own": {"rows": []}, "cut": {"from": 4, "tokens": tokens, "rows": rows}}}


@pytest.mark.parametrize("ref_margins, fails", [
    ([WIDE, NARROW, WIDE, WIDE], False),  # a near-tie at the divergence (token 1)
    ([NARROW, WIDE, NARROW, NARROW], True),  # near-ties beside it only
    ([WIDE], True),  # the reference has no cut row there
])
def test_a_padded_row_is_excused_by_the_reference_cut_row_at_its_divergence_only(ref_margins, fails):
    side = {"prompts": [padded_prompt([11, 99, 13, 14], None)]}
    ref = {"prompts": [padded_prompt([11, 12, 13, 14], ref_margins)]}
    out = padded_row(side, ref, TIE)
    assert [(f.criterion, f.position) for f in out] == ([("padded row", 5)] if fails else [])


# the other token checks, called directly (survivors of the generated mutants, nox -s mutation)
def test_a_prompt_the_reference_lacks_and_a_moved_id_are_named_where_they_start():
    from harness.analysis.side_checks import tokenization

    ref = {"prompts": [{"name": "p0", "prompt_ids": [5, 6, 7, 8]}]}
    assert tokenization({"prompts": [{"name": "p0", "prompt_ids": [5, 6, 7, 8]}]}, ref) == []
    found = tokenization({"prompts": [{"name": "p0", "prompt_ids": [5, 6, 9, 8]},
                                      {"name": "p9", "prompt_ids": [1]}]}, ref)
    assert [(f.criterion, f.prompt, f.position, f.detail) for f in found] == [
        ("tokenization", "p0", 2, "token id 9 where the reference's tokenizer gives 7 (4 ids, the reference 4)"),
        ("tokenization", "p9", None, "the reference has no such prompt")]
    longer = tokenization({"prompts": [{"name": "p0", "prompt_ids": [5, 6, 7, 8, 1]}]}, ref)[0]
    shorter = tokenization({"prompts": [{"name": "p0", "prompt_ids": [5, 6]}]}, ref)[0]
    assert (longer.position, longer.detail) == (4, "token id 1 where the reference's tokenizer gives (end) (5 ids, "
                                                   "the reference 4)")
    assert (shorter.position, shorter.detail) == (2, "token id (end) where the reference's tokenizer gives 7 (2 ids, "
                                                     "the reference 4)")


def test_a_prompt_tokenized_otherwise_or_unknown_is_left_to_tokenization_by_the_greedy_check():
    side = {"prompts": [dict(prompt(diverged_at(0)), prompt_ids=[5, 6, 7, 9]), dict(prompt(diverged_at(0)), name="p9")]}
    assert greedy(side, {"prompts": [prompt(REF_GREEDY, [WIDE] * 6)]}, TIE) == []


def own_scored(greedy_ids: list[int], tops: list[tuple[int, float, float]]) -> dict:
    """A side's prompt whose own teacher-forced rows have (top-1 id, top-1 logprob, logprob of its greedy token)."""
    rows = [[g, lp, [[top, top_lp], [g if g != top else top + 1, lp if g != top else top_lp - 1.0]]]
            for g, (top, top_lp, lp) in zip(greedy_ids, tops)]
    return {"name": "p0", "prompt_ids": [5, 6, 7, 8], "greedy": greedy_ids, "sequences": {"own": {"rows": rows}}}


def test_a_greedy_token_its_own_scoring_puts_below_top_1_beyond_a_near_tie_fails_once_where_it_starts():
    from harness.analysis.side_checks import self_consistency

    agree = own_scored([11, 12, 13], [(11, -0.5, -0.5), (12, -0.5, -0.5), (13, -0.5, -0.5)])
    assert self_consistency({"prompts": [agree]}, TIE) == []
    near = own_scored([11, 12, 13], [(11, -0.5, -0.5), (99, -0.5, -0.75), (13, -0.5, -0.5)])
    assert self_consistency({"prompts": [near]}, 0.25) == []  # 0.25 below: exactly at the allowance
    far = own_scored([11, 12, 13], [(11, -0.5, -0.5), (99, -0.5, -1.5), (98, -0.5, -2.5)])
    found = self_consistency({"prompts": [far]}, TIE)
    assert [(f.criterion, f.position, f.detail) for f in found] == [
        ("generation vs its own scoring", 5, "greedy token 12, but teacher-forced its top-1 is 99 by 1 nats")]
    short = dict(far, sequences={"own": {"rows": far["sequences"]["own"]["rows"][:1]}})
    assert self_consistency({"prompts": [short]}, TIE) == []  # no row there: nothing to compare


def test_the_pad_id_is_checked_only_where_the_side_has_one_and_eos_only_where_it_ran():
    side = {"pad_token_id": None, "prompts": [prompt([11, PAD, 13])]}
    assert pad_and_eos(side, REFERENCE, TIE) == ([], [])
    out, _ = pad_and_eos({"pad_token_id": PAD, "prompts": [prompt([11, PAD, PAD, 13])]}, {"prompts": []}, TIE)
    assert [(f.criterion, f.position, f.detail) for f in out] == [
        ("pad id never generated", 5, "generated the pad id 0 at generated position 1")]  # once, at the first


# the near-tie allowance at the divergence's own position (issue 56's yardstick row), and every prompt judged
def yard_prompt(move: float) -> dict:
    """The yardstick's own rows: the reference's (margin 0.25 at every token), the margin moved by ``move``."""
    rows = [[t, -0.5, [[t, -0.5], [t + 1, -0.75 + move]]] for t in REF_GREEDY]
    return {"name": "p0", "prompt_ids": [5, 6, 7, 8], "greedy": REF_GREEDY, "sequences": {"own": {"rows": rows}}}


def crit(**kw):
    from harness.analysis.threeway import Criterion

    base = dict(sigma_ratio=1.5, tier_factor={}, tie_factor=2.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4,
                margin_floor=1 / 64, position_ratio=3.0, pad_factor=3.0, tie_position_factor=2.0)
    return Criterion("bf16", **{**base, **kw})


def test_a_divergence_is_held_to_the_allowance_at_its_own_position_where_the_yardstick_row_is_there():
    side, ref = {"prompts": [prompt(diverged_at(1))]}, {"prompts": [prompt(REF_GREEDY, [0.25] * 6)]}
    found = greedy(side, ref, 1.0, {"prompts": [yard_prompt(0.0625)]}, crit())
    assert [(f.prompt, f.position) for f in found] == [("p0", 5)]
    assert found[0].detail.endswith("by a margin of 0.25 nats (> the near-tie allowance there 0.125; 1 anywhere)")
    floored = greedy(side, ref, 1.0, {"prompts": [yard_prompt(0.0)]}, crit())  # 2 x margin_floor
    assert floored[0].detail.endswith("(> the near-tie allowance there 0.0312; 1 anywhere)")
    assert greedy(side, ref, 1.0, {"prompts": [yard_prompt(0.125)]}, crit()) == []  # 2 x 0.125 = 0.25: at it
    assert greedy(side, ref, 1.0, {"prompts": [yard_prompt(0.0625)]}, None) == []  # no criterion: the global one
    assert greedy(side, ref, 1.0, None, crit()) == []  # no yardstick: the global one
    assert greedy(side, ref, 1.0, {"prompts": [dict(yard_prompt(0.0625), name="other")]}, crit()) == []
    no_rows = dict(yard_prompt(0.0625), sequences={"own": {"rows": []}})
    assert greedy(side, ref, 1.0, {"prompts": [no_rows]}, crit()) == []
    wide = greedy(side, ref, 0.2, None, None)
    assert wide[0].detail.endswith("(> the near-tie allowance 0.2)")


def test_every_prompt_is_judged_after_one_that_is_tokenized_otherwise_or_agrees():
    p1 = dict(prompt(diverged_at(2)), name="p1")
    ref = {"prompts": [prompt(REF_GREEDY, [WIDE] * 6), dict(prompt(REF_GREEDY, [WIDE] * 6), name="p1")]}
    for first in (dict(prompt(diverged_at(0)), prompt_ids=[9]), prompt(REF_GREEDY)):
        found = greedy({"prompts": [first, p1]}, ref, TIE)
        assert [(f.prompt, f.position) for f in found] == [("p1", 6)]


def test_eos_pad_and_padded_findings_name_their_prompt_and_every_prompt_is_checked():
    named = dict(prompt([11, 12, EOS, 14, 15, 16], eos={"stop": 2, "tokens": [11, 12, EOS, 14], "eos_token_id": EOS}),
                 name="p1")
    for first in (prompt([11, 12]), prompt([11, 12], eos={"skipped": "no ignore_eos"})):
        out, _ = pad_and_eos({"pad_token_id": PAD, "prompts": [first, named]}, REFERENCE, TIE)
        assert [(f.criterion, f.prompt) for f in out] == [("EOS honoured", "p1")]
    early = dict(prompt([11, 12, EOS], eos={"stop": 2, "tokens": [11, 13], "eos_token_id": EOS}), name="p2")
    assert pad_and_eos({"pad_token_id": PAD, "prompts": [early]}, REFERENCE, TIE)[0][0].prompt == "p2"
    beyond = prompt([11, 12], eos={"stop": 2, "tokens": [11, 12, EOS], "eos_token_id": EOS})
    out, _ = pad_and_eos({"pad_token_id": PAD, "prompts": [beyond]}, REFERENCE, TIE)
    assert out[0].detail == "with EOS 2, generated token 2 is 2, not the greedy (end)"
    padded = dict(prompt([11, PAD]), name="p3")
    assert pad_and_eos({"pad_token_id": PAD, "prompts": [padded]}, REFERENCE, TIE)[0][0].prompt == "p3"


@pytest.mark.parametrize("pad_value, fails", [(None, True), (-0.75, False), (-0.5 - 0.25 - 0.25, True)])
def test_a_pad_id_the_reference_does_not_report_is_never_excused_and_one_at_the_allowance_is(pad_value, fails):
    top = [[13, -0.5], [PAD, pad_value]] if pad_value is not None else [[13, -0.5], [14, -0.75]]
    rows = [row(t, WIDE) for t in REF_GREEDY]
    rows[2] = [13, -0.5, top]
    ref = {"prompts": [dict(prompt(REF_GREEDY), sequences={"own": {"rows": rows}})]}
    out, _ = pad_and_eos({"pad_token_id": PAD, "prompts": [prompt([11, 12, PAD])]}, ref, 0.25)
    assert bool(out) == fails


def test_a_padded_row_is_judged_only_with_both_runs_and_names_its_prompt_and_every_prompt():
    same = padded_prompt([11, 12, 13, 14], [WIDE] * 4)
    ref = {"prompts": [padded_prompt([11, 12, 13, 14], [WIDE] * 4)]}
    assert padded_row({"prompts": [same]}, ref, TIE) == []  # identical: nothing past its end is read
    no_cut = dict(same, sequences={"own": {"rows": []}})
    no_seq = {k: v for k, v in same.items() if k != "sequences"}
    moved = dict(padded_prompt([11, 99, 13, 14], None), name="p5")
    ref5 = {"prompts": [dict(padded_prompt([11, 12, 13, 14], [WIDE] * 4), name="p5")]}
    for first in (no_cut, no_seq, same):
        found = padded_row({"prompts": [first, moved]}, ref5, TIE)
        assert [(f.prompt, f.position) for f in found] == [("p5", 5)]
        assert found[0].detail == ("right-padded with 3 pad ids, generated token 1 is 99 where unpadded it is 12 "
                                   "(reference margin 1 nats > 0.3)")
    missing = padded_row({"prompts": [moved]}, {"prompts": []}, TIE)
    assert missing[0].detail.endswith("(reference margin nan nats > 0.3)")
    at = padded_row({"prompts": [padded_prompt([11, 99, 13, 14], None)]},
                    {"prompts": [padded_prompt([11, 12, 13, 14], [WIDE, 0.25, WIDE, WIDE])]}, 0.25)
    assert at == []  # a margin exactly at the allowance is a near-tie


def test_the_last_survivors_each_pinned():
    from harness.analysis.side_checks import self_consistency, tokenization

    ref = {"prompts": [{"name": "p0", "prompt_ids": [5, 6, 7, 8]}]}
    found = tokenization({"prompts": [{"name": "p9", "prompt_ids": [1]}, {"name": "p0", "prompt_ids": [5, 9]}]}, ref)
    assert [(f.prompt, f.position) for f in found] == [("p9", None), ("p0", 1)]  # every prompt after an unknown one
    side = {"prompts": [prompt(diverged_at(4))]}
    missing = greedy(side, {"prompts": [prompt(REF_GREEDY, [NARROW] * 4)]}, 0.2, {"prompts": [yard_prompt(0.0)]}, None)
    assert missing[0].detail.endswith("by an unknown margin (> the near-tie allowance 0.2)")
    far = own_scored([11, 12], [(11, -0.5, -0.5), (99, -0.5, -1.5)])
    assert self_consistency({"prompts": [dict(far, name="p7")]}, TIE)[0].prompt == "p7"
