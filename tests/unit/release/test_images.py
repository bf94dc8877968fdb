"""Each side in its own image (``harness.release.images``): every process of the side runs as ``RUNNER run
... IMAGE COMMAND`` with the host's Neuron devices passed through, the checkout, evidence and caches mounted
at their own paths, and its variables passed by name, never by value. Rehearsed with a stand-in runner
(tests/stand_ins/image-runner.sh: runs the command on this host in a clean environment holding only the
passed variables), through which the side's real probe runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.release.images import image_command, side_process
from harness.release.plan import CheckPlan, Side
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

RUNNER = REPO / "tests" / "stand_ins" / "image-runner.sh"


def plan_with(tmp_path, image: str | None) -> CheckPlan:
    candidate = Side("candidate", sys.executable, backend="neuron", image=image, cores="4-7",
                     env=(("CARBON_TEST_SECRET", "hunter2"),))
    return CheckPlan(Side("baseline", sys.executable), candidate, tmp_path / "out", cache_dir=tmp_path / "cache",
                     image_runner=f"bash {RUNNER}")


def test_the_command_line_passes_devices_mounts_and_variables_by_name(tmp_path):
    plan = plan_with(tmp_path, "neuron-dlc:2.33")
    cmd, env = image_command(plan, plan.candidate, ["python3", "-m", "pytest"], {"NEURON_RT_VISIBLE_CORES": "4-7",
                                                                                  "CARBON_TEST_SECRET": "hunter2"},
                             devices=["/dev/neuron0", "/dev/neuron1"])
    assert cmd[:3] == ["bash", str(RUNNER), "run"] and cmd[-4:] == ["neuron-dlc:2.33", "python3", "-m", "pytest"]
    assert "--device=/dev/neuron0" in cmd and "--device=/dev/neuron1" in cmd
    assert f"{REPO}:{REPO}" in cmd and f"{(tmp_path / 'out').resolve()}:{(tmp_path / 'out').resolve()}" in cmd
    names = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-e"]
    assert {"NEURON_RT_VISIBLE_CORES", "CARBON_TEST_SECRET", "PYTHONPATH"} <= set(names)
    assert "hunter2" not in " ".join(cmd) and env["CARBON_TEST_SECRET"] == "hunter2" and env["PYTHONPATH"] == str(REPO)
    assert image_command(plan, plan.baseline, ["x"], {"A": "1"}) == (["x"], {"A": "1"})  # no image: unchanged


def test_the_sides_probe_runs_through_the_runner_with_only_the_passed_variables(tmp_path):
    plan = plan_with(tmp_path, "neuron-dlc:2.33")
    cmd, env = side_process(plan, plan.candidate, [sys.executable, "-m", "harness.release.probe"])
    log = tmp_path / "runner.jsonl"
    r = subprocess.run(cmd, env={**env, "STAND_IN_LOG": str(log), "VLLM_NOT_PASSED": "x"}, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["harness_root"] == str(REPO)  # the mounted checkout, through PYTHONPATH
    assert info["device_context"]["env"]["NEURON_RT_VISIBLE_CORES"] == "4-7"
    assert "VLLM_NOT_PASSED" not in info["device_context"]["env"]  # in the runner's environment, not passed in
    call = json.loads(log.read_text().splitlines()[0])
    assert call[0] == "run" and "neuron-dlc:2.33" in call
