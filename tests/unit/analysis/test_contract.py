"""The output contract's three-way rule (``harness.analysis.contract``, ``threeway``, ``side_checks``) on
real contracts of carbon-tiny at the smoke shape (``fixtures/contract/threeway-*.json``, trimmed by
``tests/unit/analysis/make_contract_fixtures.py`` from a release check's evidence): NxDI 0.9 in its CPU
mode in bf16, and the fp32 transformers reference and bf16 yardstick computed for it. A change is made to
a copy, never to the fixture."""

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
    judge_contract,
    judge_side,
    load_tolerances,
)
from harness.core.paths import REPO_ROOT

pytestmark = pytest.mark.unit

FIXTURES = REPO_ROOT / "fixtures" / "contract"


def _load(name: str) -> dict:
    return json.loads((FIXTURES / f"threeway-{name}.json").read_text())


SIDE, REFERENCE, YARDSTICK = _load("side"), _load("reference"), _load("yardstick")


@pytest.fixture(scope="module")
def crit():
    return load_tolerances()["bf16"]


def judged(side, crit, reference=REFERENCE, yardstick=YARDSTICK):
    return judge_side("candidate", side, reference, yardstick, crit)


def test_a_correct_bf16_stack_keeps_the_contract(crit):
    out = judged(SIDE, crit)
    assert out.passed, [f.describe() for f in out.findings]
    assert {s.kind for s in out.spreads} == {"scored", "own", "cut"}
    for s in out.spreads:
        assert 0.5 < s.ratio <= crit.sigma_ratio and s.top1_agree == s.top1_checked > 0
        assert s.tiers["1000"] == {"measured": False}  # the fixture keeps each row's top 60 only
        assert all(t["measured"] and 0 < t["ratio"] <= crit.tier_factor[k] for k, t in s.tiers.items() if k != "1000")
    assert 0 < out.margin_noise and out.tie_allowance == crit.tie_factor * max(out.margin_noise, crit.margin_floor)


def test_the_yardstick_against_itself_reads_one(crit):
    out = judged(YARDSTICK, crit)
    for s in out.spreads:
        assert s.ratio == pytest.approx(1.0) and s.sigma_target == s.sigma_yardstick > 0
        assert all(t["ratio"] == pytest.approx(1.0) for t in s.tiers.values() if t["measured"])


def blend(c: float) -> dict:
    """A target whose every log-probability is the reference's plus ``c`` times the yardstick's
    difference from it, on the reference's reported ids: its sigma ratio is ``c`` by construction."""
    out = copy.deepcopy(REFERENCE)
    out.update(backend="test", dtype="bf16", computed_by=None)
    for p, yp in zip(out["prompts"], YARDSTICK["prompts"]):
        for kind, seq in p["sequences"].items():
            for j, (row, yrow) in enumerate(zip(seq["rows"], yp["sequences"][kind]["rows"])):
                y = {i: v for i, v in [*yrow[3], *yrow[2]]} | {yrow[0]: yrow[1]}
                mixed = {i: v + c * (y[i] - v) for i, v in [*row[2], (row[0], row[1])] if i in y}
                top = sorted(((i, mixed[i]) for i, _ in row[2] if i in mixed), key=lambda t: -t[1])
                probes = [v + c * (w - v) for v, w in zip(row[4], yrow[4])]
                seq["rows"][j] = [row[0], mixed[row[0]], [list(t) for t in top], [], probes]
            seq.pop("fns", None)
    return out


@settings(max_examples=12, deadline=None)
@given(c=st.floats(0.2, 4.0))
def test_the_sigma_ratio_is_the_scale_of_the_difference_and_gates_at_its_bound(crit, c):
    out = judged(blend(c), crit)
    for s in out.spreads:
        assert s.ratio == pytest.approx(c, rel=1e-2)  # ids the trimmed yardstick lacks read as bounds
    over = [f for f in out.findings if f.criterion.startswith("sigma ratio")]
    assert bool(over) == (c > crit.sigma_ratio) or abs(c - crit.sigma_ratio) < 0.02 * c


