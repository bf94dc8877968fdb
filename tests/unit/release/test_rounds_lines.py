"""What a release check's perf rounds tell the user (``harness.release.rounds``), driven whole as
test_rounds.py drives them (each round a real child process of tests/unit/release/tiny_perf.py): each pair's
progress line, the first round's outcomes as the perf tests' outcomes, a round pytest stopped before its tests
named as such, and a round that hangs stopped at the timeout instead of holding the check forever."""

from __future__ import annotations

import os
import re
import time

import pytest

from harness.analysis.compare import Tolerances
from harness.analysis.pairing import SideReport
from harness.core.sequential import Design
from harness.release.plan import CheckPlan, Side
from harness.release.rounds import perf_rounds
from tests.unit.release.test_rounds import STEADY, TINY, Check  # noqa: F401 (TINY: the script Check runs)

pytestmark = pytest.mark.unit

TKG = "tests/perf/test_latency.py::test_tkg[carbon-tiny-smoke]"
ONE_LOOK = Design(min_pairs=4, max_pairs=4)


@pytest.fixture
def check(tmp_path) -> Check:
    return Check(tmp_path)


def test_each_pair_says_what_each_sides_round_did(check):
    t0 = time.perf_counter()
    check.run(ONE_LOOK, candidate={**STEADY, "exit": {"3": 1}})
    elapsed = time.perf_counter() - t0
    lines = [line for line in check.progress if line.startswith("pair ")]
    assert len(lines) == 4
    one = re.fullmatch(r"pair 1 \(at most 4\): baseline: exit 0, 1 benchmarks, (\d+) s; "
                       r"candidate: exit 0, 1 benchmarks, (\d+) s", lines[0])
    assert one, lines[0]
    assert all(int(s) <= elapsed + 1 for s in one.groups())  # each round's own seconds, within the whole run's
    assert re.fullmatch(r"pair 3 \(at most 4\): baseline: exit 0, 1 benchmarks, \d+ s; "
                        r"candidate: exit 1, 1 benchmarks, \d+ s", lines[2]), lines[2]


def test_the_perf_tests_outcomes_are_the_first_rounds(check):
    reports = check.run(ONE_LOOK, baseline={**STEADY, "exit": {"1": 1}}, candidate={**STEADY, "exit": {"2": 1}})
    assert {t: o.outcome for t, o in reports["baseline"].outcomes.items()} == {f"{TKG} (perf)": "failed"}
    assert {t: o.outcome for t, o in reports["candidate"].outcomes.items()} == {f"{TKG} (perf)": "passed"}
    assert reports["candidate"].round_outcomes[2][TKG].outcome == "failed"  # each round's own, kept apart


def test_a_round_pytest_stopped_before_its_tests_is_named_so(check):
    reports = check.run(ONE_LOOK, candidate={**STEADY, "exit": {"2": 4}})
    assert reports["candidate"].round_errors == {
        2: "perf round 2 stopped (usage error, exit 4): AssertionError: planted failure of this round"}


def test_a_round_that_hangs_is_stopped_at_the_timeout(tmp_path):
    """Both sides' "interpreter" blocks on a FIFO nobody writes to (no sleep): each round is ended by the
    timeout the check was given, recorded as interrupted, and the lost candidate round stops the pairs."""
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec cat "{fifo}"\n')
    python.chmod(0o755)
    plan = CheckPlan(Side("baseline", str(python), backend="hf"), Side("candidate", str(python), backend="hf"),
                     tmp_path / "out", design=ONE_LOOK, conformance=False, reference=False)
    reports = {name: SideReport(name, backend="hf") for name in ("baseline", "candidate")}
    progress: list[str] = []
    perf_rounds(plan, reports, Tolerances(default=0.05), 0.95, 0.5, progress.append)
    for name in ("baseline", "candidate"):
        assert reports[name].ran == [1]
        assert reports[name].round_errors[1].startswith("perf round 1 stopped (interrupted, exit 2): timed out "
                                                        "after 0 s"), reports[name].round_errors
    assert progress[-1].startswith("stopping after 1 pairs: ")


def test_every_open_figure_is_named_after_each_look(check):
    from tests.unit.release.test_rounds import NOISY

    check.run(Design(min_pairs=4, max_pairs=5), candidate={**NOISY, "long": True}, baseline={**STEADY, "long": True})
    assert "still open after 4 pairs: " + ", ".join(f"{TKG.replace('smoke', shape)} tkg_ms_p50"
                                                     for shape in ("long", "smoke")) in check.progress, check.progress
