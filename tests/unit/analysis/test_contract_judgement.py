"""How the output contract gathers and reports a side's judgement (``harness.analysis.contract``): every prompt's rows
of every kind reach the rule whatever the prompts before it carry (a long prompt with its ``own`` rows alone, a
prompt with greedy tokens only), FNS marginals at their rows' own positions; a side's padded rows add to its
findings, never replace them; a side that scored no row covers no position; the positions note names every
shape; the report's table, padded and batched lines where a figure has no position, and its legend, word for
word; a longer greedy run is not identical; a skipped EOS run is said; the near-tie allowance is the yardstick's
largest margin move in any kind (issue 57, generated mutants and a held-out-style audit). Hand-built contracts and
the real carbon-tiny ones of ``test_contract``."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from harness.analysis.contract import (
    ContractResult,
    SideJudgement,
    align,
    between,
    judge_contract,
    judge_side,
    load_tolerances,
)
from harness.analysis.threeway import TIERS, PaddedSpread, Spread
from tests.unit.analysis.test_contract import REFERENCE, SIDE, YARDSTICK, padded_side, shifted

pytestmark = pytest.mark.unit

EXPECTED = {"reference": REFERENCE, "yardstick": YARDSTICK}


def sequence(tokens: list[int], start: int, fns: bool = False) -> dict:
    """Rows scoring ``tokens[start:]``, each its token at -0.5 over a two-id top; FNS marginals where asked."""
    rows = [[t, -0.5, [[t, -0.5], [t + 1, -1.5]]] for t in tokens[start:]]
    out = {"tokens": tokens, "from": start, "rows": rows}
    if fns:
        out["fns"] = [[-1.0 - 0.01 * j] * 24 for j in range(len(rows))]
    return out


def test_every_prompts_rows_are_aligned_whatever_the_prompts_before_it_carry():
    """The long prompt (its ``own`` rows alone) and a prompt with greedy tokens only come first: the last prompt's
    scored rows are still judged, and its FNS marginals stand at its rows' positions."""
    contract = {"prompts": [
        {"name": "long", "sequences": {"own": sequence([1, 2, 3, 4, 5], 3)}},
        {"name": "greedy only", "greedy": [7, 8]},
        {"name": "balanced", "sequences": {"scored": sequence([1, 2, 3, 4, 5], 2, fns=True),
                                           "own": sequence([1, 2, 3, 9], 3)}}]}
    aligned = {a.kind: a for a in align(contract, contract, contract)}
    assert sorted(aligned) == ["own", "scored"]
    scored = aligned["scored"]
    assert [(n, p) for n, p, *_ in scored.rows] == [("balanced", 2), ("balanced", 3), ("balanced", 4)]
    assert [(n, p) for n, p, *_ in scored.fns] == [("balanced", 2), ("balanced", 3), ("balanced", 4)]
    assert [fns[0] for *_, fns, _, _ in scored.fns] == [-1.0, -1.01, -1.02]
    assert [(n, p) for n, p, *_ in aligned["own"].rows] == [("long", 3), ("long", 4), ("balanced", 3)]


def test_padded_rows_that_pass_keep_the_sides_other_findings():
    """A side off the reference at one scored row, whose padded rows equal its unpadded ones: it still fails on
    that row (the padded check adds its findings to the side's, it never replaces them)."""
    side = padded_side()
    side["prompts"][0]["sequences"]["scored"] = shifted(0, "scored", 3, -1.0)["prompts"][0]["sequences"]["scored"]
    judged = judge_side("candidate", side, REFERENCE, YARDSTICK, load_tolerances()["bf16"])
    assert judged.padded is not None and judged.padded.positions > 0 and judged.padded.findings == []
    from_spreads = [f for s in judged.spreads for f in s.findings]
    assert from_spreads and not judged.passed
    assert judged.findings[:len(from_spreads)] == from_spreads


def test_a_side_that_scored_no_row_covers_no_position():
    """Its sequences left out (greedy tokens only): no spread, the largest position -1 in verdict.json, and no
    positions-covered note (there is nothing to say it reached)."""
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        p["sequences"] = {}
    judged = judge_side("candidate", side, REFERENCE, YARDSTICK, load_tolerances()["bf16"])
    assert (judged.spreads, judged.last_position, judged.to_dict()["last_position"]) == ([], -1, -1)
    result = judge_contract({"candidate": side}, {"candidate": EXPECTED}, load_tolerances())
    assert result.last_position == -1 and not any(n.startswith("positions covered") for n in result.notes)


def test_the_positions_note_names_every_shape_the_sides_ran():
    other = copy.deepcopy(SIDE)
    other["shape"] = "contract-long"
    result = judge_contract({"baseline": SIDE, "candidate": other}, {"baseline": EXPECTED, "candidate": EXPECTED},
                            load_tolerances())
    [note] = [n for n in result.notes if n.startswith("positions covered")]
    assert note.startswith("positions covered: up to position 46 (shape contract-long, smoke); "), note


def bare_spread(kind: str, bias: dict | None = None) -> Spread:
    """A spread that compared no id (no position to name, no tier measured), with ``bias`` where given."""
    return Spread(kind, 0, 0.0, 0.0, 0.0, {t: {"measured": False} for t in TIERS}, 0.1, 0, 0, bias=bias or {})


