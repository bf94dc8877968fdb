"""What a user reads of a release verdict (``harness.analysis.verdict``): the report's every line for a
failing check, the one-line summary, verdict.json's fields, the legs merged, the table of outcome changes
cut at 50, and each gate cell's words; pinned so that a one-line change to the rendering or to the order
of the reasons shows (issue 57, generated mutants)."""

from __future__ import annotations

import json

import pytest

from harness.analysis.contract import ContractResult
from harness.analysis.pairing import SideReport
from harness.analysis.results import CaseOutcome
from harness.analysis.verdict import cannot_run, decide, merge, merged_markdown
from harness.core.sequential import Design
from tests.unit.analysis.test_verdict import NOISY, TKG, side

pytestmark = pytest.mark.unit

SLOWER = (f"{TKG} tkg_ms_p50: slower by 29.4% (17 -> 22; 95% interval +29.4% .. +29.4% over 3 pairs; failed at 3 "
          "pairs, p 0 <= Holm level 0.025; tolerance 5%)")


def failing():
    base = side("baseline", [17.0] * 3, outcomes={"t::a": CaseOutcome("passed")})
    cand = side("candidate", [22.0] * 3, outcomes={"t::a": CaseOutcome("failed", "boom")})
    cand.versions = {"nxdi_version": "0.10.0", "pip_freeze": ["x==1"], "torch": "2.13"}
    return decide(base, cand, mode="NxDI CPU mode")


def test_a_failing_checks_report_reads_line_by_line():
    v = failing()
    rule = v.design.describe()
    table = "| benchmark | metric | baseline | candidate | change | interval | pairs | gate |\n" \
            "|---|---|---|---|---|---|---|---|"
    expected = "\n".join([
        "## Release check: FAIL", "",
        "| | baseline | candidate |", "|---|---|---|",
        "| nxdi_version | 0.9.0 | 0.10.0 |", "| torch | - | 2.13 |", "",
        "Mode: NxDI CPU mode; perf rounds (fresh processes, A B / B A): 3 run, 3 with baseline results, 3 with "
        f"candidate results; tolerance 5%; {rule}.", "",
        "### Reasons", "",
        "1. 1 test(s) passed on the baseline and not on the candidate: t::a (failed)",
        f"2. {SLOWER}", "",
        *v.config_lines,
        "### Tests whose outcome changed", "",
        "| test | baseline | candidate | message |", "|---|---|---|---|",
        "| `t::a` | passed | failed | boom |", "",
        "### Gated figures", "", table,
        f"| `{TKG}` | tkg_ms_p50 | 17 | 22 | +29.4% | +29.4% .. +29.4% | 3 | **FAIL** at 3 pairs |",
        "| `engine carbon-tiny/smoke` | load_s | 0.3 | 0.3 | +0.0% | +0.0% .. +0.0% | 3 | pass at 3 pairs (tol 25%) |",
        "",
        "<details><summary>Reported, not gated (derived from the same samples, or timed by the engine): 2 "
        "figures</summary>", "", table,
        f"| `{TKG}` | median_s | 0.017 | 0.022 | +29.4% | +29.4% .. +29.4% | 3 | reported |",
        f"| `{TKG}` | tkg_roofline_fraction | 0.1 | 0.1 | +0.0% | +0.0% .. +0.0% | 3 | reported |",
        "", "</details>", "",
        "Each pair's figures are in verdict.json (`figures[].pairs`)."])
    assert v.markdown() == expected
    assert v.summary() == "FAIL: 1 test(s) passed on the baseline and not on the candidate: t::a (failed) (and 1 more)"
    assert v.word == "FAIL" and not v.passed and v.rounds == 3 and v.mode == "NxDI CPU mode"


