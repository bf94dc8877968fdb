"""One host runtime (issue 55, item 10): a served pair whose releases ship different Neuron runtimes (vLLM Neuron
2.32.0 -> 2.33.0: runtime 2.34.10.0 against 2.35.30.0) stops before anything starts, naming the mismatch, unless each
side runs in its own image or the user accepts one runtime (--accept-shared-runtime), which the verdict records.
Each side's need is read from its venv as ci/scripts/sdk-venv.sh leaves it (the release's constraints file copied in
as carbon-harness-constraints.txt, the interpreter a link under VENV/bin)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from harness.analysis.pairing import SideReport
from harness.release import shared_runtime
from harness.release.device_options import with_device_options
from harness.release.devices import device_records
from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan, Side
from harness.release.runtime_layer import CONSTRAINTS_IN_VENV, markdown
from tests.unit.conftest import REPO
from tests.unit.release.test_device_options import options

pytestmark = pytest.mark.unit

CONSTRAINTS = REPO / "ci" / "constraints"
SCRIPT = str(REPO / "ci" / "scripts" / "vllm-serve.sh")


def venv(tmp_path: Path, release: str) -> str:
    """A venv's layout as sdk-venv.sh leaves it: bin/python a link to the base interpreter, the constraints beside."""
    root = tmp_path / release
    if (root / "bin" / "python").is_symlink():
        return str(root / "bin" / "python")  # the same release's venv for both sides
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(CONSTRAINTS / f"{release}.txt", root / CONSTRAINTS_IN_VENV)
    return str(root / "bin" / "python")


def test_a_sides_need_is_its_venvs_release_not_its_interpreters_target(tmp_path):
    release, runtimes = shared_runtime.needs(venv(tmp_path, "vllm-neuron-2.33.0"))
    assert runtimes == ["2.35.30.0"] and "2.33.0" in release
    assert shared_runtime.needs(sys.executable) is None  # no constraints beside it: nothing known


NEEDS = {"baseline": ("vllm-neuron 2.32.0", ["2.34.10.0"]), "candidate": ("vllm-neuron 2.33.0", ["2.35.30.0"])}
NO_IMAGES = {"baseline": None, "candidate": None}


def test_a_served_2_32_to_2_33_pair_on_one_host_is_named_with_both_runtimes_and_both_ways_out():
    line = shared_runtime.mismatch(NEEDS, True, NO_IMAGES)
    assert line is not None and "\n" not in line
    assert "baseline (vllm-neuron 2.32.0) needs Neuron runtime 2.34.10.0" in line
    assert "candidate (vllm-neuron 2.33.0) needs 2.35.30.0" in line
    assert "--baseline-image / --candidate-image" in line and "--accept-shared-runtime" in line


@pytest.mark.parametrize(("needs", "served", "images"), [
    ({**NEEDS, "candidate": ("vllm-neuron 2.32.0", ["2.34.10.0"])}, True, NO_IMAGES),  # one release: one runtime
    ({**NEEDS, "candidate": ("two", ["2.35.30.0", "2.34.10.0"])}, True, NO_IMAGES),  # a runtime both ship
    (NEEDS, False, NO_IMAGES),  # not a served pair: recorded by the runtime layer, as before
    (NEEDS, True, {"baseline": "dlc:2.32", "candidate": "dlc:2.33"}),  # each side its own runtime
    ({**NEEDS, "baseline": None}, True, NO_IMAGES),  # a need unknown
])
def test_nothing_to_refuse(needs, served, images):
    assert shared_runtime.mismatch(needs, served, images) is None


def pair(tmp_path, baseline: str = "vllm-neuron-2.32.0", candidate: str = "vllm-neuron-2.33.0") -> CheckPlan:
    return CheckPlan(Side("baseline", venv(tmp_path, baseline), backend="openai"),
                     Side("candidate", venv(tmp_path, candidate), backend="openai"), tmp_path, shapes=("smoke",))


SCRIPTS = ("--baseline-serve-script", SCRIPT, "--candidate-serve-script", SCRIPT)


def test_release_check_stops_a_2_32_to_2_33_pair_before_anything_starts(tmp_path):
    with pytest.raises(ReleaseCheckError, match=r"needs Neuron runtime 2\.34\.10\.0 .* needs 2\.35\.30\.0"):
        with_device_options(options(*SCRIPTS), pair(tmp_path), {})


def test_one_release_on_both_sides_runs_as_before(tmp_path):
    plan = with_device_options(options(*SCRIPTS), pair(tmp_path, candidate="vllm-neuron-2.32.0"), {})
    assert plan.shared_runtime is None


def test_each_side_in_its_own_image_runs(tmp_path):
    plan = with_device_options(options(*SCRIPTS, "--baseline-image", "dlc:2.32", "--candidate-image", "dlc:2.33"),
                               pair(tmp_path), {})
    assert plan.shared_runtime is None and plan.candidate.image == "dlc:2.33"


def test_accepted_it_runs_and_the_verdict_records_it(tmp_path):
    plan = with_device_options(options(*SCRIPTS, "--accept-shared-runtime"), pair(tmp_path), {})
    assert plan.shared_runtime is not None and "2.35.30.0" in plan.shared_runtime
    records = device_records(plan, {n: SideReport(n) for n in ("baseline", "candidate")}, [], [], "PASS",
                             lambda line: None)
    layer = records["runtime_layer"]
    assert layer["accepted_shared_runtime"] == plan.shared_runtime
    note = next(n for n in layer["notes"] if n.startswith("accepted with --accept-shared-runtime"))
    assert "2.34.10.0" in note and "2.35.30.0" in note and "both ran on one runtime" in note
    assert any("accepted with --accept-shared-runtime" in line for line in markdown(layer))


def test_the_workflow_and_the_leg_script_can_pass_the_acceptance():
    assert "if [ -n \"${ACCEPT_SHARED_RUNTIME:-}\" ]; then args+=(--accept-shared-runtime); fi" in \
        (REPO / "ci" / "scripts" / "release-leg.sh").read_text()
    workflow = (REPO / "ci" / "trn2.yml").read_text()
    assert "accept_shared_runtime:" in workflow and "ACCEPT_SHARED_RUNTIME: ${{ inputs.accept_shared_runtime" in workflow


def test_a_sides_own_constraints_variable_names_its_need(tmp_path):
    """As the probe reads it (runtime_layer.side_constraints): --candidate-env CARBON_SDK_CONSTRAINTS=FILE."""
    got = shared_runtime.needs(sys.executable, {"CARBON_SDK_CONSTRAINTS": str(CONSTRAINTS / "vllm-neuron-2.32.0.txt")})
    assert got is not None and got[1] == ["2.34.10.0"]
