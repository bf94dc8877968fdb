"""One figure of both sides' paired rounds (``harness.analysis.pairing``) as a user reads it: its change,
interval, absolute change and per-pair log ratios signed so that worse is positive whichever way the figure
points; the floors that keep timer noise from failing a check; the words of a figure's reason; why a round
left nothing; and what a served or mixed pair does not pair (issue 57, generated mutants)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import (
    FigureChange,
    SideReport,
    floor_of,
    fmt_value,
    gated_figures,
    pair_rounds,
)
from harness.analysis.results import BenchResult, CaseOutcome
from harness.core.sequential import FAIL, UNRESOLVED, Decision
from harness.core.stats import paired_ratio_ci
from tests.unit.analysis.test_verdict import TKG, bench, side

pytestmark = pytest.mark.unit


def figure(base, new, direction="max", **kw) -> FigureChange:
    return FigureChange("b", "m", tuple(base), tuple(new), direction, kw.pop("tolerance", 0.05), kw.pop("gated", True),
                        paired_ratio_ci(list(base), list(new), 0.95), kw.pop("floor", None), **kw)


@pytest.mark.parametrize("metric, floor", [
    ("compile_s", 0.5), ("load_s", 0.5), ("median_s", 0.05 / 1000.0), ("vllm_start_s", 0.05 / 1000.0),
    ("tkg_ms_p50", 0.05), ("median_e2el_ms", 0.05), ("tkg_roofline_fraction", None), ("top1_agreement", None),
    # a rate is no time: verdict.json once showed tokens_per_s with the seconds' floor (5e-5)
    ("tokens_per_s", None), ("kbp_per_s", None), ("scored_kbp_per_s", None),
])
def test_each_figure_has_the_floor_of_its_unit(metric, floor):
    assert floor_of(metric) == floor


def test_a_slower_latency_and_a_lower_throughput_are_both_positive_changes():
    slower = figure([10.0, 10.0, 10.0], [12.0, 12.0, 12.0])
    assert slower.change == pytest.approx(0.2) and slower.bounds == pytest.approx((0.2, 0.2))
    assert slower.absolute == pytest.approx(2.0)
    assert slower.log_ratios() == pytest.approx([math.log(1.2)] * 3)
    lower = figure([10.0, 10.0, 10.0], [8.0, 8.0, 8.0], "min")
    assert lower.change == pytest.approx(0.2) and lower.absolute == pytest.approx(2.0)
    assert lower.log_ratios() == pytest.approx([-math.log(0.8)] * 3)
    spread = figure([10.0, 10.0, 10.0], [8.0, 9.0, 8.5], "min")
    lo, hi = spread.bounds
    assert lo < spread.change < hi and spread.change == pytest.approx(1 - (0.8 * 0.9 * 0.85) ** (1 / 3))


def test_a_figure_that_is_no_positive_number_has_no_ratio_there():
    f = figure([10.0, 0.0, 10.0, 10.0, -1.0], [10.0, 10.0, float("inf"), 0.0, 10.0])
    assert f.log_ratios()[0] == 0.0 and all(math.isnan(x) for x in f.log_ratios()[1:])
    one = figure([10.0], [11.0])
    assert one.bounds is None and one.change == pytest.approx(0.1)
    assert "no interval over 1 pairs" in one.describe()


def test_a_figures_series_carries_its_key_pairs_tolerance_floor_and_medians():
    f = figure([10.0, 20.0, 30.0], [11.0, 22.0, 36.0], floor=0.05, tolerance=0.07, rounds=(2, 4, 5))
    s = f.series()
    assert (s.key, s.tolerance, s.floor, s.base_median, s.absolute) == ("b m", 0.07, 0.05, 20.0, 2.0)
    assert [k for k, _ in s.pairs] == [2, 4, 5] and s.pairs[2][1] == pytest.approx(math.log(1.2))
    assert figure([1.0, 2.0], [1.0, 2.0]).rounds == (1, 2)


def test_a_failed_figures_reason_names_its_change_interval_pairs_holm_level_and_tolerance():
    d = Decision("b m", FAIL, 3, 3, p_fail=0.0123, holm_level=0.025)
    f = figure([17.0] * 3, [22.0] * 3, decision=d)
    assert f.regressed and not f.unresolved and f.state == FAIL
    assert f.describe() == ("b m: slower by 29.4% (17 -> 22; 95% interval +29.4% .. +29.4% over 3 pairs; failed at 3 "
                            "pairs, p 0.012 <= Holm level 0.025; tolerance 5%)")
    lower = figure([100.0] * 3, [80.0] * 3, "min", decision=Decision("b m", FAIL, 3), how="each pair's own ratio")
    assert lower.describe() == ("b m: lower by 20.0% (100 -> 80; 95% interval +20.0% .. +20.0% over 3 pairs; each "
                                "pair's own ratio; tolerance 5%)")
    plain = figure([100.0] * 3, [80.0] * 3, "min", interval_confidence=0.9)
    assert plain.describe() == "b m: lower by 20.0% (100 -> 80; 90% interval +20.0% .. +20.0% over 3 pairs; tolerance 5%)"
    assert plain.state == "reported" and not plain.regressed
    assert figure([1.0] * 3, [2.0] * 3, gated=False, decision=d).state == "reported"


def test_an_unresolved_figure_says_what_would_decide_it():
    d = Decision("b m", UNRESOLVED, upper=0.42)
    f = figure([10.0, 10.0, 10.0, 10.0], [12.0, 9.0, 11.0, 8.0], decision=d)
    assert f.unresolved and not f.regressed
    text = f.describe()
    assert text.startswith(f"b m: not resolved after 4 pairs: change {100 * f.change:+.1f}% (10 -> 10; 95% interval ")
    assert text.endswith("over 4 pairs), one-sided upper bound +42.0% does not rule out the change a pass must rule "
                         "out, nor is it beyond the 5% tolerance: more pairs (--max-rounds) or a quieter host decide it")
    assert "upper bound none does not" in figure([10.0] * 2, [12.0, 9.0], decision=Decision("b m", UNRESOLVED)).describe()


def test_a_figures_json_carries_every_pair_and_its_decision():
    d = Decision("b m", FAIL, 2, 3, holm_level=0.05)
    data = figure([10.0, 10.0], [12.0, 12.0], rounds=(1, 3), decision=d, floor=0.05, how="h").to_dict()
    assert data["pairs"] == [{"round": 1, "baseline": 10.0, "candidate": 12.0, "log_ratio": pytest.approx(math.log(1.2))},
                             {"round": 3, "baseline": 10.0, "candidate": 12.0, "log_ratio": pytest.approx(math.log(1.2))}]
    assert (data["benchmark"], data["metric"], data["baseline"], data["candidate"], data["rounds"]) == (
        "b", "m", [10.0, 10.0], [12.0, 12.0], [1, 3])
    assert (data["direction"], data["tolerance"], data["gated"], data["floor"], data["pair_count"]) == (
        "max", 0.05, True, 0.05, 2)
    assert (data["state"], data["regressed"], data["how"], data["decision"]) == (FAIL, True, "h", d.to_dict())
    assert data["change"] == pytest.approx(0.2) and data["interval"] == pytest.approx([0.2, 0.2])
    bare = figure([10.0], [12.0]).to_dict()
    assert bare["interval"] is None and bare["decision"] is None and bare["how"] is None


def test_why_a_round_left_nothing_is_its_first_failed_tests_first_line_else_the_process_error():
    s = SideReport("x", round_errors={2: "exit 1: Killed"}, round_outcomes={
        1: {"t::ok": CaseOutcome("passed", "fine"), "t::a": CaseOutcome("skipped", "skip"),
            "t::b": CaseOutcome("error", "  E: first\nsecond"), "t::c": CaseOutcome("failed", "c" * 300),
            "t::d": CaseOutcome("failed", "")},
        2: {"t::b": CaseOutcome("failed", "broke")}})
    assert s.why(1) == "error: E: first" and s.why(1, "t::c") == "failed: " + "c" * 240
    assert s.why(1, "t::d") == "no error recorded" and s.why(1, "t::ok") == "no error recorded"
    assert s.why(2, "t::x") == "exit 1: Killed" and s.why(2) == "failed: broke" and s.why(3) == "no error recorded"
    assert SideReport("x", ran=[3, 1], rounds={2: []}).rounds_run() == [1, 2, 3]


def test_values_render_to_four_figures_and_a_non_finite_one_as_a_dash():
    assert [fmt_value(v) for v in (17.0, 0.0123456, 123456.0, math.inf, math.nan)] == ["17", "0.01235", "1.235e+05",
                                                                                      "-", "-"]


def test_a_p50_is_gated_only_where_it_is_the_benchmarks_own_median_round():
    assert gated_figures(bench(TKG, 0.017, tkg_ms_p50=17.0, cte_ms_p50=17.0)) == ["tkg_ms_p50", "cte_ms_p50"]
    assert gated_figures(bench(TKG, 0.017, tkg_ms_p50=17.0 * (1 + 1e-8))) == ["median_s"]
    assert gated_figures(bench(TKG, 0.017, tkg_ms_p50=17.0 * (1 + 1e-10))) == ["tkg_ms_p50"]
    assert gated_figures(BenchResult(TKG, None, {}, None, figures={"tkg_ms_p50": 17.0})) == []


def test_a_figures_direction_is_its_metrics_else_the_benchmarks_own_else_lower_is_better():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    for s, value in ((base, 10.0), (cand, 8.0)):
        for results in s.rounds.values():
            results[0].figures.update({"tokens_per_s": value, "nxdi_score": value, "nxdi_time": value})
            results[0].directions["nxdi_score"] = "min"
    figures = {f.metric: f for f in pair_rounds(base, cand, Tolerances(default=0.05), 0.95).figures}
    assert figures["tokens_per_s"].direction == "min" and figures["tokens_per_s"].change == pytest.approx(0.2)
    assert figures["nxdi_score"].direction == "min" and figures["nxdi_time"].direction == "max"
    assert figures["median_s"].direction == "max" and figures["load_s"].direction == "max"


def test_each_figure_takes_its_tolerance_by_group_and_metric_and_engines_theirs():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    for s in (base, cand):
        for results in s.rounds.values():
            results[0].group = "latency"
    tol = Tolerances(default=0.05, metrics={"load_s": 0.4, "tkg_ms_p50": 0.08}, groups={"latency": {"median_s": 0.09}})
    figures = {f.metric: f for f in pair_rounds(base, cand, tol, 0.9).figures}
    assert (figures["tkg_ms_p50"].tolerance, figures["median_s"].tolerance, figures["load_s"].tolerance) == (
        0.08, 0.09, 0.4)
    assert figures["tkg_roofline_fraction"].tolerance == 0.05 and figures["load_s"].interval_confidence == 0.9
    assert figures["load_s"].gated and figures["load_s"].benchmark == "engine carbon-tiny/smoke"
    assert figures["load_s"].floor == 0.5 and figures["tkg_ms_p50"].floor == 0.05
    default = {f.metric: f for f in pair_rounds(base, cand, Tolerances(default=0.05), 0.95).figures}
    assert default["load_s"].tolerance == 0.25


def test_a_candidate_round_lost_and_a_baseline_round_lost_are_said_with_their_errors():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    del base.rounds[2], cand.rounds[3]
    base.round_errors[2], cand.round_errors[3] = "exit 1: A", "exit 1: B"
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    assert pairing.left_out == ["baseline perf round 2 produced no results (exit 1: A): pair 2 is left out of every "
                                "figure"]
    assert pairing.reasons == ["the candidate's perf round 3 produced no results (exit 1: B)"]
    assert next(f for f in pairing.figures if f.metric == "tkg_ms_p50").rounds == (1,)


def test_a_benchmark_the_candidate_lacks_in_several_rounds_names_them_all():
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    cand.rounds[2], cand.rounds[4] = [], []
    cand.round_errors[2] = "exit 1: gone"
    (reason,) = pair_rounds(base, cand, Tolerances(default=0.05), 0.95).reasons
    assert reason == f"benchmark {TKG} was not produced by the candidate in round(s) 2, 4 (exit 1: gone)"


def served_rounds(s: SideReport, e2el: float) -> None:
    for k in s.rounds:
        s.rounds[k] = [bench(TKG, 0.017, tkg_ms_p50=17.0, median_e2el_ms=e2el, median_ttft_ms=3.0)]


def test_a_served_pair_gates_the_end_to_end_latency_and_shows_stack_figures_per_side():
    base = side("baseline", [17.0] * 3, backend="neuron")
    cand = side("candidate", [17.0] * 3, backend="openai")
    served_rounds(base, 100.0)
    served_rounds(cand, 100.0)
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    gated = {f.metric for f in pairing.figures if f.gated}
    assert gated == {"median_e2el_ms"} and "tkg_ms_p50" not in {f.metric for f in pairing.figures}
    assert pairing.not_measured == [
        f"{TKG}: tkg_ms_p50 are each stack's own (neuron / openai): shown in each side's benchmark JSON, not paired",
        "engine load_s: neuron / openai load different things (a served engine only resolves its endpoint; the "
        "server's start is each side's vllm_start_s)"]
    del cand.rounds[2][0].figures["median_e2el_ms"]
    assert pair_rounds(base, cand, Tolerances(default=0.05), 0.95).reasons == [
        f"{TKG} median_e2el_ms: missing on the candidate in round(s) 2"]


def test_a_compile_time_under_its_floor_passes_however_slower_and_a_cache_hit_says_why_not_measured():
    base, cand = side("baseline", [17.0] * 2), side("candidate", [17.0] * 2)
    base.engines = {k: {"e": {"load_s": 1.0, "compile": "compiled", "compile_s": 0.2}} for k in (1, 2)}
    cand.engines = {k: {"e": {"load_s": 1.0, "compile": "compiled", "compile_s": 0.6}} for k in (1, 2)}
    pairing = pair_rounds(base, cand, Tolerances(default=0.05, metrics={"compile_s": 0.5}), 0.95)
    fig = next(f for f in pairing.figures if f.metric == "compile_s")
    assert fig.state == "pass" and fig.tolerance == 0.5 and fig.decision.at_pairs == 2 and fig.decision.at_round == 2
    assert fig.how == "compiled once per side: each pair's own ratio against the tolerance"
    cand.engines = {k: {"e": {"load_s": 1.0, "compile": "compiled", "compile_s": 2.0}} for k in (1, 2)}
    fig = next(f for f in pair_rounds(base, cand, Tolerances(default=0.05, metrics={"compile_s": 0.5}), 0.95).figures
               if f.metric == "compile_s")
    assert fig.state == FAIL
    cand.engines = {1: {"e": {"load_s": 1.0, "compile": "cache hit"}}, 2: {"e": {"load_s": 1.0}}}
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    assert not any(f.metric == "compile_s" for f in pairing.figures)
    assert pairing.not_measured == [
        "engine e compile_s: not measured in the same round on both sides (baseline: compiled; candidate: cache hit); "
        "for a compile-time comparison run the check with an empty --cache-dir and --no-conformance, so that each "
        "side's first perf round compiles"]
    cand.engines = {k: {"e": {"load_s": 1.0}} for k in (1, 2)}
    base.engines = {k: {"e": {"load_s": 1.0}} for k in (1, 2)}
    assert pair_rounds(base, cand, Tolerances(default=0.05), 0.95).not_measured == []


def test_a_reason_names_its_interval_low_to_high_and_a_change_it_cannot_compute_as_zero():
    f = figure([10.0, 10.0, 10.0, 10.0], [20.0, 10.0, 20.0, 10.0], decision=Decision("b m", UNRESOLVED, upper=0.9))
    lo, hi = f.bounds
    text = f.describe()
    assert lo < hi and f"95% interval {100 * lo:+.1f}% .. {100 * hi:+.1f}% over 4 pairs" in text
    assert text.startswith("b m: not resolved after 4 pairs: change +41.4% (")
    from dataclasses import replace

    none = replace(f, interval=replace(f.interval, ratio=float("nan")))
    assert none.change is None and none.describe().startswith("b m: not resolved after 4 pairs: change +0.0% (")
    plain = replace(none, decision=None)
    assert plain.describe().startswith("b m: slower by 0.0% (")


def test_engine_records_a_round_or_a_side_lacks_leave_that_pair_out_of_its_load_time():
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0] * 4)
    base.engines = {1: {"e": {"load_s": 1.0}}, 2: {"e": {"load_s": 1.0}}, 3: {"e": {"load_s": 1.0}}}
    cand.engines = {1: {"e": {"load_s": 1.1}}, 2: {}, 3: {"e": {"compile": "cache hit"}}, 4: {"e": {"load_s": 1.0}}}
    load = [f for f in pair_rounds(base, cand, Tolerances(default=0.05), 0.95).figures if f.metric == "load_s"]
    assert [(f.benchmark, f.rounds, f.base, f.new) for f in load] == [("engine e", (1,), (1.0,), (1.1,))]


def engines(records: dict[int, dict]) -> dict[int, dict]:
    return {k: {"e": {"load_s": 1.0, **r}} for k, r in records.items()}


def compile_figure(pairing):
    return next(f for f in pairing.figures if f.metric == "compile_s")


def test_a_compile_time_is_paired_in_the_rounds_both_sides_compiled_at_its_floors_edge_with_the_checks_confidence():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    base.engines = engines({1: {"compile": "cache hit"}, 2: {"compile": "compiled", "compile_s": 1.0},
                            3: {"compile": "compiled", "compile_s": 1.0}})
    cand.engines = engines({1: {"compile": "cache hit"}, 2: {"compile": "compiled", "compile_s": 1.4},
                            3: {"compile": "compiled", "compile_s": 1.6}})
    f = compile_figure(pair_rounds(base, cand, Tolerances(default=0.05), 0.8))
    assert f.rounds == (2, 3) and f.floor == 0.5 and f.interval_confidence == 0.8 and f.absolute == 0.5
    assert f.interval == paired_ratio_ci([1.0, 1.0], [1.4, 1.6], 0.8) != paired_ratio_ci([1.0, 1.0], [1.4, 1.6], 0.95)
    assert f.state == "pass"  # +50% beyond 25%, but 0.5 s is not beyond the 0.5 s floor
    assert (f.decision.key, f.decision.at_pairs, f.decision.at_round) == ("engine e compile_s", 2, 3)


def test_a_compile_time_needs_both_sides_compiled_with_a_number_and_each_engine_is_judged():
    base, cand = side("baseline", [17.0] * 2), side("candidate", [17.0] * 2)
    base.engines = {k: {"a": {"load_s": 1.0, "compile": "compiled", "compile_s": 10.0},
                        "b": {"load_s": 1.0, "compile": "cache hit", "compile_s": 3.0}} for k in (1, 2)}
    cand.engines = {k: {"a": {"load_s": 1.0, "compile": "compiled", "compile_s": 10.0},
                        "b": {"load_s": 1.0, "compile": "compiled"}} for k in (1, 2)}
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    assert [f.benchmark for f in pairing.figures if f.metric == "compile_s"] == ["engine a"]
    assert pairing.not_measured == [
        "engine b compile_s: not measured in the same round on both sides (baseline: cache hit; candidate: compiled); "
        "for a compile-time comparison run the check with an empty --cache-dir and --no-conformance, so that each "
        "side's first perf round compiles"]
    base.engines = {1: {"b": {"load_s": 1.0, "compile": "compiled"}}, 2: {"b": {"load_s": 1.0, "compile": "cache hit"}}}
    cand.engines = {k: {"b": {"load_s": 1.0}} for k in (1, 2)}
    (said,) = pair_rounds(base, cand, Tolerances(default=0.05), 0.95).not_measured
    assert "(baseline: cache hit, compiled; candidate: not recorded)" in said


def test_a_load_time_keeps_the_rounds_it_was_paired_in_and_the_checks_confidence():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    base, cand = side("baseline", [17.0] * 4), side("candidate", [17.0, 17.5, 16.8, 17.9])
    base.engines, cand.engines = engines({2: {}, 3: {}, 4: {}}), engines({1: {}, 2: {}, 4: {}})
    cand.engines[4]["e"]["load_s"] = 1.3
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.8)
    load = next(f for f in pairing.figures if f.metric == "load_s")
    assert load.rounds == (2, 4) and load.interval_confidence == 0.8
    assert load.interval == paired_ratio_ci([1.0, 1.0], [1.0, 1.3], 0.8) != paired_ratio_ci([1.0, 1.0], [1.0, 1.3])
    tkg = next(f for f in pairing.figures if f.metric == "tkg_ms_p50")
    assert tkg.interval_confidence == 0.8 and tkg.interval == paired_ratio_ci(list(tkg.base), list(tkg.new), 0.8)
    assert tkg.interval != paired_ratio_ci(list(tkg.base), list(tkg.new))


def test_a_median_round_is_lower_is_better_whatever_its_benchmark_says_and_two_served_sides_pair_no_load_time():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    for s in (base, cand):
        for results in s.rounds.values():
            results[0].directions.update({"median_s": "min"})
    figures = {f.metric: f for f in pair_rounds(base, cand, Tolerances(default=0.05), 0.95).figures}
    assert figures["median_s"].direction == "max"
    served = side("baseline", [17.0] * 3, backend="openai"), side("candidate", [17.0] * 3, backend="openai")
    pairing = pair_rounds(*served, Tolerances(default=0.05), 0.95)
    assert not any(f.metric == "load_s" for f in pairing.figures)
    assert pairing.not_measured[-1].startswith("engine load_s: openai / openai load different things")


def test_a_benchmark_the_baseline_lacks_in_a_round_is_left_out_with_that_tests_own_failure():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    base.rounds[2] = []
    base.round_outcomes[2] = {"other": CaseOutcome("failed", "not this"), TKG: CaseOutcome("failed", "boom")}
    (left,) = pair_rounds(base, cand, Tolerances(default=0.05), 0.95).left_out
    assert left == f"baseline perf round 2 did not produce {TKG} (failed: boom): its pair 2 is left out"
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    cand.rounds[3] = []
    cand.round_outcomes[3] = {"other": CaseOutcome("failed", "not this"), TKG: CaseOutcome("failed", "boom")}
    assert pair_rounds(base, cand, Tolerances(default=0.05), 0.95).reasons == [
        f"benchmark {TKG} was not produced by the candidate in round(s) 3 (failed: boom)"]


CTE = "tests/perf/test_latency.py::test_cte[carbon-tiny-smoke]"


def test_a_benchmark_or_a_figure_the_candidate_never_produced_hides_none_after_it():
    base, cand = side("baseline", [17.0] * 3), side("candidate", [17.0] * 3)
    for k in base.rounds:
        base.rounds[k] = [bench(CTE, 0.02, cte_ms_p50=20.0)] + base.rounds[k]
        base.rounds[k][1].figures["cte_ms_p50"] = 3.0
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    assert pairing.reasons[0].startswith(f"benchmark {CTE} was not produced by the candidate in round(s) 1, 2, 3")
    assert {(f.benchmark, f.metric) for f in pairing.figures} >= {(TKG, "tkg_ms_p50"), (TKG, "median_s")}
    assert (TKG, "cte_ms_p50") not in {(f.benchmark, f.metric) for f in pairing.figures}


def test_every_stack_specific_figure_of_a_benchmark_is_named_across_stacks():
    base = side("baseline", [17.0] * 2, backend="neuron")
    cand = side("candidate", [17.0] * 2, backend="hf")
    assert pair_rounds(base, cand, Tolerances(default=0.05), 0.95).not_measured[0] == (
        f"{TKG}: tkg_ms_p50, tkg_roofline_fraction are each stack's own (neuron / hf): shown in each side's benchmark "
        "JSON, not paired")


def test_a_compile_time_needs_the_word_compiled_on_both_sides_whatever_numbers_they_hold():
    base, cand = side("baseline", [17.0] * 2), side("candidate", [17.0] * 2)
    base.engines = {k: {"c": {"load_s": 1.0, "compile": "cache hit", "compile_s": 3.0},
                        "d": {"load_s": 1.0, "compile": "cache hit"}} for k in (1, 2)}
    cand.engines = {k: {"c": {"load_s": 1.0, "compile": "compiled", "compile_s": 4.0},
                        "d": {"load_s": 1.0, "compile": "compiled", "compile_s": 4.0}} for k in (1, 2)}
    pairing = pair_rounds(base, cand, Tolerances(default=0.05), 0.95)
    assert not any(f.metric == "compile_s" for f in pairing.figures) and len(pairing.not_measured) == 2
