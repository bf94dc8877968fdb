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
    assert found.notes == ["the baseline's server work was not counted: the server's /metrics carry no vllm:x"]