def shifted(prompt: int, kind: str, row: int, delta: float) -> dict:
    """The side with its log-probability of one row's top-1 token moved by ``delta`` nats."""
    out = copy.deepcopy(SIDE)
    r = out["prompts"][prompt]["sequences"][kind]["rows"][row]
    token = r[2][0][0]
    r[2][0][1] += delta
    if r[0] == token:
        r[1] += delta
    r[2].sort(key=lambda t: -t[1])
    return out


@settings(max_examples=10, deadline=None)
@given(prompt=st.integers(0, 1), kind=st.sampled_from(["scored", "own", "cut"]), data=st.data())
def test_one_position_off_fails_naming_the_tier_the_prompt_and_the_position(crit, prompt, kind, data):
    seq = SIDE["prompts"][prompt]["sequences"][kind]
    row = data.draw(st.integers(0, len(seq["rows"]) - 1))
    out = judged(shifted(prompt, kind, row, -1.0), crit)
    tier = [f for f in out.findings if f.criterion == f"top-5 log-prob tier ({kind})"]
    assert tier and tier[0].prompt == SIDE["prompts"][prompt]["name"] and tier[0].position == seq["from"] + row
    assert tier[0].describe().startswith(f"top-5 log-prob tier ({kind}): ")


def _margin_rows(kind: str, tie: float, wide: bool) -> list[tuple[int, int]]:
    """(prompt, row) where the reference's margin is over (``wide``) or well under the near-tie allowance."""
    out = []
    for i, p in enumerate(REFERENCE["prompts"]):
        for j, r in enumerate(p["sequences"][kind]["rows"]):
            margin = r[2][0][1] - r[2][1][1]
            if (margin > 2 * tie) if wide else (margin < tie / 2):
                out.append((i, j))
    return out


def swapped(prompt: int, kind: str, row: int) -> dict:
    """The side with its top-1 and top-2 exchanged at one row (a flipped greedy choice)."""
    out = copy.deepcopy(SIDE)
    r = out["prompts"][prompt]["sequences"][kind]["rows"][row]
    (a, va), (b, vb) = r[2][0], r[2][1]
    r[2][0], r[2][1] = [b, va], [a, vb]
    r[1] = {a: vb, b: va}.get(r[0], r[1])
    return out


def test_a_top1_flip_fails_beyond_a_near_tie_and_is_excused_within_it(crit):
    tie = judged(SIDE, crit).tie_allowance
    wide, narrow = _margin_rows("scored", tie, True), _margin_rows("scored", tie, False)
    assert wide and narrow, "the fixture has both kinds of positions"
    (i, j) = wide[0]
    out = judged(swapped(i, "scored", j), crit)
    flips = [f for f in out.findings if f.criterion == "top-1 agreement (scored)"]
    assert flips and flips[0].position == SIDE["prompts"][i]["sequences"]["scored"]["from"] + j
    (i, j) = narrow[0]
    assert not [f for f in judged(swapped(i, "scored", j), crit).findings if f.criterion.startswith("top-1")]


def test_a_tokenizer_that_moves_a_boundary_fails_at_the_first_id(crit):
    side = copy.deepcopy(SIDE)
    side["prompts"][1]["prompt_ids"][7] += 1
    found = [f for f in judged(side, crit).findings if f.criterion == "tokenization"]
    assert [(f.prompt, f.position) for f in found] == [(SIDE["prompts"][1]["name"], 7)]


def test_greedy_tokens_off_the_reference_fail_unless_at_a_near_tie(crit):
    tie = judged(SIDE, crit).tie_allowance
    for wide in (True, False):
        rows = _margin_rows("own", tie, wide)
        if not rows:
            continue
        i, k = rows[0]
        side = copy.deepcopy(SIDE)
        side["prompts"][i]["greedy"][k] = REFERENCE["prompts"][i]["greedy"][k] + 1
        side["prompts"][i]["greedy"][k + 1:] = [0] * len(side["prompts"][i]["greedy"][k + 1:])
        found = [f for f in judged(side, crit).findings if f.criterion == "greedy tokens"]
        start = len(SIDE["prompts"][i]["prompt_ids"])
        assert [(f.prompt, f.position) for f in found] == ([(SIDE["prompts"][i]["name"], start + k)] if wide else [])


