"""``carbon-harness compare`` on files from ``--benchmark-save``, which hold pytest-benchmark's
``stats`` but no per-round ``data`` unless ``--benchmark-save-data`` is given: every figure would
have no interval and be shown as informational, so a real slowdown passed with exit 0. Two real
pytest-benchmark runs of one tiny benchmark, the second slowed by a delay planted in the
benchmarked function, each saved (``--benchmark-save``) and written (``--benchmark-json``, which
keeps the rounds) at once: the saved pair stops compare with one line, the written pair fails it."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers import run_cli, run_pytest

pytestmark = pytest.mark.unit

# A decode step as test_tkg records it: pytest-benchmark rounds, and tkg_ms_p50 their median in extra_info.
BENCHMARK = '''
import time

from harness.analysis.figures import latency_figures
from harness.plugin.recording import round_ms

DELAY_S = {step_ms} / 1000.0


def step():
    time.sleep(DELAY_S)


def test_tkg(benchmark):
    benchmark.pedantic(step, rounds=9, warmup_rounds=1)
    benchmark.extra_info.update(latency_figures("tkg", round_ms(benchmark)))
'''


@pytest.fixture(scope="module")
def saved_and_written_runs(tmp_path_factory, carbon_cache_dir):
    """{side: (saved file, written file)} for base (25 ms steps) and new (35 ms: 40% slower)."""
    root = tmp_path_factory.mktemp("saved-runs")
    storage = root / "storage"
    out = {}
    for side, step_ms in (("base", "25"), ("new", "35")):
        written = root / f"{side}.json"
        (root / "test_step.py").write_text(BENCHMARK.format(step_ms=step_ms))
        shutil.rmtree(root / "__pycache__", ignore_errors=True)  # same size, maybe the same second: no stale .pyc
        r = run_pytest("test_step.py", f"--benchmark-save={side}", f"--benchmark-storage=file://{storage}",
                       f"--benchmark-json={written}", cache_dir=carbon_cache_dir, cwd=root)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr
        saved = sorted(storage.glob(f"*/*_{side}.json"))
        assert len(saved) == 1, sorted(storage.rglob("*"))
        out[side] = (saved[0], written)
    return out


def test_saved_files_without_rounds_stop_compare_naming_benchmark_save_data(saved_and_written_runs):
    (base, _), (new, _) = saved_and_written_runs["base"], saved_and_written_runs["new"]
    r = run_cli("compare", str(base), str(new), "--max-regression", "10%")
    assert r.returncode == 2, r.stdout + r.stderr
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith(f"carbon-harness compare: error: {base}: 1 of 1 benchmark(s) timed rounds but kept none")
    assert "test_tkg" in errors[0] and "9 rounds" in errors[0] and "--benchmark-save-data" in errors[0]
    assert "regression(s)" not in r.stdout  # no verdict is printed from files that cannot give one


def test_the_same_runs_written_with_their_rounds_fail_on_the_slowdown(saved_and_written_runs):
    """The control: the rounds the saved files dropped are what lets compare call the regression."""
    (_, base), (_, new) = saved_and_written_runs["base"], saved_and_written_runs["new"]
    r = run_cli("compare", str(base), str(new), "--max-regression", "10%")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION test_step.py::test_tkg tkg_ms_p50" in r.stderr