def test_the_table_shows_a_dash_where_a_figure_was_not_read_and_an_unbounded_signed_t_as_shown():
    """Where no position was compared the largest-per-position cell names none; where no signed t was read its cell
    is a dash; an fp32 side's t is shown (no bound), a bf16 side's with its bound; padded and batched lines without a
    position name none. Then the legend, word for word."""
    tol = load_tolerances()
    fp32, bf16 = tol["fp32"], replace(tol["bf16"], bias_t=2.5)
    bias = {"top1_logprob": {"t": 1.234}, "margin": {"t": -0.5}}
    sides = [SideJudgement("baseline", "hf", "fp32", "transformers fp32", fp32, 0.25,
                           spreads=[bare_spread("scored"), bare_spread("own", bias)]),
             SideJudgement("candidate", "neuron", "bf16", "transformers bf16", bf16, 0.125,
                           spreads=[bare_spread("own", bias)], padded=PaddedSpread(0, 0.0, None),
                           batched=[PaddedSpread(0, 0.0, None, what="batched-row log-probs (own)")])]
    lines = ContractResult(notes=["n1"], sides=sides).markdown()
    rows = [line for line in lines if line.startswith("| baseline") or line.startswith("| candidate")]
    empty = "| n/a | n/a | n/a | n/a | 0/0 |"
    assert rows == [
        f"| baseline (hf) | fp32 | transformers fp32 | scored | 0 | 0 (≤{fp32.sigma_ratio:g}) | - | "
        f"0 (≤{fp32.position_ratio:g}) {empty} 0.25 | - | ok |",
        f"| baseline (hf) | fp32 | transformers fp32 | own | 0 | 0 (≤{fp32.sigma_ratio:g}) | "
        "+1.2 / -0.5 (shown) | "
        f"0 (≤{fp32.position_ratio:g}) {empty} 0.25 | - | ok |",
        f"| candidate (neuron) | bf16 | transformers bf16 | own | 0 | 0 (≤{bf16.sigma_ratio:g}) | "
        "+1.2 / -0.5 (≤2.5) | "
        f"0 (≤{bf16.position_ratio:g}) {empty} 0.125 | - | ok |"]
    pad = f"{bf16.pad_factor:g}"
    assert lines[-7:] == [
        f"\nPadded rows of candidate: rms(padded − unpadded) over the yardstick's rounding, largest 0 (≤{pad}) "
        "over 0 positions.",
        f"\nBatched rows of candidate (batched-row log-probs (own)): rms(batched − single run) over the yardstick's "
        f"rounding, largest 0 (≤{pad}) over 0 positions.",
        "",
        "σ ratio: rms(side − fp32) / rms(yardstick − fp32), pooled and (largest per position) at each position; "
        "top-k: the largest |side − fp32| over the top-k ids / the yardstick's; near-tie: nats of reference margin "
        "below which a top-1 may differ; signed t: the paired t of the side's signed change to the reference's top-1 "
        "log-prob and top-1 / top-2 margin less the yardstick's (a bias one way, where rounding has none), each at "
        "most its bound in size where one is calibrated (bf16), shown only where none is (fp32).",
        "", "- n1", ""]


def test_a_candidate_that_generates_past_the_baselines_greedy_tokens_is_not_identical_to_it():
    """Every token of the baseline's, then one more: no divergence to show, but not identical either."""
    base = {"prompts": [{"name": "a", "greedy": [5, 6, 7]}, {"name": "b", "greedy": [1, 2]}]}
    new = {"prompts": [{"name": "a", "greedy": [5, 6, 7, 8]}, {"name": "b", "greedy": [1, 2]}]}
    assert between(base, new) == ([], 1) and between(new, base) == ([], 1)


def test_a_side_that_could_not_run_eos_says_so_in_its_notes_and_the_verdicts():
    """A side whose EOS run was skipped (a server that cannot set EOS) is not checked there, and says so: never a
    silent pass of the EOS rule."""
    side = copy.deepcopy(SIDE)
    side["prompts"][0]["eos"] = {"skipped": "the server cannot set an EOS id"}
    name = side["prompts"][0]["name"]
    judged = judge_side("candidate", side, REFERENCE, YARDSTICK, load_tolerances()["bf16"])
    assert f"EOS not checked on {name}: the server cannot set an EOS id" in judged.notes
    result = judge_contract({"candidate": side}, {"candidate": EXPECTED}, load_tolerances())
    assert f"the candidate: EOS not checked on {name}: the server cannot set an EOS id" in result.notes


def test_the_near_tie_allowance_is_set_by_the_yardsticks_largest_margin_move_in_any_kind():
    """The yardstick moved to shift the reference's top-1 / top-2 margin by 0.2 nats at one ``own`` row (its second
    kind): the side's margin noise is that move, whatever the ``scored`` rows' (about 1e-2), and its allowance
    ``tie_factor`` x it."""
    yard = copy.deepcopy(YARDSTICK)
    top = yard["prompts"][0]["sequences"]["own"]["rows"][3][2]
    top[1][1] += 0.2
    crit = load_tolerances()["bf16"]
    before = judge_side("candidate", SIDE, REFERENCE, YARDSTICK, crit).margin_noise
    judged = judge_side("candidate", SIDE, REFERENCE, yard, crit)
    assert before < 0.1 < judged.margin_noise < 0.3
    assert judged.tie_allowance == pytest.approx(crit.tie_factor * judged.margin_noise)