@pytest.mark.parametrize("change, why", [
    (lambda eos: eos["tokens"].extend([5, 6]), "past the EOS id"),
    (lambda eos: eos["tokens"].__setitem__(slice(None), eos["tokens"][:-1]), "stopped early"),
])
def test_eos_must_stop_generation_where_it_stands(crit, change, why):
    side = copy.deepcopy(SIDE)
    eos = side["prompts"][0]["eos"]
    change(eos)
    found = [f for f in judged(side, crit).findings if f.criterion == "EOS honoured"]
    assert len(found) == 1 and why in found[0].detail
    assert found[0].position == len(SIDE["prompts"][0]["prompt_ids"]) + (eos["stop"] if "past" in why else eos["stop"])


def test_the_pad_id_is_never_generated(crit):
    side = copy.deepcopy(SIDE)
    side["prompts"][0]["greedy"][3] = side["pad_token_id"]
    found = [f for f in judged(side, crit).findings if f.criterion == "pad id never generated"]
    assert [f.position for f in found] == [len(SIDE["prompts"][0]["prompt_ids"]) + 3]


def test_a_padded_row_must_generate_what_it_does_unpadded(crit):
    tie = judged(SIDE, crit).tie_allowance
    wide = _margin_rows("cut", tie, True)
    i, k = wide[0]
    side = copy.deepcopy(SIDE)
    side["prompts"][i]["padded"]["greedy"][k] += 1
    found = [f for f in judged(side, crit).findings if f.criterion == "padded row"]
    assert [f.position for f in found] == [SIDE["prompts"][i]["sequences"]["cut"]["from"] + k]


def test_a_bf16_side_labelled_fp32_is_held_to_fp32s_spread():
    fp32 = load_tolerances()["fp32"]
    out = judge_side("candidate", SIDE, REFERENCE, REFERENCE, fp32)  # an fp32 yardstick that reads zero
    assert any(f.criterion.startswith("sigma ratio") for f in out.findings)
    assert all(s.ratio > fp32.sigma_ratio for s in out.spreads)


def test_the_candidates_findings_fail_the_check_the_baselines_are_notes():
    tolerances = load_tolerances()
    broken = shifted(0, "scored", 3, -1.0)
    result = judge_contract({"baseline": broken, "candidate": SIDE},
                            {w: {"reference": REFERENCE, "yardstick": YARDSTICK} for w in ("baseline", "candidate")},
                            tolerances)
    assert result.reasons == [] and any("the baseline" in n and "top-5" in n for n in result.notes)
    result = judge_contract({"baseline": SIDE, "candidate": broken},
                            {w: {"reference": REFERENCE, "yardstick": YARDSTICK} for w in ("baseline", "candidate")},
                            tolerances)
    assert result.reasons and all(r.startswith("the candidate (neuron, bf16) breaks the output contract: ")
                                  for r in result.reasons)
    assert "| candidate (neuron) | bf16 |" in "\n".join(result.markdown())


def test_different_weights_are_refused_before_anything_is_compared():
    other = copy.deepcopy(SIDE)
    other["checkpoint_fingerprint"] = "0" * 24
    result = judge_contract({"candidate": other}, {"candidate": {"reference": REFERENCE, "yardstick": YARDSTICK}},
                            load_tolerances())
    assert result.sides == [] and "different weights" in result.reasons[0]


def test_a_yardstick_computed_for_another_side_is_refused(crit):
    side = copy.deepcopy(SIDE)
    side["prompts"][0]["sequences"]["own"]["tokens"][-1] += 1
    with pytest.raises(ContractError, match="did not score this side's own sequence"):
        judged(side, crit)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("fp32"), "needs at least an 'fp32' entry"),
    (lambda d: d["bf16"].pop("abs_floor"), "missing ['abs_floor']"),
    (lambda d: d["bf16"].__setitem__("sigma_ratio", -1), "bf16.sigma_ratio must be a positive number"),
    (lambda d: d["bf16"]["tier_factor"].pop("all"), "tier_factor must have exactly the tiers"),
    (lambda d: d.__setitem__("server", {"same_as": "fp8"}), "'server' is the same as 'fp8'"),
])
def test_a_malformed_tolerances_file_is_refused_by_name(tmp_path, mutate, message):
    data = json.loads(TOLERANCES_FILE.read_text())
    mutate(data)
    path = tmp_path / "tolerances.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_tolerances(path)


