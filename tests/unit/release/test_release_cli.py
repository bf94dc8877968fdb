"""``carbon-harness release-check`` refuses what it cannot run before running anything (exit 2, one
line naming the value), merges legs, and plants slowdowns only where NxDI's TKG call is."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import subprocess

from harness.release.plant import ANCHOR, PlantError, plant_one_crash, plant_process_noise, plant_tkg_slowdown
from harness.release.children import child_env, last_error_line
from tests.helpers import REPO, run_cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("args, message", [
    (["--out", "{tmp}/o", "--rounds", "2", "--neuron-cpu"], "argument --rounds: '2': at least 3 rounds per side"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--baseline-nxdi-source", "{tmp}"],
     "--baseline-nxdi-source {tmp} holds no neuronx_distributed_inference package"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--baseline-nxdi-source", "{tmp}/missing"],
     "--baseline-nxdi-source {tmp}/missing is not a directory"),
    (["--out", "{tmp}/o", "--baseline-python", sys.executable], "give --candidate-python PY"),
    (["--out", "{tmp}/o", "--baseline-python", sys.executable, "--candidate-python", "no-such-python-3"],
     "--candidate-python no-such-python-3: no such executable"),
    (["--out", "{tmp}/o", "--baseline-python", sys.executable, "--candidate-nxdi-source", "{tmp}"],
     "--candidate-nxdi-source runs an NxDI tree in NxDI's CPU mode: it needs --neuron-cpu"),
    (["--out", "{tmp}/o", "--backend", "openai", "--baseline-python", sys.executable],
     "give --candidate-python PY (the interpreter of the environment whose vLLM starts its server), or "
     "--candidate-endpoint URL"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--baseline-endpoint", "http://127.0.0.1:8000"],
     "--baseline-endpoint is a served side's server: it needs --baseline-backend openai (the baseline is neuron)"),
    (["--out", "{tmp}/o", "--backend", "openai", "--baseline-endpoint", "ftp://host:1"],
     "argument --baseline-endpoint: 'ftp://host:1': expected http(s)://HOST:PORT"),
    (["--out", "{tmp}/o", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
    (["--out", "{tmp}/o", "--candidate-env", "PYTHONPATH"], "argument --candidate-env: 'PYTHONPATH': give NAME=VALUE"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--baseline-nxdi-source", "{tmp}", "--baseline-python", "no-such-py"],
     "--baseline-python no-such-py: no such executable"),
    (["--neuron-cpu"], "--out DIR is required"),
    (["--out", "{tmp}/o", "--merge", "{tmp}"], "no verdict.json there"),
    (["--out", "{tmp}/o", "--baseline-python", sys.executable, "--candidate-python", sys.executable, "--rounds", "5",
      "--max-rounds", "8"], "--rounds N fixes the count: give it alone"),
    (["--out", "{tmp}/o", "--baseline-python", sys.executable, "--candidate-python", sys.executable, "--min-rounds",
      "6", "--max-rounds", "4"], "--max-rounds 4 is below --min-rounds 6"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--resolve", "lots"], "argument --resolve: 'lots': give a positive change"),
    (["--out", "{tmp}/o", "--neuron-cpu", "--legs", "0"], "argument --legs"),
    (["--out", "{tmp}/o", "--backend", "hf", "--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
    (["--out", "{tmp}/o", "--backend", "hf", "--dtype", "bf16", "--conformance-only", "--no-conformance"],
     "--conformance-only and --no-conformance leave nothing to run"),
    (["--out", "{tmp}/o", "--backend", "openai", "--serve-arg=--dtype=bfloat16"],
     "--serve-arg=--dtype=bfloat16: give the dtype as --dtype / --baseline-dtype / --candidate-dtype"),
    (["--out", "{tmp}/o", "--backend", "hf", "--baseline-dtype", "fp32"],
     "give --candidate-python PY (the interpreter of the environment with the candidate release), or "
     "--candidate-dtype to qualify a dtype in this environment"),
])
def test_bad_input_is_named_before_anything_runs(tmp_path, args, message):
    r = run_cli("release-check", *(a.format(tmp=tmp_path) for a in args))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message.format(tmp=tmp_path) in r.stderr, r.stderr


def test_a_non_empty_out_is_kept_without_force(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep.txt").write_text("earlier evidence")
    r = run_cli("release-check", "--out", str(tmp_path / "o"), "--baseline-python", sys.executable,
                "--candidate-python", sys.executable)
    assert r.returncode == 2 and "is not empty: give a new directory, or --force" in r.stderr
    assert (tmp_path / "o" / "keep.txt").read_text() == "earlier evidence"


def test_merge_fails_when_a_leg_failed(tmp_path):
    for leg, word in (("verdict-carbon-500m", "PASS"), ("verdict-carbon-3b", "FAIL")):
        (tmp_path / leg).mkdir()
        (tmp_path / leg / "verdict.json").write_text(json.dumps(
            {"schema": 1, "verdict": word, "reasons": [] if word == "PASS" else ["tkg_ms_p50: slower by 30%"],
             "sides": {}, "rounds": 6}))
    r = run_cli("release-check", "--merge", str(tmp_path / "verdict-carbon-500m"), str(tmp_path / "verdict-carbon-3b"),
                "--out", str(tmp_path / "merged"))
    assert r.returncode == 1, r.stderr
    merged = json.loads((tmp_path / "merged" / "verdict.json").read_text())
    assert merged["verdict"] == "FAIL" and merged["reasons"] == ["verdict-carbon-3b: tkg_ms_p50: slower by 30%"]


def test_the_gate_script_exits_3_when_a_leg_is_inconclusive_and_none_failed(tmp_path):
    """ci/scripts/gate.sh as the workflow runs it: a PASS leg and an INCONCLUSIVE one merge into
    INCONCLUSIVE, exit 3, annotated as a warning (not a pass, not a regression) in the step's log."""
    open_figure = {"figure": "t::test_tkg tkg_ms_p50", "text": "t::test_tkg tkg_ms_p50: open after 4 pairs"}
    legs = {"verdict-carbon-500m": {"verdict": "PASS", "reasons": [], "sides": {}, "rounds": 4},
            "verdict-carbon-3b": {"verdict": "INCONCLUSIVE", "reasons": [], "inconclusive": [open_figure],
                                  "warnings": [], "sides": {}, "rounds": 4}}
    for leg, verdict in legs.items():
        (tmp_path / leg).mkdir()
        (tmp_path / leg / "verdict.json").write_text(json.dumps({"schema": 3, **verdict}))
    summary = tmp_path / "summary.md"
    r = subprocess.run(["bash", "ci/scripts/gate.sh", str(tmp_path / "merged"), *(str(tmp_path / leg) for leg in legs)],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=child_env({"PYTHON": sys.executable, "GITHUB_STEP_SUMMARY": str(summary)}))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "::warning title=Release check INCONCLUSIVE::" in r.stdout
    merged = json.loads((tmp_path / "merged" / "verdict.json").read_text())
    assert merged["verdict"] == "INCONCLUSIVE" and merged["inconclusive"] == [
        "verdict-carbon-3b: t::test_tkg tkg_ms_p50: open after 4 pairs"]
    assert "## Release check (all legs): INCONCLUSIVE" in summary.read_text()


