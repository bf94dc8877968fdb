"""Every run says what it gated, and ``--carbon-require-gates`` fails one that gated nothing
(issue 17 item 4), in real pytest subprocesses: a plain run, one under pytest-xdist (the figures
are merged on the controller), and runs whose thresholds match nothing here."""

from __future__ import annotations

import json
import re

import pytest

from harness.analysis.gates import figure_outcomes, not_gated_reason, tally_gates
from tests.unit.conftest import run_pytest

pytestmark = pytest.mark.unit

TALLY = re.compile(r"carbon-harness: gates: (\d+) figures? gated \((\d+) passed, (\d+) failed\); "
                   r"(\d+) recorded but not gated(?: \((.*)\))?$", re.M)


def tally_of(stdout: str) -> tuple[int, int, int, int, str]:
    found = TALLY.findall(stdout)
    assert len(found) == 1, stdout[-3000:]
    gated, passed, failed, ungated, reasons = found[0]
    return int(gated), int(passed), int(failed), int(ungated), reasons


def test_reasons_are_short_and_figures_come_from_the_gate_record():
    assert not_gated_reason("not gated: speed is gated when -m selects perf (pytest -m perf)") == "not -m perf"
    assert not_gated_reason("not gated: only 1 round (a CPU runs one)") == "only 1 round"
    info = {"tkg_ms_p50": 2.0, "load_s": 1.0, "gate": {"tkg_ms_p50": {"passed": False}},
            "not_gated": {"tkg_ms_p99": "no threshold"}}
    assert figure_outcomes(info) == [("tkg_ms_p50", "failed"), ("tkg_ms_p99", "no threshold")]  # load_s: context
    assert figure_outcomes({"dna_encode_speedup": 40.0, "chars": 3,
                            "gate": "not gated: speed is gated when -m selects perf"}) == [
        ("dna_encode_speedup", "not -m perf")]
    assert figure_outcomes({"chars_per_s": 1.0}) == []  # never went near a gate
    t = tally_gates([info, {"gate": {"a": {"passed": True}}, "not_gated": {"b": "only 1 round"}}])
    assert (t.passed, t.failed, t.not_gated) == (1, 1, (("no threshold", 1), ("only 1 round", 1)))
    assert t.line() == ("carbon-harness: gates: 2 figures gated (1 passed, 1 failed); 2 recorded but not gated "
                        "(1 no threshold, 1 only 1 round)")


def test_the_run_ends_with_what_it_gated(gated_run):
    r, data, _ = gated_run
    gated, passed, failed, ungated, reasons = tally_of(r.stdout)
    # the impossible tkg_ms_p50 bound gates test_tkg's and test_e2e's figure; everything else has none
    assert (gated, passed, failed) == (2, 0, 2)
    recorded = sum(len(b["extra_info"]["not_gated"]) for b in data["benchmarks"])
    assert ungated == recorded > 10 and reasons == f"{recorded} no threshold"
    # ... as its last line, after pytest's summary (issue 32, item 5: it came before the skip list)
    last = [line for line in r.stdout.splitlines() if line.strip()][-1]
    assert TALLY.match(last), r.stdout[-2000:]


def test_a_run_that_recorded_no_figure_says_nothing_about_gates(tmp_path, carbon_cache_dir):
    """``-m dna`` measures nothing a gate could apply to: "0 figures gated ... 0 recorded" is noise there."""
    r = run_pytest("-m", "dna", "tests/dna/test_prompt_suite.py", "-p", "no:randomly", cache_dir=carbon_cache_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "carbon-harness: gates:" not in r.stdout, r.stdout[-2000:]


def _latency_run(tmp_path, cache_dir, thresholds: dict | None, *extra: str):
    args = ["-m", "perf", "tests/perf/test_latency.py", "-p", "no:randomly", "--carbon-shape=smoke", "--carbon-runs=2"]
    if thresholds is not None:
        path = tmp_path / "thresholds.json"
        path.write_text(json.dumps(thresholds))
        args.append(f"--carbon-thresholds={path}")
    return run_pytest(*args, *extra, cache_dir=cache_dir)


LOOSE_TKG = {"schema": 1, "thresholds": [
    {"hardware": "*", "model": "carbon-tiny", "shape": "smoke", "metric": "tkg_ms_p50", "max": 1e6}]}


def test_under_xdist_the_controller_tallies_every_workers_figures(tmp_path, carbon_cache_dir):
    r = _latency_run(tmp_path, carbon_cache_dir, LOOSE_TKG, "-n", "2", "-k", "test_tkg or test_cte")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 passed" in r.stdout
    gated, passed, failed, ungated, reasons = tally_of(r.stdout)
    # test_tkg's tkg_ms_p50 gated; test_cte's cte p50 / p99 and test_tkg's tkg p99 / roofline fraction not
    assert (gated, passed, failed, ungated, reasons) == (1, 1, 0, 4, "4 no threshold")


def test_require_gates_fails_a_run_that_gated_nothing(tmp_path, carbon_cache_dir):
    # a hardware profile no threshold names: every figure is recorded, none gated
    r = _latency_run(tmp_path, carbon_cache_dir, None, "-k", "test_cte", "--carbon-hardware=h200",
                     "--carbon-require-gates")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed" in r.stdout
    assert tally_of(r.stdout)[:4] == (0, 0, 0, 2)
    lines = [line for line in r.stdout.splitlines() if "--carbon-require-gates" in line]
    assert lines == ["carbon-harness: --carbon-require-gates: this run gated no figure (2 recorded but not gated): "
                     "add thresholds for hardware 'h200' (fixtures/thresholds, or --carbon-thresholds FILE) and run "
                     "the benchmarks (-m perf, without --benchmark-disable)"]
    # the same run with a threshold that applies passes
    r = _latency_run(tmp_path, carbon_cache_dir, {"schema": 1, "thresholds": [
        {"hardware": "*", "model": "carbon-tiny", "shape": "smoke", "metric": "cte_ms_p50", "max": 1e6}]},
        "-k", "test_cte", "--carbon-require-gates")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert tally_of(r.stdout)[:3] == (1, 1, 0)


def test_the_cpu_main_job_gates_the_embedded_defaults_latency(tmp_path, carbon_cache_dir):
    """The shipped cpu thresholds (fixtures/thresholds/cpu.json) gate carbon-tiny's CTE and TKG on a CPU."""
    r = _latency_run(tmp_path, carbon_cache_dir, None, "-k", "test_cte or test_tkg", "--carbon-require-gates",
                     "--carbon-hardware=cpu")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    gated, passed, failed, _, _ = tally_of(r.stdout)
    assert gated >= 2 and passed == gated and failed == 0