def test_the_shipped_tolerances_load_and_name_every_dtype_a_side_may_have():
    loaded = load_tolerances()
    assert {"fp32", "bf16", "server"} <= set(loaded) and loaded["server"] is loaded["bf16"]
    assert all(math.isfinite(c.sigma_ratio) and c.sigma_ratio > 1 for c in loaded.values())


def test_every_shipped_bound_is_derived_from_the_calibration_beside_it():
    """fixtures/contract/tolerances.json is exactly what the calibration rules give from calibration.json
    (``carbon-harness contract-zoo calibrate``), which names the command that regenerates it."""
    from harness.release.zoo_report import CALIBRATION_FILE, tolerances_from

    record = json.loads(CALIBRATION_FILE.read_text())
    shipped = {k: v for k, v in json.loads(TOLERANCES_FILE.read_text()).items() if not k.startswith("_")}
    assert tolerances_from(record) == shipped
    assert "contract-zoo calibrate" in record["command"] and record["bf16_correct"]["cases"]
    assert record["fp32_correct"]["cases"] and {"carbon-tiny", "carbon-tiny-trained"} <= set(record["margins"])
    assert record["per_position_tie"]["bf16"]["factor_needed"] == shipped["bf16"]["tie_position_factor"]


def padded_side(shift: float = 0.0, at: int | None = None) -> dict:
    """The fixture's side with padded rows: its own cut rows, each log-prob moved by ``shift`` (alternating
    in sign over the row's ids) at cut row ``at`` (every row when None)."""
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        rows = copy.deepcopy(p["sequences"]["cut"]["rows"])
        for j, row in enumerate(rows):
            if at is None or j == at:
                row[1] += shift
                row[2] = [[i, v + shift * (-1) ** k] for k, (i, v) in enumerate(row[2])]
                row[3:] = []  # extra and probes: the top is what the judge reads
        p["padded"]["rows"] = rows
    return side


def test_padded_rows_equal_to_the_unpadded_ones_pass_and_are_reported(crit):
    out = judged(padded_side(), crit)
    assert out.passed and out.padded is not None and out.padded.ratio == 0.0
    assert out.padded.positions == sum(len(p["sequences"]["cut"]["rows"]) for p in SIDE["prompts"])


def test_a_padded_row_that_moves_one_position_fails_naming_the_prompt_and_the_position(crit):
    out = judged(padded_side(shift=0.5, at=3), crit)
    found = [f for f in out.findings if f.criterion == "padded-row log-probs (cut)"]
    assert found and found[0].prompt in {p["name"] for p in SIDE["prompts"]}
    assert found[0].position == SIDE["prompts"][0]["sequences"]["cut"]["from"] + 3 and found[0].at == "largest"


def test_a_side_without_padded_rows_says_why_in_a_note(crit):
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        p["padded"]["rows_not_measured"] = "OpenAIEngine does not score a padded row"
    out = judged(side, crit)
    assert out.padded is None
    assert any("padded rows not scored by log-probabilities (OpenAIEngine does not score a padded row)" in n
               for n in out.notes), out.notes


def test_padded_rows_that_score_other_tokens_are_refused(crit):
    side = padded_side()
    side["prompts"][0]["padded"]["rows"].pop()
    with pytest.raises(ContractError, match="padded rows for .* unpadded cut rows"):
        judged(side, crit)


