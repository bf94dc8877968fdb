"""The perf rounds of a release check (``harness.release.rounds``) driven whole: each round a real child
process started from the real perf command line, whose "interpreter" is a tiny real script
(tests/unit/release/tiny_perf.py) writing pytest-benchmark-shaped JSON and JUnit XML as a real round
does, in milliseconds instead of the 20 s of an NxDI round. What is under test is the rounds' own
logic: the A B / B A order, what a round that exits non-zero leaves, and when the pairs stop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import SideReport
from harness.core.sequential import Design
from harness.release.plan import CheckPlan, Side
from harness.release.rounds import perf_rounds

pytestmark = pytest.mark.unit

TINY = Path(__file__).with_name("tiny_perf.py")
STEADY = {"default_ms": 17.0}
NOISY = {"tkg_ms": {str(k): ms for k, ms in enumerate([25.0, 12.0, 24.0, 13.0, 26.0, 11.0, 25.0, 12.0], 1)}}


class Check:
    """Both sides' specs (tiny_perf.py's), run as a release check runs its perf rounds."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.log = tmp_path / "order.log"
        self.python = tmp_path / "python"  # the sides' "interpreter": the tiny perf script
        self.python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{TINY}" "$@"\n')
        self.python.chmod(0o755)
        self.progress: list[str] = []
        self.focused: list[str | None] = []

    def side(self, name: str, spec: dict) -> Side:
        path = self.tmp / f"{name}-spec.json"
        path.write_text(json.dumps({"side": name, **spec}))
        return Side(name, str(self.python), backend="hf",
                    env=(("TINY_PERF_SPEC", str(path)), ("TINY_PERF_LOG", str(self.log))))

    def run(self, design: Design, baseline: dict = STEADY, candidate: dict = STEADY) -> dict[str, SideReport]:
        plan = CheckPlan(self.side("baseline", baseline), self.side("candidate", candidate), self.tmp / "out",
                         design=design, conformance=False, reference=False)
        reports = {name: SideReport(name, backend="hf") for name in ("baseline", "candidate")}
        perf_rounds(plan, reports, Tolerances(default=0.05), 0.95, 60.0, self.progress.append, self.focused.append)
        return reports

    def order(self) -> list[str]:
        return self.log.read_text().splitlines()


@pytest.fixture
def check(tmp_path) -> Check:
    return Check(tmp_path)


def test_pairs_alternate_a_b_then_b_a_each_round_a_fresh_process(check):
    reports = check.run(Design(min_pairs=4, max_pairs=4))
    assert check.order() == ["baseline 1", "candidate 1", "candidate 2", "baseline 2",
                             "baseline 3", "candidate 3", "candidate 4", "baseline 4"]
    assert check.focused == ["baseline", "candidate", "candidate", "baseline",
                             "baseline", "candidate", "candidate", "baseline", None]
    for name in ("baseline", "candidate"):
        assert reports[name].ran == [1, 2, 3, 4] and sorted(reports[name].rounds) == [1, 2, 3, 4]
        assert (check.tmp / "out" / name / "perf-round-4.log").is_file()


def test_a_round_that_exits_non_zero_keeps_its_results_and_records_why(check):
    reports = check.run(Design(min_pairs=4, max_pairs=4), candidate={**STEADY, "exit": {"2": 1}})
    cand = reports["candidate"]
    assert sorted(cand.rounds) == [1, 2, 3, 4]  # the round's results are kept: its pair stands
    assert list(cand.round_errors) == [2]
    assert cand.round_errors[2] == "exit 1: AssertionError: planted failure of this round"
    assert cand.round_outcomes[2]["tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke]"].outcome == "failed"
    assert reports["baseline"].round_errors == {}


def test_a_round_that_wrote_nothing_is_recorded_with_its_error(check):
    reports = check.run(Design(min_pairs=4, max_pairs=4), baseline={**STEADY, "results": {"1": False}})
    base = reports["baseline"]
    assert base.ran == [1, 2, 3, 4] and sorted(base.rounds) == [2, 3, 4]
    assert base.round_errors[1].startswith("exit 0: ")


