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


# --- what a user sees of each gate decision, pinned against one-line changes (issue 57, generated mutants) ---

MIN_ENTRY = {**{k: v for k, v in ENTRY.items() if k != "max"}, "metric": "bp_per_s", "min": 100.0}


@pytest.mark.parametrize("entry, value, passed", [
    (ENTRY, 7.35, True), (ENTRY, 7.36, False), (ENTRY, 7.34, True),  # at the max: within it
    (MIN_ENTRY, 100.0, True), (MIN_ENTRY, 99.9, False), (MIN_ENTRY, 100.1, True),  # at the min: within it
])
def test_a_figure_exactly_at_its_bound_passes_and_one_past_it_fails(entry, value, passed):
    t = parse_entry(entry, "f.json: entry 0")
    (result,) = evaluate([t], "trn2.3xlarge", "carbon-3b", "report-bs1", {t.metric: value})
    assert result.passed is passed and result.value == value
    verb = ("exceeds max" if t.kind == "max" else "is below min") if not passed else "within"
    assert result.message() == f"{t.metric} = {value:.4g} {verb} {t.bound:.4g} (f.json: entry 0)"


def test_a_derived_bound_keeps_its_baseline_and_tolerance_and_names_the_baseline():
    t = parse_entry({k: v for k, v in MIN_ENTRY.items() if k != "min"} | {"baseline": 110.0, "tolerance": 0.1}, "src")
    assert (t.kind, t.baseline, t.tolerance, t.source) == ("min", 110.0, 0.1, "src")
    assert (t.hardware, t.model, t.shape, t.metric) == ("trn2.3xlarge", "carbon-3b", "report-bs1", "bp_per_s")
    (r,) = evaluate([t], "trn2.3xlarge", "carbon-3b", "report-bs1", {"bp_per_s": 90})
    assert r.message() == "bp_per_s = 90 is below min 100, baseline 110 (src)"
    assert isinstance(r.value, float)


@pytest.mark.parametrize("entry, message", [
    ({**ENTRY, "tolerance": 0.0, "baseline": 7.0}, None),  # a zero tolerance is a fraction
    ({**ENTRY, "max": 0.5}, None),  # a sub-unit max (0.5 ms) is a bound
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": 0.5, "tolerance": 0.1}, None),  # max 0.55
    ({**ENTRY, "tolerance": 9.99}, None),
    ({**ENTRY, "tolerance": -0.01}, "field 'tolerance' must be a fraction such as 0.10, got -0.01"),
    ({**MIN_ENTRY, "min": 0}, None),  # a zero min is a bound (a throughput of 0 passes)
    ({**MIN_ENTRY, "baseline": 0, "tolerance": 0.1}, None),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": 0, "tolerance": 0.1},
     "'baseline' 0.0 gives max 0.0: must be > 0"),
    ({**{k: v for k, v in MIN_ENTRY.items() if k != "min"}, "max": 5.0},
     "field 'max' does not fit 'bp_per_s' (higher is better): use 'min'"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "min": 5.0},
     "field 'min' does not fit 'tkg_ms_p50' (lower is better): use 'max'"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "baseline": 5.0},
     "needs 'max', or 'baseline' and 'tolerance' to derive it"),
    ({**{k: v for k, v in ENTRY.items() if k != "max"}, "tolerance": 0.1},
     "needs 'max', or 'baseline' and 'tolerance' to derive it"),
    ({**{k: v for k, v in MIN_ENTRY.items() if k != "min"}, "tolerance": 0.1},
     "needs 'min', or 'baseline' and 'tolerance' to derive it"),
    ({**ENTRY, "max": True}, "field 'max' must be a number, got True"),
    ({**ENTRY, "model": ""}, "field 'model' is required (a name or \"*\"), got ''"),
    ({**ENTRY, "metric": 3}, "field 'metric' is required (a name or \"*\"), got 3"),
    ({**ENTRY, "zzzz": 1}, "unknown field 'zzzz'; fields: baseline, hardware, max, metric, min, model, note, shape, "
                           "tolerance"),
    ("trn2", "must be an object, got str"),
])
def test_each_entry_rule_accepts_its_edge_and_refuses_past_it_naming_the_value(entry, message):
    if message is None:
        parse_entry(entry, "x")
        return
    with pytest.raises(ThresholdError) as err:
        parse_entry(entry, "f.json: entry 3")
    assert str(err.value) == f"f.json: entry 3: {message}"


