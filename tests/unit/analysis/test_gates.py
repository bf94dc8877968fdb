"""Threshold parsing, selection and evaluation."""

from __future__ import annotations

import json

import pytest

from harness.analysis.gates import ThresholdError, evaluate, load_thresholds, parse_entry, parse_thresholds, select
from harness.core.paths import FIXTURES_DIR

pytestmark = pytest.mark.unit

ENTRY = {"hardware": "trn2.3xlarge", "model": "carbon-3b", "shape": "report-bs1", "metric": "tkg_ms_p50", "max": 7.35}


def doc(*entries):
    return {"schema": 1, "thresholds": list(entries)}


def test_shipped_thresholds_parse_and_follow_the_reference_rule():
    thresholds = load_thresholds([FIXTURES_DIR / "thresholds"])
    t = select(thresholds, "trn2.3xlarge", "carbon-3b", "report-bs1", "tkg_ms_p50")
    assert t.baseline == 6.68 and t.bound == pytest.approx(6.68 * 1.10, abs=1e-3)
    t = select(thresholds, "trn2.3xlarge", "carbon-8b", "a100-style-bs16", "kbp_per_s")
    assert t.kind == "min" and t.bound == pytest.approx(8.21 / 1.10, abs=1e-3)


@pytest.mark.parametrize("entry,message", [
    ({**ENTRY, "metric": "tkg_ms_p5"}, "unknown metric 'tkg_ms_p5' (did you mean 'tkg_ms_p50'?)"),
    ({**ENTRY, "mx": 1}, "unknown field 'mx' (did you mean 'max'?)"),
    ({k: v for k, v in ENTRY.items() if k != "model"}, "field 'model' is required"),
    ({**ENTRY, "max": "7"}, "field 'max' must be a number"),
    ({**ENTRY, "min": 1}, "give 'max' or 'min', not both"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "min": 1}, "field 'min' does not fit 'tkg_ms_p50'"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}}, "needs 'max', or 'baseline' and 'tolerance'"),
    ({**ENTRY, "tolerance": 10}, "'tolerance' must be a fraction"),
])
def test_bad_entries_name_the_field(entry, message):
    with pytest.raises(ThresholdError, match="f.json: entry 0: ") as err:
        parse_thresholds(doc(entry), "f.json")
    assert message in str(err.value)


def test_bound_from_baseline_and_tolerance():
    t = parse_entry({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": 10, "tolerance": 0.1}, "x")
    assert t.bound == pytest.approx(11.0)
    t = parse_entry({"hardware": "*", "model": "*", "shape": "*", "metric": "bp_per_s", "baseline": 110,
                     "tolerance": 0.1}, "x")
    assert t.bound == pytest.approx(100.0) and t.kind == "min"


@pytest.mark.parametrize("data,message", [
    ({"schema": 2, "thresholds": []}, "field 'schema' is 2"),
    ({"schema": 1}, "field 'thresholds' must be a list"),
    ([], "must hold a JSON object"),
])
def test_bad_documents(data, message):
    with pytest.raises(ThresholdError, match=message):
        parse_thresholds(data, "f.json")


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1,\n "thresholds": [}')
    with pytest.raises(ThresholdError, match=r"bad.json: not valid JSON \(line 2"):
        load_thresholds([bad])
    with pytest.raises(ThresholdError, match="does not exist"):
        load_thresholds([tmp_path / "missing.json"])


def test_most_specific_wins_and_wildcards_match(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc({**ENTRY, "hardware": "*", "model": "*", "max": 100.0},
                                {**ENTRY, "max": 5.0})))
    ts = load_thresholds([tmp_path])
    assert select(ts, "trn2.3xlarge", "carbon-3b", "report-bs1", "tkg_ms_p50").bound == 5.0
    assert select(ts, "cpu", "carbon-tiny", "report-bs1", "tkg_ms_p50").bound == 100.0
    assert select(ts, "cpu", "carbon-tiny", "smoke", "tkg_ms_p50") is None


def test_evaluate_reports_pass_and_fail():
    throughput = {"hardware": "*", "model": "*", "shape": "*", "metric": "tokens_per_s", "min": 100, "baseline": 110}
    ts = parse_thresholds(doc(ENTRY, throughput), "f.json")
    results = {r.metric: r for r in evaluate(ts, "trn2.3xlarge", "carbon-3b", "report-bs1",
                                             {"tkg_ms_p50": 9.0, "tokens_per_s": 150.0, "e2e_ms_p50": 1.0,
                                              "case": "balanced"})}
    assert set(results) == {"tkg_ms_p50", "tokens_per_s"}
    assert not results["tkg_ms_p50"].passed and results["tokens_per_s"].passed
    assert results["tkg_ms_p50"].message() == "tkg_ms_p50 = 9 exceeds max 7.35 (f.json: entry 0)"
    assert "baseline 110" in results["tokens_per_s"].message()


@pytest.mark.parametrize("field,value,message", [
    ("model", "carbon-tyni", "unknown model 'carbon-tyni' (did you mean 'carbon-tiny'?)"),
    ("shape", "smokee", "unknown shape 'smokee' (did you mean 'smoke'?)"),
    ("hardware", "cpuu", "unknown hardware 'cpuu' (did you mean 'cpu'?)"),
    ("metric", "top1_agreement", "unknown metric 'top1_agreement'"),  # no benchmark produces it
])
def test_misspelled_names_are_rejected_with_a_hint(field, value, message):
    with pytest.raises(ThresholdError, match="f.json: entry 0: ") as err:
        parse_thresholds(doc({**ENTRY, field: value}), "f.json")
    assert message in str(err.value)


@pytest.mark.parametrize("entry,message", [
    ({**ENTRY, "max": float("nan")}, "field 'max' must be a finite number, got nan"),
    ({**ENTRY, "max": float("inf")}, "field 'max' must be a finite number, got inf"),
    ({**ENTRY, "max": -1.0}, "field 'max' must be > 0"),
    ({**ENTRY, "max": 0}, "field 'max' must be > 0"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "metric": "bp_per_s", "min": -5}, "field 'min' must be >= 0"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "metric": "bp_per_s", "min": float("-inf")},
     "field 'min' must be a finite number"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": float("nan"), "tolerance": 0.1},
     "field 'baseline' must be a finite number"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": -3, "tolerance": 0.1},
     "field 'baseline' must be >= 0"),
])
def test_bounds_must_be_finite_and_of_the_right_sign(entry, message):
    with pytest.raises(ThresholdError, match="f.json: entry 0: ") as err:
        parse_thresholds(doc(entry), "f.json")
    assert message in str(err.value)


