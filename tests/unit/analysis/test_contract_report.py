"""The output contract's verdict as a user reads it (``harness.analysis.contract``): verdict.json's contract
block field by field, the report's table row of each side and sequence kind, the padded and batched lines,
the greedy divergences between the sides, and each refusal's one line (issue 57, generated mutants). On the
real carbon-tiny contracts of ``test_contract``; a change is made to a copy, never to the fixture."""

from __future__ import annotations

import copy
import json
import math

import pytest

from harness.analysis.contract import (
    CONTRACT_SCHEMA,
    CRITERION_KEYS,
    TOLERANCES_FILE,
    ContractError,
    ContractResult,
    Divergence,
    between,
    criterion_of,
    judge_contract,
    load_tolerances,
    same_code,
    shared_prefix,
)
from tests.unit.analysis.test_contract import REFERENCE, SIDE, YARDSTICK, batched_side, padded_side, shifted

pytestmark = pytest.mark.unit

EXPECTED = {"reference": REFERENCE, "yardstick": YARDSTICK}


def both(baseline=SIDE, candidate=SIDE) -> ContractResult:
    return judge_contract({"baseline": baseline, "candidate": candidate},
                          {"baseline": EXPECTED, "candidate": EXPECTED}, load_tolerances())


def test_verdict_json_holds_each_sides_judgement_field_by_field():
    result = both(candidate=shifted(0, "scored", 3, -1.0))
    data = json.loads(json.dumps(result.to_dict()))
    assert (data["reasons"], data["notes"], data["leg"], data["where"]) == (result.reasons, result.notes, None, {})
    assert (data["identical_prompts"], data["prompts"], data["divergences"]) == (2, 2, [])
    assert data["last_position"] == result.last_position == 46
    base, cand = data["sides"]
    assert [base["who"], cand["who"]] == ["baseline", "candidate"] and base["passed"] and not cand["passed"]
    judged = result.sides[1]
    crit = load_tolerances()["bf16"]
    assert cand["criterion"]["tier_factor"] == dict(crit.tier_factor) and cand["criterion"]["dtype"] == "bf16"
    finite = [k for k in CRITERION_KEYS - {"tier_factor"} if math.isfinite(getattr(crit, k))]
    assert "pad_factor" in finite and all(cand["criterion"][k] == getattr(crit, k) for k in finite)
    assert (cand["backend"], cand["dtype"], cand["yardstick"]) == ("neuron", "bf16", YARDSTICK["computed_by"])
    assert (cand["tie_allowance"], cand["margin_noise"], cand["last_position"]) == (
        judged.tie_allowance, judged.margin_noise, 46)
    assert cand["findings"] == [f.describe() for f in judged.findings] and cand["findings"]
    assert cand["notes"] == judged.notes and cand["padded"] is None and cand["batched"] == []
    assert [s["kind"] for s in cand["spreads"]] == ["scored", "own", "cut"]
    assert cand["spreads"][0]["findings"] == [f.describe() for f in judged.spreads[0].findings]
    padded = judge_contract({"candidate": padded_side()}, {"candidate": EXPECTED}, load_tolerances()).to_dict()
    assert padded["sides"][0]["padded"]["what"] == "padded-row log-probs (cut)"
    batched = judge_contract({"candidate": batched_side()}, {"candidate": EXPECTED}, load_tolerances()).to_dict()
    assert [b["what"] for b in batched["sides"][0]["batched"]] == ["batched-row log-probs (cut)",
                                                                   "batched-row log-probs (own)"]


