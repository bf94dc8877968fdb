"""What the output contract's verdict says of itself (``harness.analysis.contract``, ``threeway``): which leg
ran, decided by the candidate's dtype; which top-1 flip broke it; where the FNS marginals are most off; the
largest position its shapes reached. Real contracts of carbon-tiny at the smoke shape
(``fixtures/contract/threeway-*.json``: NxDI 0.9's CPU mode in bf16, its fp32 reference and bf16 yardstick),
changed in a copy only, and small hand-built rows."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import pytest

from harness.analysis.contract import judge_contract, judge_side, legs_note, load_tolerances
from harness.analysis.threeway import Aligned, Criterion, spread
from harness.core.paths import REPO_ROOT
from harness.core.scored import ScoredToken

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

CRIT = Criterion("bf16", sigma_ratio=1.5, tier_factor={"5": 1.9, "50": 2.2, "1000": 2.0, "all": 1.8},
                 tie_factor=8.0, fns_sigma_ratio=1.5, sigma_floor=1e-4, abs_floor=1e-4, margin_floor=1e-4,
                 position_ratio=3.0, pad_factor=3.0)
RANKS = tuple((100 + j, -0.5 - j * 0.01) for j in range(1000))  # every finite tier measured; margins 0.01


def ranked(values) -> ScoredToken:
    top = tuple(sorted(values, key=lambda t: -t[1]))
    return ScoredToken(100, dict(top)[100], top)


def yardstick(k: int) -> ScoredToken:
    return ranked((i, v + 1e-4 * (-1) ** (j + k)) for j, (i, v) in enumerate(RANKS))


def test_a_top1_flip_is_named_beside_a_top1000_tier_finding():
    """A flip at position 8, where a top-1000 id moved at position 7 already broke the top-1000 tier: the
    top-1 finding names the prompt, the flip's position, the reference's margin there, the allowance and the
    agreement over the checked positions (its prefix is not the tier's)."""
    late = tuple((i, v + (0.05 if j == 999 else 0.0)) for j, (i, v) in enumerate(RANKS))  # rank 1000 only
    flip = ((101, RANKS[0][1]), (100, RANKS[1][1]), *RANKS[2:])
    a = Aligned("own")
    for k, target in enumerate([ranked(late), ranked(flip), ranked(RANKS)]):
        a.rows.append(("GC-rich", 7 + k, target, ranked(RANKS), yardstick(k)))
    found = spread(a, replace(CRIT, sigma_ratio=1e9, position_ratio=1e9), 1.2e-3)
    names = [f.criterion for f in found.findings]
    assert "top-1000 log-prob tier (own)" in names, names
    [top1] = [f for f in found.findings if f.criterion == "top-1 agreement (own)"]
    assert (top1.prompt, top1.position) == ("GC-rich", 8)
    assert "agreement 2/3" in top1.detail and "margin of 0.01 nats" in top1.detail
    assert "near-tie allowance there 0.0012" in top1.detail, top1.detail
    assert top1.describe().endswith("(prompt GC-rich, first at position 8)")


def fns_rows(target_off: dict[int, float], yardstick_off: dict[int, float], n: int = 10) -> Aligned:
    """``n`` positions of FNS marginals: the yardstick ``yardstick_off.get(k, 1e-3)`` from the reference
    (alternating in sign), the target at the yardstick's own values except ``target_off[k]`` where given."""
    a = Aligned("own")
    reference = [-1.0, -1.2, -1.4, -1.6]
    for k in range(n):
        y = [x + yardstick_off.get(k, 1e-3) * (-1) ** i for i, x in enumerate(reference)]
        t = [x + target_off[k] * (-1) ** i for i, x in enumerate(reference)] if k in target_off else y
        a.rows.append(("balanced", 2 + k, ranked(RANKS), ranked(RANKS), ranked(RANKS)))
        a.fns.append(("balanced", 2 + k, t, reference, y))
    return a


def test_the_fns_finding_names_where_its_own_ratio_peaks_not_the_yardsticks_noisiest_position():
    """The yardstick is noisiest at position 2 (1e-2; the target matches it there), the target 2e-2 at position 10
    (the yardstick 1e-3 there): the finding names 10, with its ratio there over the yardstick's there, floored
    by the yardstick's pooled spread."""
    found = spread(fns_rows({8: 2e-2}, {0: 1e-2}), CRIT, 1e-3)
    [fns] = [f for f in found.findings if f.criterion == "FNS sigma ratio (own)"]
    assert found.fns_ratio > CRIT.fns_sigma_ratio
    assert (fns.prompt, fns.position, fns.at) == ("balanced", 10, "largest"), fns.describe()
    pooled = (1e-4 + 9 * 1e-6) ** 0.5 / 10 ** 0.5  # the yardstick's rms over every position, the floor
    assert f"{2e-2 / pooled:.3g} at its largest position" in fns.detail, fns.detail


def test_the_fns_finding_at_one_position_is_held_to_the_yardstick_there_where_it_is_noisier_than_pooled():
    """The target 3x off at position 2 where the yardstick is 1e-2 (its ratio there 3) and 2e-2 at position 7
    where the yardstick is 1e-3 (floored at its pooled spread: a ratio near 6): the larger names it."""
    found = spread(fns_rows({0: 3e-2, 5: 2e-2}, {0: 1e-2}), CRIT, 1e-3)
    [fns] = [f for f in found.findings if f.criterion == "FNS sigma ratio (own)"]
    assert fns.position == 7, fns.describe()


def test_every_verdict_states_the_largest_position_its_shapes_covered_and_what_lies_past_it():
    """The smoke shape's sequences are 47 tokens long: position 46 is the last any row scored, and the verdict
    says a defect acting only past it cannot show; the figure follows the side's rows."""
    side, ref, yard = (json.loads((REPO_ROOT / "fixtures" / "contract" / f"threeway-{n}.json").read_text())
                       for n in ("side", "reference", "yardstick"))
    last = max(s["from"] + len(s["rows"]) - 1 for p in side["prompts"] for s in p["sequences"].values())
    assert last == 46
    expected = {w: {"reference": ref, "yardstick": yard} for w in ("baseline", "candidate")}
    result = judge_contract({"baseline": side, "candidate": side}, expected, load_tolerances())
    [note] = [n for n in result.notes if n.startswith("positions covered")]
    assert "up to position 46 (shape smoke)" in note and "past position 46 cannot show here" in note, note
    assert result.last_position == 46 and result.to_dict()["last_position"] == 46
    assert any("positions covered: up to position 46" in line for line in result.markdown())
    for who in (ref, yard, side):  # the side and its reference and yardstick, one row shorter on every sequence
        for p in who["prompts"]:
            for s in p["sequences"].values():
                s["rows"].pop()
    shorter = judge_contract({"candidate": side}, {"candidate": expected["candidate"]}, load_tolerances())
    assert shorter.last_position == 45 and any("up to position 45" in n for n in shorter.notes)


def _fixture(name: str) -> dict:
    return json.loads((REPO_ROOT / "fixtures" / "contract" / f"threeway-{name}.json").read_text())


def _moved_there(reference: dict, yardstick: dict, prompt: int, k: int) -> tuple[float, float]:
    """The reference's top-1 / top-2 margin at the ``own`` row ``k`` and the yardstick's change to it there."""
    r = reference["prompts"][prompt]["sequences"]["own"]["rows"][k]
    y = yardstick["prompts"][prompt]["sequences"]["own"]["rows"][k]
    (i1, v1), (i2, v2) = r[2][0], r[2][1]
    yv = {i: v for i, v in [*y[3], *y[2]]}
    return v1 - v2, abs((yv[i1] - yv[i2]) - (v1 - v2))


def test_a_greedy_divergence_is_held_to_the_near_tie_allowance_at_its_own_position():
    """Under fp32's criterion (tie_position_factor 1.2), with NxDI's bf16 yardstick beside the reference: a
    divergence where the reference's margin is inside the global allowance but beyond 1.2x the yardstick's move
    there fails, naming both allowances; one whose margin is within the allowance there is excused."""
    side, ref, yard = _fixture("side"), _fixture("reference"), _fixture("yardstick")
    crit = load_tolerances()["fp32"]
    tie = judge_side("candidate", side, ref, yard, crit).tie_allowance
    rows = [(i, k, *_moved_there(ref, yard, i, k)) for i, p in enumerate(ref["prompts"])
            for k in range(len(p["greedy"]))]
    beyond = [(i, k, m, crit.tie_position_factor * max(mv, crit.margin_floor)) for i, k, m, mv in rows
              if crit.tie_position_factor * max(mv, crit.margin_floor) < m < tie]
    within = [(i, k) for i, k, m, mv in rows if m < min(tie, crit.tie_position_factor * max(mv, crit.margin_floor))]
    assert beyond and within, "the fixture has both kinds of positions"
    for (i, k), fails in ((beyond[0][:2], True), (within[0], False)):
        changed = copy.deepcopy(side)
        greedy = changed["prompts"][i]["greedy"]
        greedy[k:] = [ref["prompts"][i]["greedy"][k] + 1] + [0] * (len(greedy) - k - 1)
        judged = judge_side("candidate", changed, ref, yard, crit)
        found = [f for f in judged.findings if f.criterion == "greedy tokens"]
        start = len(side["prompts"][i]["prompt_ids"])
        assert [(f.prompt, f.position) for f in found] == ([(side["prompts"][i]["name"], start + k)] if fails else [])
        if fails:
            assert f"the near-tie allowance there {beyond[0][3]:.3g}; {tie:.3g} anywhere" in found[0].detail, found


def biased(shift: float, n: int = 30, noise: float = 2e-3) -> Aligned:
    """``n`` positions where the target lowers the reference's top-1 log-prob by ``shift`` nats on top of the
    yardstick's rounding (alternating +-``noise``, the same at the target where ``shift`` is 0): a signed bias."""
    a = Aligned("own")
    for k in range(n):
        jitter = noise * (-1) ** k * (1 + (k % 3))  # the yardstick's rounding, not of one size
        y = ranked((i, v + (jitter if j == 0 else 0.0)) for j, (i, v) in enumerate(RANKS[:50]))
        t = ranked((i, v + (jitter * 0.8 - shift if j == 0 else 0.0)) for j, (i, v) in enumerate(RANKS[:50]))
        a.rows.append(("balanced", 31 + k, t, ranked(RANKS[:50]), y))
    return a


def test_a_signed_bias_is_shown_as_a_paired_t_against_the_yardstick_and_not_gated_without_a_bound():
    """A target that lowers the reference's top-1 log-prob (and so its top-1 / top-2 margin) by 1e-3 nats at
    every position, inside the yardstick's rounding (+-2e-3 to 6e-3): its mean signed change is 1e-3 below the
    yardstick's, a paired t far beyond 3; a target with the yardstick's own rounding scaled reads near 0. Without a
    bound (``bias_t`` inf: fp32) shown, not a finding (test_signed_bias_gate: with one)."""
    loose = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, tier_factor={k: 1e9 for k in CRIT.tier_factor})
    low = spread(biased(1e-3), loose, 1.0)
    assert low.findings == []
    for key in ("top1_logprob", "margin"):
        b = low.bias[key]
        assert b["n"] == 30 and b["target"] - b["yardstick"] == pytest.approx(-1e-3 - 0.2 * b["yardstick"], abs=1e-9)
        assert b["t"] < -3, low.bias
    none = spread(biased(0.0), loose, 1.0).bias
    assert all(abs(none[k]["t"]) < 1 for k in ("top1_logprob", "margin")), none
    assert spread(biased(-1e-3), loose, 1.0).bias["top1_logprob"]["t"] > 3