def batched_side(shift: float = 0.0, kind: str = "own", at: int | None = None) -> dict:
    """The fixture's side with batched rows (``cut`` and ``own`` in one batch of mixed lengths): its own rows of
    each kind, those of ``kind`` moved by ``shift`` (alternating in sign) at row ``at`` (every row when None)."""
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        rows_of = {}
        for k in ("cut", "own"):
            rows = copy.deepcopy(p["sequences"][k]["rows"])
            for j, row in enumerate(rows):
                if k == kind and (at is None or j == at):
                    row[1] += shift
                    row[2] = [[i, v + shift * (-1) ** n] for n, (i, v) in enumerate(row[2])]
                    row[3:] = []
            rows_of[k] = rows
        p["batched"] = {"rows_of": ["cut", "own"], "rows": [rows_of["cut"], rows_of["own"]]}
    return side


def test_batched_rows_equal_to_the_single_runs_pass_and_are_reported_per_row_kind(crit):
    out = judged(batched_side(), crit)
    assert out.passed and [b.what for b in out.batched] == ["batched-row log-probs (cut)",
                                                          "batched-row log-probs (own)"]
    assert all(b.ratio == 0.0 for b in out.batched)
    assert out.batched[1].positions == sum(len(p["sequences"]["own"]["rows"]) for p in SIDE["prompts"])
    assert any("Batched rows of candidate (batched-row log-probs (own))" in line
               for line in judge_contract_markdown(out))


def judge_contract_markdown(side_judgement) -> list[str]:
    from harness.analysis.contract import ContractResult

    return ContractResult(sides=[side_judgement]).markdown()


@pytest.mark.parametrize("kind", ["cut", "own"])
def test_a_batched_row_that_moves_one_position_fails_naming_its_kind_prompt_and_position(crit, kind):
    out = judged(batched_side(shift=0.5, kind=kind, at=2), crit)
    found = [f for f in out.findings if f.criterion.startswith("batched-row")]
    assert [f.criterion for f in found] == [f"batched-row log-probs ({kind})"], [f.describe() for f in out.findings]
    assert found[0].position == SIDE["prompts"][0]["sequences"][kind]["from"] + 2 and found[0].at == "largest"


def test_a_side_that_cannot_batch_mixed_lengths_says_why_and_batched_rows_of_an_unscored_kind_are_refused(crit):
    side = copy.deepcopy(SIDE)
    for p in side["prompts"]:
        p["batched"] = {"rows_of": ["cut", "own"], "rows_not_measured": "OpenAIEngine does not score a batch"}
    out = judged(side, crit)
    assert out.batched == [] and any("batched rows of mixed lengths not scored by log-probabilities (OpenAIEngine "
                                     "does not score a batch)" in n for n in out.notes), out.notes
    side = batched_side()
    side["prompts"][0]["batched"]["rows_of"] = ["cut", "long"]
    with pytest.raises(ContractError, match="batched rows of 'long', a sequence this side did not score"):
        judged(side, crit)
    side = batched_side()
    side["prompts"][0]["batched"]["rows"][1].pop()
    with pytest.raises(ContractError, match="batched rows for .* unpadded own rows"):
        judged(side, crit)


def test_a_transformers_side_running_its_yardsticks_code_is_told_so_and_another_stack_is_not(crit):
    label = YARDSTICK["computed_by"]  # "transformers X bf16 (prefill + decode steps)"
    side = {**SIDE, "backend": "hf", "dtype": "bf16", "stack": label.split(" bf16 ")[0]}
    assert any("runs the yardstick's own code" in n and "an fp32 leg" in n for n in judged(side, crit).notes)
    assert not any("own code" in n for n in judged({**side, "stack": "transformers 0.0.0"}, crit).notes)


@pytest.mark.parametrize("dtypes, says", [({"baseline": "bf16", "candidate": "fp32"}, "the fp32 leg holds"),
                                          ({"baseline": "fp32", "candidate": "bf16"}, "bf16 leg only"),
                                          ({"baseline": "bf16", "candidate": "bf16"}, "no fp32 leg ran")])
def test_the_verdict_says_which_leg_ran(dtypes, says):
    from harness.analysis.contract import legs_note

    [note] = legs_note(dtypes)
    assert says in note and all(f"{who} {dtype}" in note for who, dtype in dtypes.items())