def test_the_reports_table_has_one_row_per_side_and_kind_with_each_figure_and_its_bound():
    result = both(candidate=shifted(0, "scored", 3, -1.0))
    lines = result.markdown()
    assert lines[:4] == ["### Output contract (each side and its yardstick against the fp32 transformers reference)",
                         "", "Greedy tokens identical between the sides on 2 of 2 prompts.", ""]
    assert lines[4].startswith("| side | dtype | yardstick | sequence | positions | σ ratio | signed t (top-1 / margin) "
                               "| largest per position | top-5 | top-50 | top-1000 | all | top-1 | near-tie | FNS σ "
                               "ratio | |")
    assert lines[5] == "|---" * 16 + "|"
    rows = [line for line in lines if line.startswith(("| baseline (", "| candidate ("))]
    assert len(rows) == 6
    for side in result.sides:
        c = side.criterion
        for s in side.spreads:
            tiers = " | ".join(f"{t['ratio']:.3g} (≤{c.tier_factor[k]:g})" if t.get("measured") else "n/a"
                               for k, t in s.tiers.items())
            fns = f"{s.fns_ratio:.3g} (≤{c.fns_sigma_ratio:g})" if s.fns_ratio is not None else "-"
            signed = f"{s.bias['top1_logprob']['t']:+.2g} / {s.bias['margin']['t']:+.2g}"
            row = (f"| {side.who} ({side.backend}) | bf16 | {side.yardstick} | {s.kind} | {s.positions} | "
                   f"{s.ratio:.3g} (≤{c.sigma_ratio:g}) | SIGNED | {s.position_ratio:.3g} (≤{c.position_ratio:g}) "
                   f"at {s.position_at[0]} {s.position_at[1]} | {tiers} | {s.top1_agree}/{s.top1_checked} | "
                   f"{side.tie_allowance:.3g} | {fns} | {'FAIL' if s.findings else 'ok'} |")
            cells = row.split(" | ")
            # the signed t's cell: its two figures first (its bound, where it has one, after them)
            (seen,) = [r for r in rows if r.split(" | ")[:6] == cells[:6] and r.split(" | ")[7:] == cells[7:]]
            assert seen.split(" | ")[6].startswith(signed), (seen, signed)
    assert "n/a" in rows[0] and rows[1].endswith("| - | ok |") and rows[3].endswith("| FAIL |")
    assert lines[-1] == "" and [f"- {n}" for n in result.reasons + result.notes] == lines[-1 - len(
        result.reasons + result.notes):-1]
    assert lines[-2 - len(result.reasons + result.notes)] == ""
    assert lines[-3 - len(result.reasons + result.notes)].startswith("σ ratio: rms(side − fp32) / rms(yardstick − "
                                                                     "fp32), pooled and (largest per position)")


def test_padded_and_batched_rows_each_get_their_line_with_the_bound_and_where_it_peaks():
    judged = judge_contract({"candidate": padded_side(0.5, 3)}, {"candidate": EXPECTED}, load_tolerances())
    side = judged.sides[0]
    p = side.padded
    assert (f"\nPadded rows of candidate: rms(padded − unpadded) over the yardstick's rounding, largest "
            f"{p.ratio:.3g} (≤2.7) at {p.at[0]} {p.at[1]} over {p.positions} positions.") in judged.markdown()
    assert judged.reasons[0].startswith("the candidate (neuron, bf16) breaks the output contract: ")
    judged = judge_contract({"candidate": batched_side(0.5, "own", 2)}, {"candidate": EXPECTED}, load_tolerances())
    b = judged.sides[0].batched[1]
    assert (f"\nBatched rows of candidate (batched-row log-probs (own)): rms(batched − single run) over the "
            f"yardstick's rounding, largest {b.ratio:.3g} (≤2.7) at {b.at[0]} {b.at[1]} over {b.positions} "
            "positions.") in judged.markdown()


def test_a_contract_that_compared_nothing_lists_why_under_its_legs_heading():
    result = ContractResult(reasons=["r1"], notes=["n1"], leg="fp32")
    assert result.markdown() == ["### Output contract, fp32 leg", "", "- r1", "- n1", ""]
    assert result.last_position == -1 and result.to_dict()["last_position"] == -1


def test_greedy_divergences_between_the_sides_name_the_prompt_position_and_both_tokens():
    cand = copy.deepcopy(SIDE)
    greedy = cand["prompts"][1]["greedy"]
    greedy[5] += 1
    out, same = between(SIDE, cand)
    assert same == 1 and out == [Divergence("cpg_island", 5, SIDE["prompts"][1]["greedy"][5], greedy[5])]
    shorter = copy.deepcopy(SIDE)
    shorter["prompts"][0]["greedy"] = shorter["prompts"][0]["greedy"][:-1]  # a prefix: neither identical nor divergent
    shorter["prompts"] = shorter["prompts"][:1] + [{**shorter["prompts"][1], "name": "other"}]
    assert between(SIDE, shorter) == ([], 0)
    assert shared_prefix([1, 2, 3], [1, 2, 4]) == 2 and shared_prefix([1, 2], [1, 2, 3]) == 2
    assert shared_prefix([], [1]) == 0 and shared_prefix([5], [6]) == 0


def test_an_unknown_dtype_and_another_schema_are_refused_in_one_line():
    tolerances = load_tolerances()
    with pytest.raises(ContractError) as err:
        criterion_of("fp8", tolerances)
    assert str(err.value) == (f"no contract criterion for dtype 'fp8'; known: bf16, fp32, server (calibrate one into "
                              f"{TOLERANCES_FILE})")
    assert criterion_of("fp32", tolerances) is tolerances["fp32"]
    with pytest.raises(ContractError) as err:
        judge_contract({"candidate": {**SIDE, "schema": 1}}, {"candidate": EXPECTED}, tolerances)
    assert str(err.value) == (f"the candidate's contract has schema 1, expected {CONTRACT_SCHEMA} (written by this "
                              "harness's test_output_contract)")


