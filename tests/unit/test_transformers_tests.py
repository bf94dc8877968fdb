"""nox's ``latest`` session runs the test files whose outcome can depend on the transformers release
(``ci/transformers-tests.txt``, measured by ``ci/transformers_map.py``), not the whole suite a second
time: these tests keep that list honest where no measurement runs (CI), so a new test file that reaches
transformers cannot silently be left to one environment."""

from __future__ import annotations

import importlib.util

import pytest

from tests.unit.conftest import REPO
from tests.unit.test_install import RecordingSession, nox_sessions

pytestmark = pytest.mark.unit

# ci/ is not a package: load the measuring script itself, as test_install loads noxfile.py
_spec = importlib.util.spec_from_file_location("carbon_transformers_map", REPO / "ci" / "transformers_map.py")
assert _spec and _spec.loader
transformers_map = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(transformers_map)

LIST = REPO / "ci" / "transformers-tests.txt"
def test_every_listed_file_exists_and_none_is_listed_twice():
    files = transformers_map.listed(LIST)
    assert files, f"{LIST} lists no test file"
    assert len(files) == len(set(files)), sorted(f for f in files if files.count(f) > 1)
    missing = [f for f in files if not (REPO / f).is_file()]
    assert not missing, f"{LIST} names test files that do not exist: {missing} (re-run ci/transformers_map.py)"


def test_the_latest_session_runs_exactly_the_listed_files_without_benchmarks(tmp_path):
    session = RecordingSession(tmp_path)
    calls: list[list[str]] = []
    session.run = lambda *args, **kw: calls.append([str(a) for a in args])  # type: ignore[method-assign]
    nox_sessions()["latest"](session)
    pytest_calls = [c for c in calls if c and c[0] == "pytest"]
    assert len(pytest_calls) == 1, calls
    argv = pytest_calls[0]
    assert argv[argv.index("-m") + 1] == "not perf"
    assert [a for a in argv if a.startswith("tests/")] == transformers_map.listed(LIST)


def test_a_test_file_that_imports_transformers_code_is_listed_or_excluded_with_a_reason():
    """The static half of the measurement: a file importing transformers (or the harness modules that call
    it) directly surely depends on it; files that reach it through fixtures or subprocesses are found by
    ``ci/transformers_map.py record`` only, which a change to the suite's structure should re-run."""
    covered = set(transformers_map.listed(LIST)) | set(transformers_map.EXCLUDED)
    missing = sorted(set(transformers_map.importing_files()) - covered)
    assert not missing, (f"these test files import transformers code but nox's latest session does not run them: "
                         f"{missing}; re-run `python ci/transformers_map.py record ...` and `analyse` (its docstring), "
                         f"or add them to {LIST.name}")