def test_decided_figures_stop_the_pairs_at_the_first_look_never_before_it(check):
    reports = check.run(Design(min_pairs=4, max_pairs=8))
    assert reports["candidate"].ran == [1, 2, 3, 4]
    assert check.progress[-1] == "every gated figure decided after 4 pairs"
    assert not any("decided after" in line for line in check.progress[:-1])


def test_the_first_look_waits_for_the_minimum_even_with_nothing_gated(check):
    """No figure is gated (the benchmark timed no median): nothing is open after the first pair, and the
    check still runs its minimum of pairs before it says anything is decided."""
    reports = check.run(Design(min_pairs=4, max_pairs=8), {**STEADY, "gated": False}, {**STEADY, "gated": False})
    assert reports["baseline"].ran == [1, 2, 3, 4] and reports["candidate"].ran == [1, 2, 3, 4]
    assert check.progress[-1] == "every gated figure decided after 4 pairs"


def test_an_open_figure_adds_pairs_up_to_the_cap(check):
    reports = check.run(Design(min_pairs=4, max_pairs=8), candidate=NOISY)
    assert reports["candidate"].ran == list(range(1, 9))
    assert "still open after 4 pairs: tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke] tkg_ms_p50" in \
        check.progress
    assert not any(line.startswith("still open after 8") for line in check.progress)


def test_a_candidate_round_that_left_nothing_stops_the_pairs_at_once(check):
    reports = check.run(Design(min_pairs=4, max_pairs=8), candidate={**STEADY, "results": {"2": False}})
    assert reports["candidate"].ran == [1, 2] and reports["baseline"].ran == [1, 2]
    assert check.progress[-1].startswith("stopping after 2 pairs: the candidate's perf round 2 produced no results")


# read_round on a real run's file (fixtures/history/real), its engines as the manifest lists them (issue 57)
def test_a_rounds_file_is_read_with_each_engines_load_compile_and_config_and_a_bad_one_as_nothing(tmp_path):
    import json

    from harness.release.rounds import read_round
    from tests.helpers import REPO

    data = json.loads((REPO / "fixtures" / "history" / "real" / "run-04.json").read_text())
    data["carbon_harness"]["engines"] = [
        {"model": "carbon-tiny", "shape": "smoke", "load_s": 9, "compile_s": 2.5, "compile": "cached",
         "config": {"tp": 1}},
        {"model": "carbon-tiny", "shape": "long", "load_s": "n/a", "compile": None, "config": "x"},
        {"model": "draft", "shape": "smoke", "role": "draft", "load_s": 1.0},
        "not an engine",
    ]
    path = tmp_path / "perf-round-1.json"
    path.write_text(json.dumps(data))
    results, engines = read_round(path)
    assert len(results) == 3
    assert engines == {"carbon-tiny/smoke": {"load_s": 9.0, "compile_s": 2.5, "compile": "cached", "config": {"tp": 1}},
                       "carbon-tiny/long": {}}
    assert read_round(tmp_path / "missing.json") == ([], {})
    data["carbon_harness"]["schema"] = 999
    path.write_text(json.dumps(data))
    assert read_round(path) == ([], {})  # a file this harness cannot read: nothing, the round's error says why


def test_the_rounds_focus_pauses_the_other_server_and_warms_only_a_server_of_its_own(monkeypatch):
    import harness.release.served as served
    from harness.release.rounds import focus_on

    assert focus_on({})("baseline") is None
    calls, warmed = [], []
    monkeypatch.setattr(served, "focus", lambda servers, name: calls.append((sorted(servers), name)))
    go = focus_on({"baseline": object(), "candidate": object()}, warmed.append)
    go("baseline")
    go("other")
    go(None)
    assert calls == [(["baseline", "candidate"], "baseline"), (["baseline", "candidate"], "other"),
                     (["baseline", "candidate"], None)]
    assert warmed == ["baseline"]
    focus_on({"baseline": object()})("baseline")  # no warm-up given: nothing to send
    assert calls[-1] == (["baseline"], "baseline")