def test_verdict_json_carries_the_design_the_sides_and_every_list():
    v = failing()
    data = json.loads(json.dumps(v.to_dict()))
    d = v.design
    assert data["design"] == {"min_pairs": 3, "max_pairs": 3, "step": d.step, "looks": [3], "alpha": d.alpha,
                              "beta": d.beta, "resolve": d.resolve, "legs": d.legs, "rule": d.describe()}
    assert (data["schema"], data["verdict"], data["mode"], data["rounds"], data["tolerance"]) == (
        3, "FAIL", "NxDI CPU mode", 3, 0.05)
    assert data["reasons"] == v.reasons and data["warnings"] == [] and data["inconclusive"] == []
    assert data["fail_on_likely"] is False and data["wall_s"] is None and data["contract"] == {}
    assert data["outcome_changes"] == [{"test": "t::a", "baseline": "passed", "candidate": "failed",
                                        "message": "boom"}]
    assert data["improvements"] == [] and data["left_out"] == [] and data["not_measured"] == []
    assert data["stacks"] == {"baseline": "neuron", "candidate": "neuron"}
    cand = data["sides"]["candidate"]
    assert cand == {"backend": "neuron", "dtype": None, "versions": {"nxdi_version": "0.10.0", "pip_freeze": ["x==1"],
                                                                       "torch": "2.13"},
                    "tests": 1, "rounds": 3, "rounds_run": [1, 2, 3], "round_errors": {}, "session_errors": [],
                    "config": {}}
    assert [f["metric"] for f in data["figures"]] == ["median_s", "tkg_ms_p50", "tkg_roofline_fraction", "load_s"]


def test_more_than_50_outcome_changes_are_cut_at_50_and_their_messages_at_160():
    base = SideReport("baseline", outcomes={f"t::{i:02d}": CaseOutcome("passed") for i in range(53)})
    cand = SideReport("candidate", outcomes={f"t::{i:02d}": CaseOutcome("failed", "m" * 200) for i in range(53)})
    v = decide(base, cand)
    assert v.reasons == ["53 test(s) passed on the baseline and not on the candidate: t::00 (failed), t::01 (failed), "
                         "t::02 (failed), t::03 (failed), t::04 (failed) and 48 more"]
    lines = v.markdown().splitlines()
    rows = [line for line in lines if line.startswith("| `t::")]
    assert len(rows) == 50 and rows[0] == f"| `t::00` | passed | failed | {'m' * 160} |"
    assert "| ... 3 more in verdict.json | | | |" in lines
    five = decide(SideReport("baseline", outcomes={f"t::{i}": CaseOutcome("passed") for i in range(5)}),
                  SideReport("candidate", outcomes={}))
    assert five.reasons[0].endswith("t::4 (missing)") and "more" not in five.reasons[0]
    assert "| `t::0` | passed | missing | not collected on the candidate |" in five.markdown()


def test_a_pass_says_pass_and_an_open_figure_inconclusive_in_one_line():
    passed = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3))
    assert passed.summary() == "PASS" and passed.passed and passed.word == "PASS"
    assert passed.markdown().startswith("## Release check: PASS\n\n| | baseline | candidate |")
    assert "### Reasons" not in passed.markdown() and "### Still open" not in passed.markdown()
    undecided = decide(side("baseline", [17.0] * 4), side("candidate", NOISY), design=Design(min_pairs=4, max_pairs=4))
    assert undecided.summary() == f"INCONCLUSIVE: 1 gated figure(s) still open at 4 pairs: {TKG} tkg_ms_p50"
    md = undecided.markdown()
    assert ("### Still open at --max-rounds 4 (INCONCLUSIVE: neither a pass nor a regression)\n\n"
            f"1. {undecided.open[0].describe()}\n") in md


def test_the_default_design_looks_once_at_every_round_run_and_at_least_three():
    two = decide(side("baseline", [17.0] * 2), side("candidate", [17.0] * 2))
    assert (two.design.min_pairs, two.design.max_pairs, two.rounds) == (3, 3, 2)
    five = decide(side("baseline", [17.0] * 5), side("candidate", [17.0] * 4))
    assert (five.design.min_pairs, five.design.max_pairs, five.rounds) == (5, 5, 5)
    assert five.reasons == ["the candidate's perf round 5 produced no results (no error recorded)"]