def test_the_signed_t_is_shown_beside_the_sigma_ratio_and_a_correct_bf16_stack_reads_it_small():
    """NxDI 0.9's CPU mode in bf16, correct (the fixture): its signed t per sequence kind is within +-2 (measured
    0.97 / 0.55 scored, 0.53 / 0.23 own, 1.3 / 1.65 cut), where the planted bf16-only defects of issue 56 read
    -3.3 to -6.0; the table shows it after the sigma ratio with its bound, and no finding follows from it."""
    side, ref, yard = _fixture("side"), _fixture("reference"), _fixture("yardstick")
    result = judge_contract({"candidate": side}, {"candidate": {"reference": ref, "yardstick": yard}},
                            load_tolerances())
    [judged] = result.sides
    assert judged.passed and {s.kind for s in judged.spreads} == {"scored", "own", "cut"}
    for s in judged.spreads:
        assert all(0 < abs(s.bias[k]["t"]) < 2 and s.bias[k]["n"] == s.positions for k in ("top1_logprob", "margin"))
    table = "\n".join(result.markdown())
    assert "| σ ratio | signed t (top-1 / margin) | largest per position |" in table
    scored = next(s for s in judged.spreads if s.kind == "scored")
    assert (f"| {scored.ratio:.3g} (≤1.5) | {scored.bias['top1_logprob']['t']:+.2g} / "
            f"{scored.bias['margin']['t']:+.2g} {bound_shown(load_tolerances()['bf16'].bias_t)} | ") in table