def test_nan_bounds_written_by_json_dump_are_rejected_from_files(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc({**ENTRY, "max": float("nan")})))  # Python writes NaN, json.loads reads it
    with pytest.raises(ThresholdError, match=r"t.json: entry 0: field 'max' must be a finite number"):
        load_thresholds([f])


def test_empty_inputs_are_errors(tmp_path):
    with pytest.raises(ThresholdError, match="--carbon-thresholds '' is empty"):
        load_thresholds([""])
    with pytest.raises(ThresholdError, match="holds no \\*.json file"):
        load_thresholds([tmp_path])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(doc()))
    with pytest.raises(ThresholdError, match="0 threshold entries"):
        load_thresholds([empty])
    with pytest.raises(ThresholdError, match="0 threshold entries"):
        load_thresholds([tmp_path])
    with pytest.raises(ThresholdError, match="no thresholds file given"):
        load_thresholds([])


@pytest.mark.parametrize("a,b", [
    (ENTRY, {**ENTRY, "max": 9.0}),  # the same key twice
    ({**ENTRY, "hardware": "*"}, {**ENTRY, "model": "*"}),  # both apply to trn2.3xlarge/carbon-3b, 2 names each
])
def test_equally_specific_duplicates_are_ambiguous(tmp_path, a, b):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc(a, b)))
    with pytest.raises(ThresholdError, match=r"t.json: entry 1: ambiguous with .*t.json: entry 0: both set "
                                             r"'tkg_ms_p50' for hardware='trn2.3xlarge' model='carbon-3b'"):
        load_thresholds([f])


def test_differently_specific_or_disjoint_entries_are_fine():
    ts = parse_thresholds(doc(ENTRY, {**ENTRY, "hardware": "*", "max": 9.0}, {**ENTRY, "model": "carbon-8b"}), "f")
    from harness.analysis.gates import check_ambiguous

    check_ambiguous(ts)  # no error
    assert select(ts, "trn2.3xlarge", "carbon-3b", "report-bs1", "tkg_ms_p50").bound == 7.35


def test_figures_with_a_reference_elsewhere_but_none_here_are_reported():
    from harness.analysis.gates import ungated

    throughput = {**{k: v for k, v in ENTRY.items() if k != "max"}, "metric": "bp_per_s", "hardware": "*", "min": 1}
    ts = parse_thresholds(doc(ENTRY, throughput), "f")
    figures = {"tkg_ms_p50": 3.0, "bp_per_s": 10.0, "e2e_ms_p50": 5.0}
    assert ungated(ts, "trn2.48xlarge", "carbon-3b", "report-bs1", figures) == {"tkg_ms_p50": ["trn2.3xlarge"]}
    assert ungated(ts, "trn2.3xlarge", "carbon-3b", "report-bs1", figures) == {}
    assert ungated(ts, "trn2.48xlarge", "carbon-8b", "report-bs1", figures) == {}  # no reference for 8B


def test_every_gated_metric_is_a_figure_the_harness_produces():
    from harness.core.metrics import FIGURES, METRICS, SPECULATIVE_FIGURES

    assert set(FIGURES) <= set(METRICS) and set(SPECULATIVE_FIGURES) <= set(METRICS)
    assert {"compile_s", "load_s", "dna_encode_speedup"} <= set(METRICS)