def test_a_contract_reason_fails_the_check_naming_its_model_and_shape():
    contract = {"carbon-tiny/smoke": ContractResult(reasons=["the candidate breaks it"], notes=["a note"])}
    v = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3), contract=contract)
    assert v.reasons == ["output contract (carbon-tiny/smoke): the candidate breaks it"] and v.word == "FAIL"
    assert v.to_dict()["contract"]["carbon-tiny/smoke"]["notes"] == ["a note"]
    assert "<!-- output contract of carbon-tiny/smoke -->" in v.markdown()


def test_the_first_engine_error_of_a_side_is_why_it_cannot_run_once():
    error = 'failed with "harness.core.errors.BackendError: cannot load the engine"'
    side_ = SideReport("candidate", session_errors=["stopped at start"],
                       outcomes={"t::a": CaseOutcome("passed", "BackendError: not a failure"),
                                 "t::b": CaseOutcome("failed", error), "t::c": CaseOutcome("error", error),
                                 "t::d": CaseOutcome("failed", "AssertionError")})
    assert cannot_run(side_) == ["stopped at start", "cannot load the engine (first seen in t::b)"]
    assert cannot_run(SideReport("x", outcomes={"t::d": CaseOutcome("failed", "AssertionError")})) == []


def test_merged_legs_keep_each_legs_verdict_and_number_their_reasons():
    passed = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)).to_dict()
    failed = failing().to_dict()
    undecided = decide(side("baseline", [17.0] * 4), side("candidate", NOISY)).to_dict()
    merged = merge([passed, failed, undecided], ["a", "b", "c"])
    assert merged["schema"] == 3 and list(merged["legs"]) == ["a", "b", "c"]
    assert merged["legs"]["b"] == {"verdict": "FAIL", "sides": failed["sides"], "rounds": 3}
    assert merged["reasons"] == [f"b: {r}" for r in failed["reasons"]]
    assert merged["inconclusive"] == [f"c: {undecided['inconclusive'][0]['text']}"]
    md = merged_markdown(merged)
    assert md == "\n".join([
        "## Release check (all legs): FAIL", "", "| leg | verdict |", "|---|---|", "| a | PASS |", "| b | FAIL |",
        "| c | INCONCLUSIVE |", "", "### Reasons", "", f"1. b: {failed['reasons'][0]}", f"2. b: {failed['reasons'][1]}",
        "", "### Still open (INCONCLUSIVE: neither a pass nor a regression)", "",
        f"1. {merged['inconclusive'][0]}"]) + "\n"
    assert merged_markdown(merge([passed], ["a"])) == "## Release check (all legs): PASS\n\n| leg | verdict |\n" \
                                                      "|---|---|\n| a | PASS |\n"


def bf16_contract(candidate_dtype: str = "bf16") -> dict:
    from harness.analysis.contract import judge_contract, load_tolerances
    from tests.unit.analysis.test_contract import REFERENCE, SIDE, YARDSTICK

    expected = {"reference": REFERENCE, "yardstick": YARDSTICK}
    return {"carbon-tiny/smoke": judge_contract({"baseline": SIDE, "candidate": {**SIDE, "dtype": candidate_dtype}},
                                                {"baseline": expected, "candidate": expected}, load_tolerances())}


def test_a_pass_judged_in_a_bf16_leg_alone_says_what_it_cannot_exclude_beside_its_word():
    v = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3), contract=bf16_contract())
    caveat = "bf16 leg only: defects below bf16 rounding not excluded"
    assert v.word == "PASS" and v.legs == [caveat] and v.summary() == f"PASS ({caveat})"
    assert v.markdown().startswith(f"## Release check: PASS\n\nOutput contract: {caveat}.\n\n| | baseline | candidate |")
    data = v.to_dict()
    assert data["contract_legs"] == [caveat] and data["output_contract_legs"][0]["contracts"] == ["carbon-tiny/smoke"]
    assert decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)).legs == []


def test_a_sides_round_errors_are_kept_by_round_and_the_legs_record_each_sides_dtype():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    cand.round_errors = {2: "exit 1: warm"}
    v = decide(base, cand, contract=bf16_contract())
    assert v.to_dict()["sides"]["candidate"]["round_errors"] == {"2": "exit 1: warm"}
    assert v.to_dict()["output_contract_legs"][0]["dtypes"] == {"baseline": "bf16", "candidate": "bf16"}


