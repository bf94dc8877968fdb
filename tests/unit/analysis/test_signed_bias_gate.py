"""The signed-bias criterion of the bf16 leg (``harness.analysis.bias``, ``threeway.bias_findings``; issue 56): the
paired t of the side's signed change to the reference's top-1 log-prob and top-1 / top-2 margin less the
yardstick's, gated at ``bias_t`` where the calibration sets one (bf16) and shown only where it does not (fp32).
Small hand-built rows (``test_contract_verdict.biased``), the shipped tolerances and calibration, in process."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from harness.analysis.contract import load_tolerances
from harness.analysis.threeway import spread
from harness.core.contract_format import ContractError
from harness.release.zoo_report import CALIBRATION_FILE, HEADROOM_MAX, bias_bound, ceil2
from tests.unit.analysis.test_contract_verdict import CRIT, biased

pytestmark = pytest.mark.unit

LOOSE = replace(CRIT, sigma_ratio=1e9, position_ratio=1e9, tier_factor={k: 1e9 for k in CRIT.tier_factor})


@pytest.mark.parametrize("shift", [1e-3, -1e-3])
def test_a_bias_either_way_beyond_the_bound_is_a_finding_named_where_its_paired_difference_is_largest(shift):
    """Lowered (a flattened distribution) or raised by 1e-3 nats at every position inside the yardstick's own
    rounding: the signed bias fails, named by the sequence kind, the statistic with the larger |t|, its t and
    bound, and the row whose paired difference lies furthest that way."""
    a = biased(shift)
    s = spread(a, replace(LOOSE, bias_t=2.0), 1.0)
    [f] = s.findings
    key = max(s.bias, key=lambda k: abs(s.bias[k]["t"]))
    b = s.bias[key]
    assert f.criterion == "signed bias (own)" and f.at == "largest" and math.copysign(1, b["t"]) == -math.copysign(1, shift)
    assert (f.prompt, f.position) == a.rows[b["at"]][:2]
    assert f"paired t {b['t']:+.3g}, beyond ±2" in f.detail and f"over {b['n']} positions" in f.detail
    diffs = [(t.value(r.top[0][0]) - r.top[0][1]) - (y.value(r.top[0][0]) - r.top[0][1]) for *_, t, r, y in a.rows]
    pick = min if b["t"] < 0 else max
    assert b["at"] == diffs.index(pick(diffs)) and b["largest"] == pytest.approx(pick(diffs))


def test_the_bound_is_strict_and_an_unbounded_criterion_gates_nothing():
    """At exactly its |t| the criterion holds; a hair below, it fails; without a bound (fp32: inf) it is shown only."""
    s = spread(biased(1e-3), LOOSE, 1.0)
    worst = max(abs(b["t"]) for b in s.bias.values())
    assert s.findings == [] and LOOSE.bias_t == math.inf
    assert spread(biased(1e-3), replace(LOOSE, bias_t=worst), 1.0).findings == []
    assert [f.criterion for f in spread(biased(1e-3), replace(LOOSE, bias_t=worst * 0.999), 1.0).findings] == [
        "signed bias (own)"]


def test_rounding_alone_reads_inside_any_calibrated_bound():
    """A target with the yardstick's rounding (scaled): |t| small, no finding at the shipped bf16 bound."""
    bound = load_tolerances()["bf16"].bias_t
    s = spread(biased(0.0), replace(LOOSE, bias_t=bound), 1.0)
    assert s.findings == [] and all(abs(b["t"]) < 1 for b in s.bias.values())


def test_the_shipped_bf16_bound_is_the_largest_correct_t_times_the_max_headroom_and_fp32_has_none():
    """``fixtures/contract/calibration.json``'s signed_bias record sets bf16's ``bias_t`` (largest correct |t| x 1.5,
    rounded up to two figures), every defect's t recorded beside it; fp32 (and a server, bf16's alias) as shipped."""
    record = json.loads(CALIBRATION_FILE.read_text())["signed_bias"]
    tol = load_tolerances()
    assert record["gated"] is True and record["correct_bf16"]["n"] >= 3
    assert tol["bf16"].bias_t == ceil2(record["correct_bf16"]["max"] * HEADROOM_MAX) == bias_bound(record)["bias_t"]
    assert tol["server"].bias_t == tol["bf16"].bias_t and tol["fp32"].bias_t == math.inf
    assert record["correct_bf16"]["max"] < tol["bf16"].bias_t / 1.4  # no correct case near the bound


def test_no_correct_t_recorded_sets_no_bound():
    assert bias_bound(None) == {} and bias_bound({"gated": False, "correct_bf16": {"max": 0.0, "n": 0}}) == {}
    assert bias_bound({"gated": True, "correct_bf16": {"max": 1.66, "n": 4}}) == {"bias_t": 2.5}


@pytest.mark.parametrize("value", [0, -1.0, "2", None])
def test_a_non_positive_or_non_numeric_bias_bound_is_refused_by_name(tmp_path, value):
    raw = json.loads((CALIBRATION_FILE.parent / "tolerances.json").read_text())
    raw["bf16"]["bias_t"] = value
    path = tmp_path / "tolerances.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ContractError, match=r"bf16\.bias_t must be a positive number, got"):
        load_tolerances(path)
