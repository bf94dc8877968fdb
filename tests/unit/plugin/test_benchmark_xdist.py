"""pytest-benchmark under pytest-xdist: the workers measure, the controller merges into one
standard pytest-benchmark JSON (and --benchmark-save / --benchmark-compare work on it), and a
passing benchmark test with no result fails the session, named."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.logger import Logger
from pytest_benchmark.utils import safe_dumps

from harness.plugin.xdist import BenchmarkLedger, import_results
from harness.release.children import child_env
from tests.helpers import run_cli, run_pytest

pytestmark = pytest.mark.unit

SUMS = [f"test_bench.py::test_sum[{n}]" for n in range(4)]

BENCH_TESTS = '''
import pytest

@pytest.mark.parametrize("n", range(4))
def test_sum(benchmark, n):
    benchmark.group = "sum"
    benchmark.extra_info.update(n=n, implementation="builtin sum")
    assert benchmark.pedantic(sum, args=(range(1000 * (n + 1)),), rounds=3) == sum(range(1000 * (n + 1)))
'''

FORGOT_TESTS = '''
def test_forgot_to_measure(benchmark):
    assert benchmark.extra_info == {}
'''


def real_metadata(request) -> object:
    """A result of pytest-benchmark's own fixture code (not the session's ``benchmark``, so that
    nothing lands in this suite's own benchmark JSON)."""
    bs = request.config._benchmarksession
    fixture = BenchmarkFixture(request.node, add_stats=lambda _: None, logger=Logger(), warner=None, disabled=False,
                               **bs.options)
    fixture.group = "g"
    fixture.extra_info.update(model="carbon-tiny", tkg_ms_p50=3.09)
    fixture.pedantic(sum, args=(range(100),), rounds=7, iterations=2)
    return fixture.stats


def test_worker_benchmark_round_trips_pytest_benchmarks_own_dict(request):
    original = real_metadata(request)
    rebuilt = import_results(safe_dumps([original.as_dict(include_data=True)]))[0]
    for kwargs in ({}, {"include_data": False}, {"flat": True}, {"stats": False}):
        assert json.loads(safe_dumps(rebuilt.as_dict(**kwargs))) == json.loads(safe_dumps(original.as_dict(**kwargs)))
    assert rebuilt.has_error is False and rebuilt["median"] == original["median"]


def test_ledger_names_benchmarks_that_passed_without_a_result():
    def report(nodeid, mark, outcome="passed", when="call"):
        return type("Report", (), {"nodeid": nodeid, "when": when, "passed": outcome == "passed",
                                   "carbon_benchmark": mark})()

    ledger = BenchmarkLedger()
    for r in (report("a", "measured"), report("b", "measured"), report("c", "none"), report("d", "none", "failed"),
              report("e", "none", when="setup")):
        ledger.record(r)
    assert ledger.missing() == ["c"]  # one process: nothing can be lost on the way
    assert ledger.missing({"a"}) == ["c", "b"]  # xdist: b was measured in a worker but never arrived


def pytest_n(tmp, cache_dir, *args: str) -> subprocess.CompletedProcess:
    return run_pytest("-n", "2", "--rootdir", str(tmp), "--benchmark-storage", f"file://{tmp / 'bench'}", *args,
                      cache_dir=cache_dir, cwd=tmp)


def test_pytest_n_measures_merges_saves_and_compares(tmp_path, carbon_cache_dir):
    """One scenario (two ``pytest -n 2`` sessions), kept in one test so that an outer ``pytest -n``
    does not run its sessions twice on two workers."""
    pytest.importorskip("xdist", reason="needs pytest-xdist: pip install -e '.[test]'")
    (tmp_path / "test_bench.py").write_text(BENCH_TESTS)
    (tmp_path / "test_forgot.py").write_text(FORGOT_TESTS)
    out = tmp_path / "out.json"
    out.write_text("previous run")

    r = pytest_n(tmp_path, carbon_cache_dir, "test_bench.py", "test_forgot.py", "--benchmark-json", str(out),
                 "--benchmark-save=xd")
    output = r.stdout + r.stderr
    assert "automatically disabled" not in output
    # the test that never measured passed, but the session fails, naming it
    assert r.returncode == 1 and "5 passed" in output, output
    assert ("carbon-harness: 1 benchmark(s) passed but recorded no result: test_forgot.py::test_forgot_to_measure"
            in output)
    # every figure, in one standard pytest-benchmark JSON, statistics recomputed from every round
    data = json.loads(out.read_text())
    assert sorted(b["fullname"] for b in data["benchmarks"]) == SUMS
    for bench in data["benchmarks"]:
        stats = bench["stats"]
        assert stats["rounds"] == len(stats["data"]) == 3 and stats["median"] == statistics.median(stats["data"])
        assert bench["extra_info"]["implementation"] == "builtin sum" and bench["group"] == "sum"
    workers = data["carbon_harness"]["xdist_workers"]  # the run manifest, at the top level
    assert set(workers) == {"gw0", "gw1"}
    # each worker's torch runs the CPU model on one thread (or what OMP_NUM_THREADS says), not on every CPU
    omp = child_env().get("OMP_NUM_THREADS")
    share = int(omp) if omp else 1
    assert {w: info["torch_threads"] for w, info in workers.items()} == {"gw0": share, "gw1": share}
    assert "Name (time in" in r.stdout  # pytest-benchmark's own table, on the merged results
    saved = list((tmp_path / "bench").rglob("*_xd.json"))
    assert len(saved) == 1
    assert sorted(b["fullname"] for b in json.loads(saved[0].read_text())["benchmarks"]) == SUMS

    # read back by pytest-benchmark and by the harness
    env = child_env()
    compared = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out)], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, env=env)
    assert compared.returncode == 0 and "test_sum[3]" in compared.stdout, compared.stdout + compared.stderr
    report = run_cli("report", str(out), env=env)
    assert report.returncode == 0, report.stderr

    # --benchmark-compare under -n compares the merged results with the saved run; --benchmark-only
    # (which pytest-benchmark refuses with xdist) runs only the benchmarks
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    r = pytest_n(tmp_path, carbon_cache_dir, "test_bench.py", "test_plain.py", "--benchmark-compare",
                 "--benchmark-compare-fail=median:100000%", "--benchmark-only")
    output = r.stdout + r.stderr
    assert r.returncode == 0 and "4 passed, 1 skipped" in output, output
    assert "Comparing against benchmarks from" in output and "test_sum[3] (0001_xd)" in output