def test_one_reason_is_the_summary_alone_and_several_warnings_open_figures_and_legs_are_each_listed():
    from dataclasses import replace

    from tests.unit.analysis.test_verdict import slower

    one = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3),
                 contract={"m/s": ContractResult(reasons=["broken"])})
    assert one.summary() == "FAIL: output contract (m/s): broken"
    warned = decide(side("baseline", [17.0] * 4), side("candidate", slower(0.13, 0.03)), design=Design())
    (w,) = warned.warnings
    assert replace(warned, likely=warned.likely * 2).summary() == f"PASS; 2 warning(s): {w}; {w}"
    undecided = decide(side("baseline", [17.0] * 4), side("candidate", NOISY), design=Design(min_pairs=4, max_pairs=4))
    two = replace(undecided, open=undecided.open * 2)
    assert two.summary() == f"INCONCLUSIVE: 2 gated figure(s) still open at 4 pairs: {TKG} tkg_ms_p50, {TKG} tkg_ms_p50"
    legs = {**bf16_contract(), "carbon-tiny/other": bf16_contract("server")["carbon-tiny/smoke"]}
    passed = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3), contract=legs)
    assert passed.summary() == ("PASS (bf16 leg only: defects below bf16 rounding not excluded; server leg only: "
                                "defects below bf16 rounding not excluded)")


def test_each_gate_cell_says_how_its_figure_was_decided():
    from dataclasses import replace

    from harness.core.sequential import FAIL, PASS, Decision

    v = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3))
    tkg = next(f for f in v.figures if f.metric == "tkg_ms_p50")

    def cell(figure) -> str:
        row = next(line for line in replace(v, figures=[figure]).markdown().splitlines() if line.startswith(f"| `{TKG}`"))
        return row.rsplit(" | ", 1)[1].rstrip(" |")

    assert cell(replace(tkg, decision=Decision("k", FAIL, None))) == "**FAIL**"
    assert cell(replace(tkg, decision=Decision("k", PASS, None))) == "pass (tol 5%)"
    assert cell(replace(tkg, decision=Decision("k", PASS, 3), tolerance=0.08)) == "pass at 3 pairs (tol 8%)"
    assert cell(replace(tkg, decision=None)) == "reported"
    warned = decide(side("baseline", [17.0] * 4), side("candidate", slower_by_13()), design=Design())
    row = next(line for line in warned.markdown().splitlines() if line.startswith(f"| `{TKG}` | tkg_ms_p50"))
    assert row.endswith(" | pass at 4 pairs (tol 5%), **likely slower** |")


def slower_by_13() -> list[float]:
    from tests.unit.analysis.test_verdict import slower

    return slower(0.13, 0.03)


def test_a_figure_of_one_pair_has_no_interval_in_the_table():
    v = decide(side("baseline", [17.0]), side("candidate", [17.0]))
    row = next(line for line in v.markdown().splitlines() if line.startswith(f"| `{TKG}` | tkg_ms_p50"))
    assert row.split(" | ")[4:7] == ["+0.0%", "-", "1"]


def test_at_the_cap_a_figure_no_look_decided_is_still_open_while_the_check_runs():
    from harness.analysis.compare import Tolerances
    from harness.analysis.verdict import still_open

    noisy = side("baseline", [17.0] * 4), side("candidate", NOISY)
    assert still_open(*noisy, Tolerances(default=0.05), Design(min_pairs=4, max_pairs=4)) == ([f"{TKG} tkg_ms_p50"], [])


def test_merged_legs_say_each_warning_above_the_verdict_and_an_entry_without_words_as_empty():
    merged = merge([{"verdict": "INCONCLUSIVE", "inconclusive": [{}], "warnings": ["w1", "w2"]}], ["a"])
    assert merged["inconclusive"] == ["a: "] and merged["warnings"] == ["a: w1", "a: w2"]
    assert merged_markdown(merged).startswith("**Warning: a: w1**\n**Warning: a: w2**\n\n## Release check (all legs): "
                                              "INCONCLUSIVE\n")