@pytest.mark.parametrize("field, value, message", [
    ("hardware", "CPU", "field 'hardware' has unknown hardware 'CPU' (did you mean 'cpu'?); known: cpu, h100-sxm, "
                        "h200, trn2.3xlarge, trn2.48xlarge or \"*\""),
    ("hardware", "zzzz", "field 'hardware' has unknown hardware 'zzzz'; known: cpu, h100-sxm, h200, trn2.3xlarge, "
                         "trn2.48xlarge or \"*\""),
    ("metric", "zzzz", "field 'metric' has unknown metric 'zzzz'; known: "),
])
def test_an_unknown_name_gets_a_hint_only_where_one_is_close_and_the_known_names(field, value, message):
    with pytest.raises(ThresholdError) as err:
        parse_entry({**ENTRY, field: value}, "f")
    assert str(err.value).startswith(f"f: {message}")
    assert "did you mean" not in str(err.value) or value == "CPU"


def test_every_benchmark_label_and_its_compiled_form_are_known_names():
    from harness.analysis.gates import known_names

    known = known_names()
    assert {"smoke", "smoke-fns", "smoke-compiled", "smoke-fns-compiled", "tokenizer", "tokenizer-compiled"} <= known.shape
    assert {"cpu", "trn2.3xlarge"} <= known.hardware and "carbon-3b" in known.model
    parse_entry({**ENTRY, "shape": "smoke-fns-compiled", "hardware": "*", "model": "*"}, "x")  # no error


def test_a_wildcard_matches_any_name_and_a_name_only_itself():
    t = parse_entry({**ENTRY, "hardware": "*"}, "x")
    assert t.matches("cpu", "carbon-3b", "report-bs1", "tkg_ms_p50")
    assert not t.matches("cpu", "carbon-8b", "report-bs1", "tkg_ms_p50")
    assert not t.matches("cpu", "carbon-3b", "smoke", "tkg_ms_p50")
    assert not t.matches("cpu", "carbon-3b", "report-bs1", "cte_ms_p50")
    assert [parse_entry({**ENTRY, **w}, "x").specificity for w in
            ({}, {"model": "*"}, {"model": "*", "shape": "*"}, {"model": "*", "shape": "*", "hardware": "*"})] == [3, 2, 1, 0]


def test_evaluate_gates_only_numbers_of_known_metrics_and_selects_the_most_specific():
    ts = parse_thresholds(doc(ENTRY, {**ENTRY, "shape": "*", "max": 100.0}), "f")
    results = evaluate(ts, "trn2.3xlarge", "carbon-3b", "report-bs1",
                       {"tkg_ms_p50": 8, "cte_ms_p50": 1.0, "case": "x", "nope": 1.0})
    assert [(r.metric, r.value, r.threshold.bound, r.passed) for r in results] == [("tkg_ms_p50", 8.0, 7.35, False)]
    assert [r.threshold.bound for r in evaluate(ts, "trn2.3xlarge", "carbon-3b", "smoke", {"tkg_ms_p50": "8"})] == []
    assert [r.threshold.bound for r in evaluate(ts, "trn2.3xlarge", "carbon-3b", "smoke", {"tkg_ms_p50": 8})] == [100.0]


def test_ungated_skips_what_is_no_number_and_names_every_hardware_with_a_reference():
    from harness.analysis.gates import ungated

    ts = parse_thresholds(doc(ENTRY, {**ENTRY, "hardware": "cpu", "model": "*"}, {**ENTRY, "hardware": "h200",
                                                                                  "shape": "smoke"}), "f")
    figures = {"tkg_ms_p50": 3.0, "case": "x", "nope": 2.0}
    assert ungated(ts, "trn2.48xlarge", "carbon-3b", "report-bs1", figures) == {"tkg_ms_p50": ["cpu", "trn2.3xlarge"]}
    assert ungated(ts, "trn2.48xlarge", "carbon-3b", "report-bs1", {"tkg_ms_p50": True}) == {}
    assert ungated(ts, "trn2.48xlarge", "carbon-3b", "report-bs1", {"tkg_ms_p50": "3"}) == {}
    assert ungated(ts, "trn2.48xlarge", "carbon-3b", "smoke", {"tkg_ms_p50": 3}) == {"tkg_ms_p50": ["h200"]}


