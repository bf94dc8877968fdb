"""The three verdicts on real NxDI rounds in CPU mode (issue 37): an A/A check under heavy planted
per-process noise with few rounds ends PASS or INCONCLUSIVE, never FAIL; a TKG slowdown of about 12%
(over the 5% tolerance, under the 30% a PASS rules out) ends FAIL, or PASS naming ``tkg_ms_p50`` as likely
slower, and FAILs with ``--fail-on-likely``.

Each is a whole release-check (3 to 10 minutes on 2 cores): ``extended`` (``nox -s release-extended``), out
of CI's budget. CI keeps tests/release/test_release_check.py's planted slowdown, which must still FAIL.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.release.plant import plant_process_noise, plant_tkg_slowdown
from tests.helpers import run_cli

pytestmark = [pytest.mark.release, pytest.mark.neuron, pytest.mark.slow, pytest.mark.extended]

PERF = ("--no-conformance", "--perf-select", "test_tkg", "--runs", "2")
# Heavy noise: every process spins a lognormal amount of CPU in each TKG step (median 8 ms, log-sigma 0.6, on a
# ~18 ms step): a pair's log ratio then spreads by about 0.3, three times the 0.10-0.12 measured
# (fixtures/release/noise.json), where the review found 18-figure checks "unresolved" 61-81% of the time.
NOISE_MS, NOISE_SIGMA = 8.0, 0.6
# About 12% of a TKG step (17-20 ms of process CPU time per step in CPU mode on this box).
TWELVE_PERCENT_MS = 2.2


@pytest.fixture(scope="module")
def source(carbon_session) -> Path:
    source = carbon_session.config.nxdi_source
    if source is None:
        pytest.skip("the verdict checks need --carbon-nxdi-source DIR (an NxDI 2.29 tree, as ../shared/vendor)")
    return source


def release_check(out: Path, baseline: Path, candidate: Path, *args: str) -> tuple[int, dict, str]:
    t0 = time.perf_counter()
    r = run_cli("release-check", "--neuron-cpu", "--baseline-nxdi-source", str(baseline), "--candidate-nxdi-source",
                str(candidate), "--out", str(out), *PERF, *args, timeout=3000)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    last = (r.stderr.strip().splitlines() or [""])[-1]
    print(f"\n{out.name}: exit {r.returncode} in {time.perf_counter() - t0:.0f} s; {last}")
    return r.returncode, verdict, r.stdout + r.stderr


def test_heavy_per_process_noise_with_few_rounds_passes_or_is_inconclusive_never_fails(tmp_path, source):
    noisy = plant_process_noise(source, tmp_path / "noisy", NOISE_MS, NOISE_SIGMA)
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


def test_a_twelve_percent_tkg_slowdown_fails_or_passes_naming_it_as_likely_slower(tmp_path, source):
    planted = plant_tkg_slowdown(source, tmp_path / "planted", TWELVE_PERCENT_MS)
    rc, verdict, text = release_check(tmp_path / "tkg-12", source, planted)
    assert rc in (0, 1), text[-4000:]
    if rc == 1:
        assert tkg_named(verdict["reasons"]), verdict["reasons"]
    else:  # passed: a 30% slowdown is ruled out, and the ~12% one is named above the verdict
        assert tkg_named(verdict["warnings"]) and "likely slower by" in verdict["warnings"][0], verdict["warnings"]
        assert (tmp_path / "tkg-12" / "verdict.md").read_text().startswith("**Warning: ")


def test_fail_on_likely_fails_a_twelve_percent_tkg_slowdown(tmp_path, source):
    planted = plant_tkg_slowdown(source, tmp_path / "planted", TWELVE_PERCENT_MS)
    rc, verdict, text = release_check(tmp_path / "tkg-12-strict", source, planted, "--fail-on-likely")
    assert rc == 1 and verdict["verdict"] == "FAIL", text[-4000:]
    assert tkg_named(verdict["reasons"]), verdict["reasons"]