def test_the_table_shows_each_figures_interval_low_to_high_and_a_change_it_cannot_compute_as_a_dash():
    from dataclasses import replace

    warned = decide(side("baseline", [17.0] * 4), side("candidate", slower_by_13()), design=Design())
    tkg = next(f for f in warned.figures if f.metric == "tkg_ms_p50")
    lo, hi = tkg.bounds
    row = next(line for line in warned.markdown().splitlines() if line.startswith(f"| `{TKG}` | tkg_ms_p50"))
    assert lo < hi and row.split(" | ")[4:6] == [f"{100 * tkg.change:+.1f}%", f"{100 * lo:+.1f}% .. {100 * hi:+.1f}%"]
    nan = replace(warned, figures=[replace(tkg, interval=replace(tkg.interval, ratio=float("nan")))])
    row = next(line for line in nan.markdown().splitlines() if line.startswith(f"| `{TKG}` | tkg_ms_p50"))
    assert row.split(" | ")[4] == "-"


def test_versions_either_side_alone_reports_are_listed_and_a_verdict_without_sides_still_renders():
    from dataclasses import replace

    base = side("baseline", [17.0] * 3)
    base.versions = {"nxdi_version": "0.9.0", "neuronx_cc": "2.21"}
    v = decide(base, side("candidate", [17.0] * 3))
    md = v.markdown().splitlines()
    assert md[2:6] == ["| | baseline | candidate |", "|---|---|---|", "| neuronx_cc | 2.21 | - |",
                       "| nxdi_version | 0.9.0 | 0.9.0 |"]
    bare = replace(v, sides={}).markdown()
    assert "| | baseline | candidate |\n|---|---|---|\n\nMode: ; perf rounds (fresh processes, A B / B A): 3 run, 0 with " \
           "baseline results, 0 with candidate results" in bare


@pytest.mark.parametrize("n, more", [(50, None), (51, "| ... 1 more in verdict.json | | | |")])
def test_the_outcome_table_is_cut_only_past_50(n, more):
    base = SideReport("baseline", outcomes={f"t::{i:02d}": CaseOutcome("passed") for i in range(n)})
    cand = SideReport("candidate", outcomes={f"t::{i:02d}": CaseOutcome("failed", "x") for i in range(n)})
    lines = decide(base, cand).markdown().splitlines()
    assert sum(line.startswith("| `t::") for line in lines) == 50
    assert [line for line in lines if "more in verdict.json" in line] == ([more] if more else [])


def test_tests_one_stack_only_runs_are_a_table_of_their_own_cut_at_50_and_160():
    base = {f"t::{i:02d}": CaseOutcome("passed") for i in range(52)}
    new = {t: CaseOutcome("skipped", "s" * 200) for t in base}
    v = decide(SideReport("baseline", backend="neuron", outcomes=base),
               SideReport("candidate", backend="openai", outcomes=new))
    md = v.markdown()
    start = md.index("### Not comparable across stacks (52 tests one stack only runs)")
    block = md[start:].split("\n\n")
    assert block[0] == "### Not comparable across stacks (52 tests one stack only runs)"
    rows = block[1].splitlines()
    assert rows[:3] == ["| test | baseline | candidate | why |", "|---|---|---|---|",
                        f"| `t::00` | passed | skipped | {'s' * 160} |"]
    assert len(rows) == 52 and rows[-1].startswith("| `t::49` |")
    assert "### Figures across stacks" in md and v.reasons == []


def test_pairs_left_out_and_figures_not_measured_are_listed_under_their_headings():
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    del base.rounds[1]
    base.round_errors[1] = "exit 1: lost"
    base.engines = {k: {"e": {"load_s": 1.0, "compile": "compiled", "compile_s": 1.0}} for k in (1, 2, 3, 4)}
    cand.engines = {k: {"e": {"load_s": 1.0, "compile": "cache hit"}} for k in (1, 2, 3, 4)}
    v = decide(base, cand)
    md = v.markdown()
    assert ("### Pairs left out (the baseline left no result)\n\n- baseline perf round 1 produced no results (exit 1: "
            "lost): pair 1 is left out of every figure\n\n") in md
    assert f"### Not measured\n\n- {v.not_measured[0]}\n\n" in md and v.not_measured[0].startswith("engine e compile_s")