def test_entries_apply_to_the_same_figure_only_where_every_name_agrees_or_one_is_a_wildcard():
    from harness.analysis.gates import _overlap

    a, b = parse_entry({**ENTRY, "hardware": "*"}, "a"), parse_entry({**ENTRY, "model": "*"}, "b")
    assert _overlap(a, b) == ("trn2.3xlarge", "carbon-3b", "report-bs1") == _overlap(b, a)
    assert _overlap(a, parse_entry({**ENTRY, "model": "carbon-8b", "hardware": "*"}, "c")) is None
    assert _overlap(a, parse_entry({**ENTRY, "shape": "smoke", "hardware": "*"}, "c")) is None
    assert _overlap(parse_entry({**ENTRY, "hardware": "cpu"}, "c"), parse_entry(ENTRY, "d")) is None


def test_the_same_key_for_two_metrics_is_not_ambiguous(tmp_path):
    from harness.analysis.gates import check_ambiguous

    check_ambiguous(parse_thresholds(doc(ENTRY, {**ENTRY, "metric": "cte_ms_p50"}), "f"))
    with pytest.raises(ThresholdError, match=r"f: entry 2: ambiguous with f: entry 0: both set 'tkg_ms_p50' for "
                                             r"hardware='trn2.3xlarge' model='carbon-3b' shape='report-bs1' with the "
                                             r"same specificity; remove one or make one more specific"):
        check_ambiguous(parse_thresholds(doc(ENTRY, {**ENTRY, "metric": "cte_ms_p50"}, ENTRY), "f"))


