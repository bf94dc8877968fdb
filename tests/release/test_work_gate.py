"""The host-work gate (``release-check --gate-work PCT``) on whole release checks: transformers against itself
(an A/A: the work per step reads no difference, and the check passes) and against a candidate whose Llama
decoder makes ~10% more Python calls per step (a ``sitecustomize`` on its ``PYTHONPATH``, no sleep: host work a
timing gate on a noisy CPU seldom sees at 10%), which fails at the first look, naming the planted function.
Extended (``nox -s release-extended``): about two minutes each here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.release.plant import plant_host_work, plant_step_sleep, plant_step_spin
from tests.helpers import run_cli

pytestmark = [pytest.mark.release, pytest.mark.slow, pytest.mark.extended]

GATED = ("--backend", "hf", "--baseline-python", sys.executable, "--candidate-python", sys.executable,
         "--no-conformance", "--perf-select", "test_tkg", "--runs", "2", "--rounds", "4", "--gate-work", "2%")
PLANTED_CALLS = 70  # ~10% of a carbon-tiny hf decode step's ~690 Python calls


def check(out: Path, *args: str, gated: tuple[str, ...] = GATED) -> tuple[int, dict, str]:
    r = run_cli("release-check", "--out", str(out), *gated, *args, timeout=1500)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r.returncode, verdict, r.stdout + r.stderr


def test_an_a_a_reads_no_work_difference_and_passes_the_gate(tmp_path):
    rc, verdict, output = check(tmp_path / "aa")
    assert rc in (0, 3), output[-3000:]  # the timing gate may stay open on a loaded box; the work gate may not fail
    work = verdict["work"]
    assert work["reasons"] == [] and work["notes"] == [], work
    tkg = next(r for r in work["benchmarks"] if r["benchmark"].endswith("test_tkg[carbon-tiny-smoke]"))
    assert tkg["calls"][0] == tkg["calls"][1] and tkg["ops"][0] == tkg["ops"][1] and tkg["changes"] == []
    assert tkg["rounds"] == [4, 4]


def test_a_planted_ten_percent_host_work_fails_at_the_first_look_naming_it(tmp_path):
    planted = plant_host_work(tmp_path / "plant", PLANTED_CALLS)
    rc, verdict, output = check(tmp_path / "planted", "--candidate-env", f"PYTHONPATH={planted}")
    assert rc == 1, output[-3000:]
    reasons = [r for r in verdict["reasons"] if "--gate-work 2%" in r]
    assert reasons and "sitecustomize._patch.<locals>._planted_host_work" in reasons[0], verdict["reasons"]
    tkg = next(r for r in verdict["work"]["benchmarks"] if r["benchmark"].endswith("test_tkg[carbon-tiny-smoke]"))
    assert f"+{PLANTED_CALLS} Python calls/step in sitecustomize._patch.<locals>._planted_host_work" in tkg["changes"]
    assert verdict["rounds"] == 4  # the first look
    md = (tmp_path / "planted" / "verdict.md").read_text()
    assert "### Work per step" in md and "_planted_host_work" in md


def test_a_planted_spin_fails_on_timing_and_the_work_is_the_same(tmp_path):
    """~2.7 ms of CPU per step in one C call (the hf checks time in process CPU time, which a sleep does not
    spend): the timing gate fails it, and the work section says the work is the same, slower."""
    planted = plant_step_spin(tmp_path / "plant", 200_000)
    rc, verdict, output = check(tmp_path / "spin", "--candidate-env", f"PYTHONPATH={planted}")
    assert rc == 1, output[-3000:]
    assert any("tkg_ms_p50" in r for r in verdict["reasons"]) and not any("--gate-work" in r for r in verdict["reasons"])
    notes = verdict["work"]["notes"]
    assert notes and "failed on timing with the same work per step" in notes[0] and "same work, slower" in notes[0]


def test_a_planted_two_ms_sleep_fails_on_wall_time_and_the_work_is_the_same(tmp_path):
    """A 2 ms sleep before every decode step (issue 49): spent in wall time only, so ``--timer wall`` times the
    rounds; the timing gate fails it (sequentially: wall time on a loaded box read +32% [-15%, +106%] at 4 pairs
    here, too wide for one look), and the work section says the work is the same (a few calls more a step, the
    wrapper and its sleep, far under the slowdown), slower."""
    planted = plant_step_sleep(tmp_path / "plant", 2.0)
    sequential = tuple(a for a in GATED if a not in ("--rounds", "4"))
    rc, verdict, output = check(tmp_path / "sleep", "--timer", "wall", "--candidate-env", f"PYTHONPATH={planted}",
                                gated=sequential)
    assert rc == 1, output[-3000:]
    assert "wall time" in verdict["mode"], verdict["mode"]
    assert any("tkg_ms_p50" in r for r in verdict["reasons"]) and not any("--gate-work" in r for r in verdict["reasons"])
    notes = verdict["work"]["notes"]
    assert notes and "failed on timing with the same work per step" in notes[0] and "same work, slower" in notes[0]
    tkg = next(r for r in verdict["work"]["benchmarks"] if r["benchmark"].endswith("test_tkg[carbon-tiny-smoke]"))
    assert tkg["ops"][0] == tkg["ops"][1] and abs(tkg["calls"][1] - tkg["calls"][0]) < 0.02 * tkg["calls"][0], tkg


def test_twenty_processes_count_alike_and_a_planted_ten_percent_shows_in_each(tmp_path, carbon_tiny_checkpoint):
    """The gate's premise, on independent processes (not one run's subsets): 20 fresh processes count the same
    TKG step exactly alike (an A/A of any two reads no difference), and 20 with the ~10% host-work plant each read
    the planted calls, beyond --gate-work 2% (caught by the gate in every one of them)."""
    from harness.core.work import growth
    from tests.unit.backends.test_work_counter import counted

    plain = [counted(carbon_tiny_checkpoint) for _ in range(20)]
    assert len({(w.python_calls, w.aten_ops, w.bytes_allocated) for w in plain}) == 1
    plant = str(plant_host_work(tmp_path / "plant", PLANTED_CALLS))
    planted = [counted(carbon_tiny_checkpoint, PYTHONPATH=plant) for _ in range(20)]
    grown = [growth(plain[0].python_calls, w.python_calls) for w in planted]
    assert all(g is not None and g > 0.02 for g in grown), grown
    extra = {w.python_calls - plain[0].python_calls for w in planted}  # the plant's calls and its wrapper's
    assert len(extra) == 1 and min(extra) >= PLANTED_CALLS, extra


NXDI_PLANTED_CALLS = 260  # ~10% of a carbon-tiny NxDI CPU-mode TKG step's 2,587 Python calls (NxDI 0.9, 2026-11-28)


def test_nxdi_a_planted_ten_percent_in_the_decode_loop_fails_the_work_gate_at_the_first_look(tmp_path, nxdi_source):
    """NxDI's own decode loop (CPU mode, 2.29 against a copy of it with ~10% more Python calls in each TKG step,
    ``plant_nxdi_host_work``): the work gate fails it at the first look (4 pairs), naming the planted function."""
    from harness.release.plant import plant_nxdi_host_work

    planted = plant_nxdi_host_work(nxdi_source, tmp_path / "planted-tree", NXDI_PLANTED_CALLS)
    r = run_cli("release-check", "--neuron-cpu", "--baseline-nxdi-source", str(nxdi_source), "--candidate-nxdi-source",
                str(planted), "--out", str(tmp_path / "out"), "--no-conformance", "--perf-select", "test_tkg",
                "--runs", "2", "--rounds", "4", "--gate-work", "2%", timeout=1800)
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert r.returncode == 1, (r.stdout + r.stderr)[-3000:]
    tkg = next(b for b in verdict["work"]["benchmarks"] if "test_tkg" in b["benchmark"])
    base = tkg["calls"][0]
    assert 0.05 < NXDI_PLANTED_CALLS / base < 0.2, base  # "~10%" of this NxDI's step, as measured here
    assert any(f"+{NXDI_PLANTED_CALLS} Python calls/step in " in c and "_planted_host_work" in c for c in tkg["changes"])
    assert verdict["rounds"] == 4 and any("--gate-work 2%" in reason for reason in verdict["reasons"])


def test_counting_adds_no_time_an_a_a_of_counting_off_against_on(tmp_path):
    """The baseline with ``--carbon-work-counts off``, the candidate counting (the default): the same code, so
    the timing gate must not fail; counting runs in its own untimed pass after each benchmark's timed rounds.
    2026-11-28 here (load average 1.4-2.2): PASS at 10 pairs, CTE -7.7% [-22.8%, +10.5%], TKG -5.5%
    [-16.4%, +6.8%] for counting on."""
    r = run_cli("release-check", "--out", str(tmp_path / "onoff"), "--backend", "hf", "--baseline-python",
                sys.executable, "--candidate-python", sys.executable, "--no-conformance", "--perf-select",
                "test_tkg or test_cte", "--runs", "2", "--rounds", "10", "--baseline-env",
                "PYTEST_ADDOPTS=--carbon-work-counts off", timeout=1800)
    verdict = json.loads((tmp_path / "onoff" / "verdict.json").read_text())
    assert r.returncode in (0, 3) and verdict["verdict"] in ("PASS", "INCONCLUSIVE"), (r.stdout + r.stderr)[-3000:]
    rounds = {side: json.loads((tmp_path / "onoff" / side / "perf-round-1.json").read_text())["benchmarks"]
              for side in ("baseline", "candidate")}
    assert all(b["extra_info"]["work"] == {"off": "--carbon-work-counts off"} for b in rounds["baseline"])
    assert all("python_calls" in str(b["extra_info"]["work"]) for b in rounds["candidate"])