def bound_shown(bound: float) -> str:
    return f"(≤{bound:g})" if math.isfinite(bound) else "(shown)"


def test_the_calibration_records_the_signed_t_of_correct_and_planted_bf16_cases_and_bounds_bf16_by_it(tmp_path):
    """``contract-zoo calibrate``: the largest |t| over the correct bf16 cases (the yardstick itself left out),
    and the NxDI bf16 fixture's (1.65) beside them, each bf16 defect's largest, and bf16's ``bias_t`` = that largest
    x 1.5 rounded up; rows without a t (and no evidence to re-judge) give the tolerances exactly as before it (no
    bound: shown, not gated)."""
    from harness.release.zoo_report import calibrate

    def zoo_row(case: str, dtype: str, t: tuple[float, float] | None, stack: str = "nxdi") -> dict:
        spread = {"kind": "own", "ratio": 1.1, "fns_ratio": 1.1, "sigma_target": 2e-3, "target_margin_change": 8e-3,
                  "position_ratio": 2.0, "tiers": {k: {"measured": True, "ratio": 1.1, "target": 0.01}
                                                   for k in ("5", "50", "1000", "all")}}
        if t is not None:
            spread["bias"] = {k: {"t": v, "n": 48, "target": 0.0, "yardstick": 0.0}
                              for k, v in zip(("top1_logprob", "margin"), t)}
        correct = case.startswith("correct")
        return {"name": f"{stack}-carbon-tiny-{case}", "stack": stack, "model": "carbon-tiny", "case": case,
                "exit": 0 if correct else 1, "expected_exit": 0 if correct else 1, "wall_s": 1.0, "load_1m": 1.0,
                "evidence": str(tmp_path / "none"),
                "candidate": {"dtype": dtype, "margin_noise": 8e-3, "spreads": [spread],
                              "padded": {"positions": 48, "ratio": 1.5}}}

    rows = [zoo_row("correct-bf16", "bf16", (0.9, -1.9)), zoo_row("correct-bf16-eager", "bf16", (0.4, 0.98), "hf"),
            zoo_row("correct-bf16", "bf16", (0.0, 0.0), "hf"),  # the yardstick itself
            zoo_row("correct-fp32", "fp32", (5.0, 5.0)), zoo_row("softmax-bf16", "bf16", (-6.0, -2.0)),
            zoo_row("rms-eps", "bf16", None)]
    out = calibrate(rows)
    record = out["calibration"]["signed_bias"]
    assert record["gated"] is True and record["correct_bf16"] == {"max": 1.9, "case": "nxdi-carbon-tiny-correct-bf16",
                                                                  "n": 3}
    assert out["tolerances"]["bf16"]["bias_t"] == 2.9 and "bias_t" not in out["tolerances"]["fp32"]
    rows[0]["candidate"]["spreads"][0]["bias"]["margin"]["t"] = -1.0  # the fixture's 1.65 is then the largest
    assert calibrate(rows)["calibration"]["signed_bias"]["correct_bf16"] == {
        "max": pytest.approx(1.648, abs=1e-3), "case": "nxdi-cpu-0.9-carbon-tiny-bf16 (fixture)", "n": 3}
    assert record["defects_bf16"] == {"nxdi-carbon-tiny-softmax-bf16": 6.0}
    for r in rows:
        for s in r["candidate"]["spreads"]:
            s.pop("bias", None)
    bare = calibrate(rows)
    assert bare["calibration"]["signed_bias"]["gated"] is False
    assert bare["tolerances"] == out["tolerances"] | {"bf16": {k: v for k, v in out["tolerances"]["bf16"].items()
                                                               if k != "bias_t"}}