def test_planted_process_noise_is_drawn_once_per_process(tmp_path):
    """The noise plant's lines as NxDI's TKG step runs them: each process (a fresh module namespace) draws
    its amount once and keeps it for every step; sigma 0 draws the median itself."""
    def planted(median_ms: float, sigma: float, name: str) -> str:
        tree = plant_process_noise(fake_tree(tmp_path / f"vendor-{name}"), tmp_path / name, median_ms, sigma)
        code = (tree / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / "models" /
                "model_base.py").read_text()
        return textwrap.dedent(code.split("def forward(self):\n", 1)[1].replace(ANCHOR, ""))

    fixed = {}
    exec(planted(0.2, 0.0, "fixed"), fixed)  # noqa: S102 - the planted lines themselves
    assert fixed["_PLANTED_PROCESS_MS"] == 0.2
    step, first, second = planted(0.2, 1.0, "noisy"), {}, {}
    exec(step, first)  # noqa: S102
    drawn = first["_PLANTED_PROCESS_MS"]
    exec(step, first)  # noqa: S102 - the same process's next step: the same amount
    exec(step, second)  # noqa: S102 - another process: its own draw
    assert first["_PLANTED_PROCESS_MS"] == drawn != second["_PLANTED_PROCESS_MS"]
    with pytest.raises(PlantError, match="sigma=-1.0"):
        plant_process_noise(fake_tree(tmp_path / "vendor-bad"), tmp_path / "bad", 1.0, -1.0)


