"""The three verdicts on real NxDI rounds in CPU mode (issue 37): an A/A check under heavy planted
per-process noise with few rounds ends PASS or INCONCLUSIVE, never FAIL; a TKG slowdown of about 12%
(over the 5% tolerance, under the 30% a PASS rules out) ends FAIL, or PASS naming ``tkg_ms_p50`` as likely
slower, and FAILs with ``--fail-on-likely``.

Each is a whole release-check (3 to 10 minutes on 2 cores): ``extended`` (``nox -s release-extended``), out
of CI's budget. CI keeps tests/release/test_release_check.py's planted slowdown, which must still FAIL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.release.children import run_logged
from harness.release.plan import CheckPlan, Side, perf_command, side_env
from harness.release.plant import plant_process_noise, plant_tkg_slowdown
from harness.release.rounds import read_round
from tests.helpers import run_cli

pytestmark = [pytest.mark.release, pytest.mark.neuron, pytest.mark.slow, pytest.mark.extended]

PERF = ("--no-conformance", "--perf-select", "test_tkg", "--runs", "2")
# Sizes relative to a TKG step as this check's rounds time it (process CPU time, one torch thread: 7.8-8.2 ms
# with --runs 2 on this 2-core box, 2026-11-26), measured by one such round first:
# - heavy noise: every process spins a lognormal amount of CPU in each step (median half a step, log-sigma
#   0.6), several times the 0.10-0.12 spread of a pair's log ratio measured (fixtures/release/noise.json);
# - the slowdown: 12% of a step, over the 5% tolerance and under the 30% a PASS rules out.
NOISE_OF_STEP, NOISE_SIGMA = 0.5, 0.6
SLOWDOWN = 0.12


@pytest.fixture(scope="module")
def source(carbon_session) -> Path:
    source = carbon_session.config.nxdi_source
    if source is None:
        pytest.skip("the verdict checks need --carbon-nxdi-source DIR (an NxDI 2.29 tree: carbon-harness nxdi-source 2.29.0)")
    return source


@pytest.fixture(scope="module")
def step_ms(source, tmp_path_factory) -> float:
    """A TKG step's p50 in one perf round of ``source``, run exactly as the check runs its rounds."""
    out = tmp_path_factory.mktemp("step")
    side = Side("baseline", sys.executable, source)
    plan = CheckPlan(side, side, out, cpu=True, conformance=False, runs=2, perf_select="test_tkg")
    bench = out / "perf-round-1.json"
    rc, text = run_logged(perf_command(plan, side, bench, out / "perf-round-1.xml"), out / "round.log",
                          side_env(plan, side), 1200)
    results, _ = read_round(bench)
    tkg = [r.figures["tkg_ms_p50"] for r in results if "tkg_ms_p50" in r.figures]
    assert rc == 0 and tkg, text[-3000:]
    print(f"\nTKG step: {tkg[0]:.3f} ms")
    return tkg[0]


def release_check(out: Path, baseline: Path, candidate: Path, *args: str) -> tuple[int, dict, str]:
    t0 = time.perf_counter()
    r = run_cli("release-check", "--neuron-cpu", "--baseline-nxdi-source", str(baseline), "--candidate-nxdi-source",
                str(candidate), "--out", str(out), *PERF, *args, timeout=3000)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    last = (r.stderr.strip().splitlines() or [""])[-1]
    print(f"\n{out.name}: exit {r.returncode} in {time.perf_counter() - t0:.0f} s; {last}")
    return r.returncode, verdict, r.stdout + r.stderr


def test_heavy_per_process_noise_with_few_rounds_passes_or_is_inconclusive_never_fails(tmp_path, source, step_ms):
    noisy = plant_process_noise(source, tmp_path / "noisy", NOISE_OF_STEP * step_ms, NOISE_SIGMA)
    rc, verdict, text = release_check(tmp_path / "noisy-aa", noisy, noisy, "--min-rounds", "3", "--max-rounds", "4")
    assert rc in (0, 3), text[-4000:]
    assert verdict["verdict"] == {0: "PASS", 3: "INCONCLUSIVE"}[rc] and verdict["reasons"] == []
    if rc == 3:
        assert verdict["inconclusive"], verdict
        for figure in verdict["inconclusive"]:
            assert figure["pairs"] >= 3 and figure["interval"] is not None, figure
            assert "What would decide it:" in figure["text"], figure["text"]
        assert "### Still open at --max-rounds 4" in (tmp_path / "noisy-aa" / "verdict.md").read_text()


def tkg_named(lines: list[str]) -> bool:
    return any("tkg_ms_p50" in line for line in lines)


def test_a_twelve_percent_tkg_slowdown_fails_or_passes_naming_it_as_likely_slower(tmp_path, source, step_ms):
    planted = plant_tkg_slowdown(source, tmp_path / "planted", SLOWDOWN * step_ms)
    rc, verdict, text = release_check(tmp_path / "tkg-12", source, planted)
    assert rc in (0, 1), text[-4000:]
    if rc == 1:
        assert tkg_named(verdict["reasons"]), verdict["reasons"]
    else:  # passed: a 30% slowdown is ruled out, and the ~12% one is named above the verdict
        assert tkg_named(verdict["warnings"]) and "likely slower by" in verdict["warnings"][0], verdict["warnings"]
        assert (tmp_path / "tkg-12" / "verdict.md").read_text().startswith("**Warning: ")


def test_fail_on_likely_fails_a_twelve_percent_tkg_slowdown(tmp_path, source, step_ms):
    planted = plant_tkg_slowdown(source, tmp_path / "planted", SLOWDOWN * step_ms)
    rc, verdict, text = release_check(tmp_path / "tkg-12-strict", source, planted, "--fail-on-likely")
    assert rc == 1 and verdict["verdict"] == "FAIL", text[-4000:]
    assert tkg_named(verdict["reasons"]), verdict["reasons"]