def test_different_weights_name_every_fingerprint_sorted_and_compare_nothing():
    other = {**SIDE, "checkpoint_fingerprint": "0" * 24}
    result = judge_contract({"candidate": other}, {"candidate": EXPECTED}, load_tolerances())
    fp = SIDE["checkpoint_fingerprint"]
    assert result.reasons == [f"the contract ran on different weights (checkpoint fingerprints "
                              f"{', '.join(sorted({fp, '0' * 24}))}): give both sides the same --cache-dir or "
                              "--model-root"]
    assert result.notes == [] and result.prompts == len(REFERENCE["prompts"])


def test_a_baseline_off_the_reference_is_a_note_naming_it_and_the_positions_note_names_the_shape():
    result = both(baseline=shifted(0, "scored", 3, -1.0))
    assert result.reasons == []
    findings = [n for n in result.notes if n.startswith("the baseline (neuron, bf16) breaks the output contract: ")]
    assert findings and len(findings) == len(result.sides[0].findings)
    assert any(n.startswith("positions covered: up to position 46 (shape smoke)") for n in result.notes)
    assert "the candidate: padded rows not scored by log-probabilities (none supplied); only their greedy tokens were " \
           "compared" in result.notes


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "must hold a JSON object of dtype -> criterion"),
    ('{"fp32": 3}', "'fp32' must be an object, got 3"),
    ("{", "cannot read the contract tolerances (Expecting property name enclosed in double quotes: line 1 column 2 "
          "(char 1))"),
])
def test_a_tolerances_file_that_is_no_object_of_objects_is_refused(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(ContractError) as err:
        load_tolerances(path)
    assert str(err.value) == f"{path}: {message}"
    with pytest.raises(ContractError, match=r"cannot read the contract tolerances \(\[Errno 2\]"):
        load_tolerances(tmp_path / "missing.json")


def test_the_same_code_note_names_the_role_and_only_a_bf16_leg_points_to_fp32():
    label = YARDSTICK["computed_by"]
    stack = label.split(" bf16 ")[0]
    (note,) = same_code({"stack": stack, "dtype": "bf16"}, REFERENCE, YARDSTICK)
    assert note == (f"runs the yardstick's own code ({label}), so its bf16 leg compares that code with itself: a "
                    "defect shared with the check's transformers cannot show there; an fp32 leg (--dtype fp32) is "
                    "what can")
    reference = {"computed_by": f"{stack} fp32 (prefill + decode steps)"}
    (note,) = same_code({"stack": stack, "dtype": "fp32"}, reference, {"computed_by": "other"})
    assert note.startswith(f"runs the reference's own code ({stack} fp32 (prefill + decode steps)), so its fp32 leg")
    assert note.endswith("cannot show there")
    assert same_code({"dtype": "bf16"}, REFERENCE, YARDSTICK) == []


def test_a_comment_and_an_alias_before_the_criteria_are_read_past(tmp_path):
    data = json.loads(TOLERANCES_FILE.read_text())
    ordered = {"_about": "first", "server": {"same_as": "bf16"}, **{k: v for k, v in data.items() if k != "server"}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(ordered))
    loaded = load_tolerances(path)
    assert loaded["server"] is loaded["bf16"] and {"fp32", "bf16", "server"} <= set(loaded)


@pytest.mark.parametrize("field", ["sigma_ratio", "tie_factor", "fns_sigma_ratio", "sigma_floor", "abs_floor",
                                   "margin_floor", "position_ratio", "pad_factor", "tie_position_factor",
                                   "sigma_tokens", "tier_factor.50"])
def test_a_bad_value_is_refused_in_one_line_naming_the_file_and_the_field(tmp_path, field):
    data = json.loads(TOLERANCES_FILE.read_text())
    if field.startswith("tier_factor."):
        data["fp32"]["tier_factor"][field.split(".")[1]] = -1
    else:
        data["fp32"][field] = -1
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError) as err:
        load_tolerances(path)
    assert str(err.value) == f"{path}: fp32.{field} must be a positive number, got -1"


def test_a_missing_field_is_refused_naming_every_field_a_criterion_needs(tmp_path):
    data = json.loads(TOLERANCES_FILE.read_text())
    del data["fp32"]["pad_factor"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError) as err:
        load_tolerances(path)
    assert str(err.value) == (f"{path}: 'fp32' needs {', '.join(sorted(CRITERION_KEYS))}; missing ['pad_factor'], "
                              "unknown []")
    assert "abs_floor, " in str(err.value) and ", tier_factor;" in str(err.value)