def test_planting_needs_nxdis_tkg_call(tmp_path):
    tree = tmp_path / "src" / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference"
    (tree / "models").mkdir(parents=True)
    (tree / "__init__.py").write_text("")
    (tree / "models" / "model_base.py").write_text("# a release whose forward moved\n")
    with pytest.raises(PlantError, match="is not found exactly once"):
        plant_tkg_slowdown(tmp_path / "src", tmp_path / "planted", 1.0)
    with pytest.raises(PlantError, match="must be a non-negative number"):
        plant_tkg_slowdown(tmp_path / "src", tmp_path / "planted2", -1.0)


def fake_tree(root):
    """A tree laid out like ../shared/vendor whose model_base.py holds NxDI's TKG call line."""
    nxdi = root / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference"
    (nxdi / "models").mkdir(parents=True)
    (nxdi / "__init__.py").write_text("")
    (nxdi / "models" / "model_base.py").write_text("def forward(self):\n" + ANCHOR)
    nxd = root / "neuronx-distributed" / "src" / "neuronx_distributed"
    nxd.mkdir(parents=True)
    (nxd / "__init__.py").write_text("")
    return root


def test_a_plant_from_a_relative_source_links_neuronx_distributed_absolutely(tmp_path, monkeypatch):
    fake_tree(tmp_path / "vendor")
    monkeypatch.chdir(tmp_path)
    planted = plant_tkg_slowdown(Path("vendor"), tmp_path / "deep" / "planted", 1.0)
    link = planted / "neuronx-distributed" / "src"
    assert link.is_symlink() and (link / "neuronx_distributed" / "__init__.py").is_file()


def test_a_planted_crash_fails_one_process_and_then_runs_unchanged(tmp_path):
    tree = plant_one_crash(fake_tree(tmp_path / "vendor"), tmp_path / "crash", tmp_path / "marker")
    code = (tree / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference" / "models" /
            "model_base.py").read_text()
    body = code.split("def forward(self):\n", 1)[1].replace(ANCHOR, "")
    step = textwrap.dedent(body)
    with pytest.raises(RuntimeError, match="planted crash"):
        exec(step, {})  # noqa: S102 - the planted lines themselves, as NxDI's forward runs them
    assert not (tmp_path / "marker").exists()
    exec(step, {})  # noqa: S102 - the second process: no marker, no crash


@pytest.mark.parametrize("log, line", [
    ("E   RuntimeError: planted crash\nharness/backends/neuron/engine.py:132: BackendError\n"
     "carbon-harness: gates: 0 figures gated (0 passed, 0 failed)\n", "RuntimeError: planted crash"),
    ("collecting\nERROR: carbon-harness: --carbon-nxdi-source /x is not a directory\n",
     "carbon-harness: --carbon-nxdi-source /x is not a directory"),
    ("nothing went wrong here\nlast line\n", "last line"),
])
def test_a_rounds_error_line_is_the_message_not_the_traceback_location(log, line):
    assert last_error_line(log) == line
