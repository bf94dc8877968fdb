"""The mutation check of the gate's core (tests/mutation/run.py, its mutants in tests/mutation/mutants.toml):
every listed mutant of the sequential rule, the pairing, the perf rounds, the verdicts and the issue-37
survivors must make its named tests fail, so that a change to the rule no test notices cannot land."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.release.children import child_env
from tests.helpers import REPO
from tests.mutation.run import MutantError, load

pytestmark = pytest.mark.unit

# The modules the check must cover (issue 37, item 5); analysis/contract.py joins once its mutants are listed.
COVERED = ("harness/core/sequential.py", "harness/analysis/pairing.py", "harness/release/rounds.py",
           "harness/core/neuron_cores.py", "harness/release/cores.py", "harness/analysis/crossstack.py",
           "harness/core/neuron_visibility.py", "harness/analysis/threeway.py",  # these five: issues 46 to 48
           "harness/analysis/side_checks.py", "harness/analysis/side_rows.py", "harness/analysis/work_section.py",
           "harness/analysis/contract.py", "harness/backends/work_counter.py", "harness/core/process_environment.py",
           "harness/release/plan.py")  # these seven: issue 57


def test_every_mutant_matches_the_code_and_the_gates_core_is_covered():
    """Fast: each mutant's piece is found exactly once in its file (else the list went stale: the error
    names it), and each module of the gate's core has mutants."""
    mutants = load()
    files = {m.file for m in mutants}
    assert set(COVERED) <= files, sorted(set(COVERED) - files)
    assert all(m.tests and m.why for m in mutants)


def test_a_stale_mutant_is_refused_naming_it(tmp_path):
    stale = tmp_path / "mutants.toml"
    stale.write_text('mutants = [\n  {file = "harness/core/sequential.py", find = "no such code", replace = "x", '
                     'test = "tests/unit/core/test_sequential.py", why = "stale"},\n]\n')
    with pytest.raises(MutantError, match="'no such code' is found 0 times, not once"):
        load(stale)


@pytest.mark.slow
def test_every_listed_mutant_is_killed_by_its_tests(tmp_path):
    """Slow: 40 s on this 2-core box at load average ~1.5, 90 s at ~8 (about 25 s of CPU; each mutant's tests
    run in one process with pytest.main, about 0.5 s each, after a control run of them all on the unmutated code).
    Kept in the suite, not a nox session: it is what stops a change to the gate's rule that no test sees."""
    out = tmp_path / "mutation.json"
    r = subprocess.run([sys.executable, "-m", "tests.mutation.run", "--json", str(out)], cwd=REPO, env=child_env(),
                       capture_output=True, text=True, timeout=900)
    assert out.is_file(), r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert r.returncode == 0 and not summary["survived"] and not summary["errors"], (
        "\n".join(summary["survived"] + summary["errors"]) or r.stderr[-3000:])
    assert summary["killed"] == summary["mutants"] == len(load())