def test_an_open_figures_block_ends_before_the_next_section_and_the_configuration_drift_is_read_from_both_sides():
    undecided = decide(side("baseline", [17.0] * 4), side("candidate", NOISY), design=Design(min_pairs=4, max_pairs=4))
    assert f"1. {undecided.open[0].describe()}\n\n### Configuration drift" in undecided.markdown()
    base, cand = side("baseline", [17.0] * 3, config={"tp": 1}), side("candidate", [17.0] * 3, config={"tp": 2})
    v = decide(base, cand)
    assert v.config_drift["compared"] is True and v.config_drift["differences"] == [["tp", 1, 2]]
    assert "| `tp` | 1 | 2 |" in v.markdown()


@pytest.mark.parametrize("message, why", [
    ('failed with "harness.core.errors.BackendError: load failed: BackendError: the inner one"',
     "load failed: BackendError: the inner one"),  # an error quoting another keeps it whole
    ("harness.core.errors.BackendError(no words)", "harness.core.errors.BackendError(no words)"),
    ('failed with "harness.core.errors.BackendError: unknown device TRN2X"', "unknown device TRN2X"),
])
def test_why_a_side_cannot_run_is_its_engine_errors_own_words(message, why):
    assert cannot_run(SideReport("c", outcomes={"t::a": CaseOutcome("error", message)})) == [
        f"{why} (first seen in t::a)"]


def test_six_changed_tests_name_five_and_one_more_and_fail_on_likely_keeps_every_other_reason():
    base = SideReport("baseline", outcomes={f"t::{i}": CaseOutcome("passed") for i in range(6)})
    six = decide(base, SideReport("candidate", outcomes={}))
    assert six.reasons[0].endswith("t::4 (missing) and 1 more") and six.confidence == 0.95
    assert six.to_dict()["confidence"] == 0.95
    from tests.unit.analysis.test_verdict import slower

    b = side("baseline", [17.0] * 4, outcomes={"t::a": CaseOutcome("passed")})
    c = side("candidate", slower(0.13, 0.03), outcomes={"t::a": CaseOutcome("failed", "x")})
    strict = decide(b, c, design=Design(), fail_on_likely=True)
    assert len(strict.reasons) == 2 and strict.reasons[0].startswith("1 test(s) passed on the baseline")
    assert strict.reasons[1].endswith("(--fail-on-likely)")


def test_the_verdicts_last_look_ends_a_figure_still_open_as_unresolved_before_the_cap():
    v = decide(side("baseline", [17.0] * 4), side("candidate", NOISY), design=Design(min_pairs=4, max_pairs=8))
    tkg = next(f for f in v.figures if f.metric == "tkg_ms_p50")
    assert tkg.state == "unresolved" and v.word == "INCONCLUSIVE"


def test_a_side_that_recorded_no_versions_reads_dashes_and_verdict_json_keeps_drift_and_no_stacks():
    from dataclasses import replace

    v = decide(side("baseline", [17.0] * 3), side("candidate", [17.0] * 3))
    one = replace(v, sides={"baseline": {}, "candidate": {"versions": {"x": "1"}}}).markdown()
    assert "| x | - | 1 |" in one
    other = replace(v, sides={"baseline": {"versions": {"x": "1"}}, "candidate": {}}).markdown()
    assert "| x | 1 | - |" in other
    assert v.to_dict()["config_drift"] == {"compared": False, "missing": ["baseline", "candidate"]}
    assert replace(v, stacks=None).to_dict()["stacks"] is None


def test_a_left_out_pair_adds_its_section_to_the_whole_report():
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    del base.rounds[1]
    md = decide(base, cand).markdown()
    assert md.startswith("## Release check: ") and "### Pairs left out" in md and "### Gated figures" in md