@pytest.mark.parametrize("candidate, says", [("bf16", True), ("fp32", False)])
def test_a_bf16_candidates_pass_says_bf16_leg_only_in_its_summary_and_above_the_verdict(candidate, says):
    """The release verdict's own PASS line (the one release-check prints) and its markdown say so, not only the
    contract's notes: a PASS whose contract judged the candidate in bf16 cannot exclude a defect below bf16
    rounding. An fp32 candidate's PASS is the fp32 leg: nothing to add."""
    from harness.analysis.pairing import SideReport
    from harness.analysis.verdict import decide

    side, ref, yard = _fixture("side"), _fixture("reference"), _fixture("yardstick")
    side["dtype"] = candidate
    tolerances = load_tolerances()
    tolerances["fp32"] = tolerances["bf16"]  # the bf16 fixture, labelled fp32: judged as it would pass
    contract = judge_contract({"candidate": side}, {"candidate": {"reference": ref, "yardstick": yard}}, tolerances)
    assert contract.reasons == []
    verdict = decide(SideReport("baseline"), SideReport("candidate"), contract={"carbon-tiny/smoke": contract})
    caveat = "bf16 leg only: defects below bf16 rounding not excluded"
    assert verdict.word == "PASS"
    assert (verdict.summary() == f"PASS ({caveat})") is says and (verdict.summary() == "PASS") is not says
    head = verdict.markdown().split("### ", 1)[0]
    assert (caveat in head) is says and (caveat in json.dumps(verdict.to_dict())) is says


def test_a_server_of_unstated_dtype_is_judged_as_bf16_and_its_leg_says_so():
    [note] = legs_note({"baseline": "fp32", "candidate": "server"})
    assert "server leg only: defects below bf16 rounding not excluded" in note and "no fp32 leg ran" in note