@pytest.mark.parametrize("who, kind, change", [
    ("reference", "cut", lambda c: c["prompts"][1]["sequences"]["cut"].__setitem__("from", 3)),
    ("yardstick", "cut", lambda c: c["prompts"][1]["sequences"]["cut"].__setitem__("from", 3)),
    ("yardstick", "cut", lambda c: c["prompts"][1]["sequences"].pop("cut")),
    ("reference", "scored", lambda c: c["prompts"].pop(1)),  # the first kind of the prompt it lacks
])
def test_rows_computed_for_another_sequence_are_refused_naming_the_prompt_the_kind_and_who(who, kind, change):
    expected = {"reference": copy.deepcopy(REFERENCE), "yardstick": copy.deepcopy(YARDSTICK)}
    change(expected[who])
    with pytest.raises(ContractError) as err:
        judge_contract({"candidate": SIDE}, {"candidate": expected}, load_tolerances())
    assert str(err.value) == (f"prompt 'cpg_island': the {who} did not score this side's {kind} sequence (computed for "
                              "another side)")


def test_fns_marginals_are_judged_only_where_all_three_supplied_them_and_a_kind_without_rows_is_left_out():
    result = both()
    assert [s.fns_ratio is not None for s in result.sides[1].spreads] == [True, False, False]
    yardstick = copy.deepcopy(YARDSTICK)
    for p in yardstick["prompts"]:
        p["sequences"]["scored"].pop("fns", None)
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        p["sequences"]["cut"]["rows"] = []
    judged = judge_contract({"candidate": side}, {"candidate": {"reference": REFERENCE, "yardstick": yardstick}},
                            load_tolerances()).sides[0]
    assert [(s.kind, s.fns_ratio) for s in judged.spreads] == [("scored", None), ("own", None)]
    scored = judged.spreads[0]
    assert scored.positions == sum(len(p["sequences"]["scored"]["rows"]) for p in SIDE["prompts"])
    first = SIDE["prompts"][0]["sequences"]["scored"]["from"]
    assert first == 2 and scored.position_at[1] >= first


def test_a_concurrent_row_that_diverged_is_noted_with_where_and_an_unlabelled_yardstick_reads_a_question_mark():
    side = batched_side()
    batched = side["prompts"][1]["batched"]
    batched["diverged_at"], batched["rows"] = 7, [rows[:7] for rows in batched["rows"]]
    yardstick = {k: v for k, v in YARDSTICK.items() if k != "computed_by"}
    judged = judge_contract({"candidate": side}, {"candidate": {"reference": REFERENCE, "yardstick": yardstick}},
                            load_tolerances()).sides[0]
    assert judged.yardstick == "?" and judged.backend == "neuron" and judged.dtype == "bf16"
    assert judged.notes[-1] == ("batched rows of cpg_island: the concurrent row's greedy token 7 differs from its "
                                "single run's; its rows are compared up to there")
    assert sum("concurrent row" in n for n in judged.notes) == 1
    assert judged.last_position == max(p["sequences"][k]["from"] + len(p["sequences"][k]["rows"]) - 1
                                       for p in SIDE["prompts"] for k in p["sequences"])


def test_the_sides_greedy_divergences_are_shown_where_both_sides_ran():
    cand = copy.deepcopy(SIDE)
    cand["prompts"][0]["greedy"][3] += 1
    result = both(candidate=cand)
    assert result.identical == 1 and [(d.prompt, d.position) for d in result.divergences] == [("balanced", 3)]
    assert "Greedy tokens identical between the sides on 1 of 2 prompts." in result.markdown()
    alone = judge_contract({"candidate": cand}, {"candidate": EXPECTED}, load_tolerances())
    assert alone.divergences == [] and alone.identical == 0


def test_the_legs_note_names_each_sides_dtype_a_prompt_one_side_lacks_hides_none_and_no_side_compares_nothing():
    result = both()
    assert any(n.startswith("contract legs: baseline bf16, candidate bf16;") for n in result.notes)
    cand = copy.deepcopy(SIDE)
    cand["prompts"] = cand["prompts"][1:]  # the baseline's first prompt is not the candidate's
    cand["prompts"][0]["greedy"][2] += 1
    out, same = between(SIDE, cand)
    assert same == 0 and [(d.prompt, d.position) for d in out] == [("cpg_island", 2)]
    empty = judge_contract({}, {}, load_tolerances())
    assert (empty.prompts, empty.reasons, empty.sides) == (0, [], [])