def test_files_of_several_paths_and_a_directory_are_all_loaded_in_order(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.json").write_text(json.dumps(doc({**ENTRY, "metric": "cte_ms_p50"})))
    (tmp_path / "d" / "a.json").write_text(json.dumps(doc(ENTRY)))
    (tmp_path / "d" / "c.txt").write_text("not a thresholds file")
    (tmp_path / "one.json").write_text(json.dumps(doc({**ENTRY, "shape": "smoke"})))
    ts = load_thresholds([tmp_path / "d", str(tmp_path / "one.json")])
    assert [(t.metric, t.shape, t.source.rsplit("/", 1)[-1]) for t in ts] == [
        ("tkg_ms_p50", "report-bs1", "a.json: entry 0"), ("cte_ms_p50", "report-bs1", "b.json: entry 0"),
        ("tkg_ms_p50", "smoke", "one.json: entry 0")]
    with pytest.raises(ThresholdError, match=r"^--carbon-thresholds '' is empty"):
        load_thresholds([tmp_path / "one.json", "  "])
    for d in ("e", "f", "g"):
        (tmp_path / d).mkdir()
    (tmp_path / "e" / "x.json").write_text(json.dumps(doc()))
    (tmp_path / "f" / "y.json").write_text(json.dumps(doc()))
    with pytest.raises(ThresholdError) as err:
        load_thresholds([tmp_path / "e", tmp_path / "f"])
    assert str(err.value) == f"{tmp_path / 'e'}, {tmp_path / 'f'}: 0 threshold entries; a gate needs at least one"
    with pytest.raises(ThresholdError) as err:
        load_thresholds([tmp_path / "g"])
    assert str(err.value) == f"thresholds directory {tmp_path / 'g'} holds no *.json file"


@pytest.mark.parametrize("document, message", [
    ({"schema": 1, "thresholds": [], "thresholdz": []},
     "f: unknown field 'thresholdz' (did you mean 'thresholds'?); fields: schema, thresholds, provenance"),
    ({"thresholds": [ENTRY]}, "f: field 'schema' is None; this harness reads schema 1"),
    ({"schema": 1, "thresholds": {"a": ENTRY}}, "f: field 'thresholds' must be a list"),
    ("x", "f: must hold a JSON object with 'schema' and 'thresholds'"),
])
def test_a_document_error_is_one_line_naming_the_field(document, message):
    with pytest.raises(ThresholdError) as err:
        parse_thresholds(document, "f")
    assert str(err.value) == message


PROVENANCE = {"sdk": "2.29", "nxdi": "0.9.0", "neuronx_cc": "2.21", "instance": "trn2.3xlarge", "date": "2026-05-21",
              "run": "reference runs"}


@pytest.mark.parametrize("provenance, message", [
    ({**PROVENANCE, "date": "2026-05-21T10:00:00", "versions": {"torch": None, "nxdi": "0.9"}, "note": "n",
      "headroom": "10%"}, None),
    ({**PROVENANCE, "note": 3}, "field 'note' must be a string, got 3"),
    ({**PROVENANCE, "headroom": 0.1}, "field 'headroom' must be a string, got 0.1"),
    ({**PROVENANCE, "versions": ["torch"]}, "field 'versions' must map package names to version strings (or null)"),
    ({**PROVENANCE, "versions": {3: "1"}}, "field 'versions' must map package names to version strings (or null)"),
    ({**PROVENANCE, "run": "  "}, "field 'run' is required (a non-empty string: say 'none' or 'not recorded' where "
                                  "it does not apply), got '  '"),
    ({**PROVENANCE, "sdk": 2.29}, "field 'sdk' is required (a non-empty string: say 'none' or 'not recorded' where "
                                  "it does not apply), got 2.29"),
    ({**PROVENANCE, "date": "yesterday"}, "field 'date' 'yesterday' is not an ISO date such as 2026-05-21"),
    ({**PROVENANCE, "sdkk": "x"}, "unknown field 'sdkk' (did you mean 'sdk'?); fields: sdk, nxdi, neuronx_cc, "
                                  "instance, date, run, note, headroom, versions"),
    (["sdk"], "must be an object with sdk, nxdi, neuronx_cc, instance, date, run, got ['sdk']"),
])
def test_provenance_accepts_what_it_documents_and_refuses_the_rest_in_one_line(provenance, message):
    from harness.analysis.gates import parse_provenance

    if message is None:
        assert parse_provenance(provenance, "f") == provenance
        return
    with pytest.raises(ThresholdError) as err:
        parse_provenance(provenance, "f")
    assert str(err.value) == f"f: provenance: {message}"


@pytest.mark.parametrize("text, reason", [
    ("not gated: only 1 round (a CPU runs one)", "only 1 round"),
    ("Not gated: only 1 round; see docs", "only 1 round"),
    ("not gated: warm-up: the first", "warm-up"),
    ("not gated: speed is gated when -m selects perf", "not -m perf"),
    ("no threshold", "no threshold"),
    ("not gated:  ", "not gated"),
    ("not gated: a:b", "a:b"),
])
def test_a_not_gated_record_is_tallied_under_its_short_reason(text, reason):
    from harness.analysis.gates import not_gated_reason

    assert not_gated_reason(text) == reason


def test_figure_outcomes_read_the_gates_record_and_count_only_gateable_figures():
    from harness.analysis.gates import figure_outcomes

    assert figure_outcomes({"gate": {"tkg_ms_p50": {"passed": True}, "cte_ms_p50": "broken", "e2e_ms_p50": {}}}) == [
        ("tkg_ms_p50", "passed"), ("cte_ms_p50", "failed"), ("e2e_ms_p50", "failed")]
    info = {"gate": "no threshold", "tkg_ms_p50": 1.0, "cte_ms_p50": 2, "case": 3.0, "e2e_ms_p50": True,
            "load_s": "x"}
    assert figure_outcomes(info) == [("tkg_ms_p50", "no threshold"), ("cte_ms_p50", "no threshold")]
    assert figure_outcomes({**info, "gate": "not gated: only 1 round (a CPU)"})[0] == ("tkg_ms_p50", "only 1 round")
    assert figure_outcomes({"gate": {}, "not_gated": {"tkg_ms_p50": "not gated: only 1 round"}}) == [
        ("tkg_ms_p50", "only 1 round")]
    assert figure_outcomes({"gate": "no threshold", "not_gated": {"a": "no threshold"}}) == [("a", "no threshold")]
    assert figure_outcomes({"gate": "no threshold", "not_gated": []}) == []


def test_the_tally_line_counts_gated_and_ungated_figures_most_frequent_reason_first():
    from harness.analysis.gates import GateTally, tally_gates

    t = tally_gates([{"gate": {"a": {"passed": True}}, "not_gated": {"b": "only 1 round", "c": "no threshold",
                                                                      "d": "no threshold"}},
                     {"gate": {"a": {"passed": True}, "e": {"passed": False}}, "not_gated": {"f": "aa"}}])
    assert (t.passed, t.failed, t.gated, t.ungated, t.recorded) == (2, 1, 3, 4, 7)
    assert t.not_gated == (("no threshold", 2), ("aa", 1), ("only 1 round", 1))
    assert t.summary() == "3 figures gated (2 passed, 1 failed); 4 recorded but not gated (2 no threshold, 1 aa, " \
                          "1 only 1 round)"
    one = tally_gates([{"gate": {"a": {"passed": False}}}])
    assert one.line() == "carbon-harness: gates: 1 figure gated (0 passed, 1 failed); 0 recorded but not gated"
    assert GateTally().recorded == 0 and GateTally().summary().startswith("0 figures gated")


def test_a_figure_that_cannot_be_gated_or_is_gated_here_never_hides_the_figures_after_it():
    from harness.analysis.gates import ungated

    ts = parse_thresholds(doc(ENTRY, {**ENTRY, "metric": "cte_ms_p50", "hardware": "*"},
                              {**ENTRY, "metric": "e2e_ms_p50", "hardware": "h200", "shape": "*"}), "f")
    figures = {"case": "x", "cte_ms_p50": 1.0, "tkg_ms_p50": 3.0, "e2e_ms_p50": 9.0}
    assert ungated(ts, "cpu", "carbon-3b", "report-bs1", figures) == {"tkg_ms_p50": ["trn2.3xlarge"],
                                                                       "e2e_ms_p50": ["h200"]}
    assert [r.metric for r in evaluate(ts, "trn2.3xlarge", "carbon-3b", "report-bs1", figures)] == [
        "cte_ms_p50", "tkg_ms_p50"]


def test_a_reason_is_cut_at_the_first_of_its_stops_and_a_run_without_failures_counts_none():
    from harness.analysis.gates import not_gated_reason, tally_gates

    assert not_gated_reason("not gated: only 1 round (a CPU) (one more)") == "only 1 round"
    assert not_gated_reason("not gated: warm-up; one; two") == "warm-up"
    t = tally_gates([{"gate": {"a": {"passed": True}}}])
    assert (t.passed, t.failed, t.not_gated) == (1, 0, ())


def test_the_names_a_caller_knows_are_the_ones_every_entry_is_checked_against(tmp_path):
    from harness.analysis.gates import KnownNames

    known = KnownNames(frozenset({"box"}), frozenset({"tiny"}), frozenset({"s"}))
    entry = {**ENTRY, "hardware": "box", "model": "tiny", "shape": "s"}
    assert parse_thresholds(doc(entry), "f", known)[0].hardware == "box"
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc(entry)))
    assert load_thresholds([f], known)[0].model == "tiny"
    with pytest.raises(ThresholdError, match="unknown hardware 'box'"):
        load_thresholds([f])


