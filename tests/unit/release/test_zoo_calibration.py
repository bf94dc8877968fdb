"""The contract zoo's calibration rules (``harness.release.zoo_report``): every bound is the largest figure
a correct stack showed, times a headroom, rounded up; a planted defect's figures are recorded beside the
bounds and never move one. Rows are shaped as ``contract-zoo run`` writes them (zoo.json)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.analysis.threeway import TIERS
from harness.release.zoo_report import HEADROOM_MAX, HEADROOM_RMS, calibrate, ceil2, tolerances_from

pytestmark = pytest.mark.unit


def row(tmp_path, case: str, dtype: str, ratio: float, *, noise: float = 0.008, change: float = 0.008,
        sigma: float = 0.002, largest: float = 0.01, model: str = "carbon-tiny", stack: str = "hf") -> dict:
    """A zoo row; its largest per-position ratio is 2x its pooled one, its padded rows 1.5x."""
    correct = case.startswith("correct")
    spread = {"kind": "scored", "ratio": ratio, "fns_ratio": ratio, "sigma_target": sigma,
              "target_margin_change": change, "position_ratio": 2 * ratio,
              "tiers": {k: {"measured": True, "ratio": ratio, "target": largest} for k in TIERS}}
    return {"name": f"{stack}-{model}-{case}", "stack": stack, "model": model, "case": case,
            "exit": 0 if correct else 1, "expected_exit": 0 if correct else 1, "wall_s": 1.0, "load_1m": 1.5,
            "evidence": str(tmp_path / "none"),
            "candidate": {"dtype": dtype, "margin_noise": noise, "spreads": [spread],
                          "padded": {"positions": 48, "ratio": 1.5 * ratio}}}


@pytest.fixture
def correct(tmp_path):
    return [row(tmp_path, "correct-bf16", "bf16", 1.0), row(tmp_path, "correct-bf16-eager", "bf16", 1.08, change=0.011),
            row(tmp_path, "correct-fp32", "fp32", 3.0, sigma=2e-6, largest=1e-5, change=3e-6, stack="nxdi")]


def test_per_position_and_padded_bounds_are_each_dtypes_own_largest_times_the_max_headroom(correct):
    tol = calibrate(correct)["tolerances"]
    assert tol["bf16"]["position_ratio"] == ceil2(2 * 1.08 * HEADROOM_MAX)
    assert tol["bf16"]["pad_factor"] == ceil2(1.5 * 1.08 * HEADROOM_MAX)
    assert tol["fp32"]["position_ratio"] == ceil2(2 * 3.0 * HEADROOM_MAX)
    assert tol["fp32"]["pad_factor"] == ceil2(1.5 * 3.0 * HEADROOM_MAX)


@pytest.mark.parametrize("case, dtype", [("correct-bf16", "bf16"), ("correct-fp32", "fp32")])
def test_a_transformers_candidate_in_the_checks_interpreter_is_the_yardstick_itself_and_calibrates_nothing(
        tmp_path, correct, case, dtype):
    shipped = calibrate(correct)
    itself = row(tmp_path, case, dtype, 40.0, model="carbon-tiny-trained")
    itself["candidate"]["padded"]["ratio"] = 0.1  # its padded rows: a real figure of its padding, kept
    out = calibrate([*correct, itself])
    assert out["tolerances"] == shipped["tolerances"]
    assert itself["name"] not in out["calibration"][f"{dtype}_correct"]["cases"]
    assert itself["name"] in out["calibration"]["yardstick_itself"]["cases"]
    itself["candidate"]["padded"]["ratio"] = 40.0
    assert calibrate([*correct, itself])["tolerances"][dtype]["pad_factor"] == ceil2(40.0 * HEADROOM_MAX)


@given(st.floats(1e-9, 1e9))
def test_ceil2_rounds_up_to_two_significant_figures(x):
    y = ceil2(x)
    assert x <= y * (1 + 1e-12) and y < x * 1.1 + 1e-300
    digits = y / 10 ** (math.floor(math.log10(y)) - 1)
    assert abs(digits - round(digits)) < 1e-6 and repr(y) == repr(float(f"{y:.2g}"))


def test_each_bound_is_the_largest_correct_figure_times_its_headroom(correct):
    tol = calibrate(correct)["tolerances"]["bf16"]
    assert tol["sigma_ratio"] == ceil2(1.08 * HEADROOM_RMS) and tol["fns_sigma_ratio"] == ceil2(1.08 * HEADROOM_RMS)
    assert tol["tier_factor"] == {k: ceil2(1.08 * HEADROOM_MAX) for k in TIERS}
    assert tol["tie_factor"] == ceil2(0.011 / 0.008 * HEADROOM_MAX)
    assert tol["margin_floor"] == ceil2(0.008)  # the least bf16 margin noise: a side judged alone allows that


@pytest.mark.parametrize("defect, expected", [("rope-theta", True), ("rms-eps", True), ("eos-ignored", False)])
def test_a_planted_defect_never_moves_a_bound_and_its_least_figure_is_recorded(tmp_path, correct, defect, expected):
    shipped = tolerances_from(calibrate(correct)["calibration"])
    planted = row(tmp_path, defect, "bf16", 1.0 if defect == "eos-ignored" else 2.3, change=0.3)
    planted["candidate"]["spreads"].append({**planted["candidate"]["spreads"][0], "kind": "own", "ratio": 1.9})
    out = calibrate([*correct, planted])
    assert out["tolerances"] == shipped
    least = out["calibration"]["defects_least"]["sigma_ratio"]
    # a defect's figure is its largest over its sequences; only the defects the rms criteria exist to catch
    # count (EOS and tokenizer defects leave the logits as correct bf16 has them)
    assert (least == {"min": 2.3, "case": f"hf-carbon-tiny-{defect}"}) if expected else least is None


def test_fp32_floors_come_from_the_correct_fp32_stacks_and_the_vllm_fixture(correct):
    rec = calibrate(correct)["calibration"]["fp32_correct"]
    assert rec["cases"] == ["nxdi-carbon-tiny-correct-fp32"]
    assert rec["rms"]["max"] >= 2e-6 and rec["max_abs"]["max"] >= 1e-5
    assert rec["vllm_cpu_0.32_fp32_fixture"]["values"] > 0


def test_a_calibration_without_correct_fp32_or_bf16_cases_is_refused(correct):
    with pytest.raises(ValueError, match="needs correct bf16 and fp32 cases"):
        calibrate(correct[:2])


def test_the_record_says_where_and_under_what_load_it_ran(correct):
    rec = calibrate(correct)["calibration"]
    assert "cores" in rec["machine"] and rec["load_1m"] == {"min": 1.5, "max": 1.5, "cases": 3}
    assert "contract-zoo calibrate" in rec["command"]