def test_a_missing_file_names_itself_as_a_thresholds_file_and_no_file_at_all_says_what_to_pass(tmp_path):
    with pytest.raises(ThresholdError) as err:
        load_thresholds([tmp_path / "missing.json"])
    assert str(err.value) == f"thresholds file {tmp_path / 'missing.json'} does not exist"
    with pytest.raises(ThresholdError) as err:
        load_thresholds([])
    assert str(err.value) == "no thresholds file given: pass --carbon-thresholds FILE|DIR"


@pytest.mark.parametrize("document, message", [
    ({"schema": 1, "thresholds": [ENTRY], "zzzz": 1}, "f: unknown field 'zzzz'; fields: schema, thresholds, provenance"),
    ({"schema": 1, "thresholds": [ENTRY], "provenance": {**PROVENANCE, "date": "soon"}},
     "f: provenance: field 'date' 'soon' is not an ISO date such as 2026-05-21"),
])
def test_a_documents_own_fields_and_its_provenance_are_checked_with_its_entries(document, message):
    with pytest.raises(ThresholdError) as err:
        parse_thresholds(document, "f")
    assert str(err.value) == message


def test_a_bad_tolerance_and_an_unknown_metric_are_said_in_full():
    from harness.core.metrics import METRICS

    with pytest.raises(ThresholdError) as err:
        parse_entry({**ENTRY, "tolerance": "10%"}, "f.json: entry 3")
    assert str(err.value) == "f.json: entry 3: field 'tolerance' must be a number, got '10%'"
    with pytest.raises(ThresholdError) as err:
        parse_entry({**ENTRY, "metric": "zzzz"}, "f")
    assert str(err.value) == f"f: field 'metric' has unknown metric 'zzzz'; known: {', '.join(METRICS)}"
