"""release-check's Trn2 options (``harness.release.device_options``), checked before anything runs: a serve
script needs an openai side the check starts, an image on a served side needs the script (which runs in it),
an instance must be a Neuron profile with cores, and the NeuronCore plan lands on each side."""

from __future__ import annotations

import argparse
import sys

import pytest

from harness.release.device_options import add_device_options, stash_image_pythons, with_device_options
from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan, Side
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

SCRIPT = str(REPO / "ci" / "scripts" / "vllm-serve.sh")


def options(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_device_options(p)
    for name in ("baseline", "candidate"):
        p.add_argument(f"--{name}-python")
    return p.parse_args(list(argv))


def migration(tmp_path, endpoint: str | None = None) -> CheckPlan:
    return CheckPlan(Side("baseline", sys.executable), Side("candidate", sys.executable, backend="openai",
                                                            endpoint=endpoint), tmp_path, shapes=("smoke",))


def test_a_48xlarge_migration_gets_disjoint_cores_and_the_script(tmp_path):
    plan = with_device_options(options("--candidate-serve-script", SCRIPT, "--neuron-instance", "trn2.48xlarge"),
                               migration(tmp_path), {})
    assert plan.candidate.serve_script == SCRIPT and (plan.baseline.cores, plan.candidate.cores) == ("0-3", "4-7")
    assert plan.core_plan.scheme == "disjoint" and "paused during each round" in plan.mode


def test_a_3xlarge_migration_takes_turns(tmp_path):
    plan = with_device_options(options("--candidate-serve-script", SCRIPT, "--neuron-instance", "trn2.3xlarge"),
                               migration(tmp_path), {})
    assert plan.core_plan.exclusive and "stopped during the other side's turns" in plan.mode


@pytest.mark.parametrize(("argv", "endpoint", "message"), [
    (("--baseline-serve-script", SCRIPT), None, "--baseline-serve-script starts an openai baseline's server"),
    (("--candidate-serve-script", SCRIPT), "http://127.0.0.1:8000", "no --candidate-endpoint"),
    (("--candidate-serve-script", "ci/scripts/absent.sh"), None, "no such file"),
    (("--candidate-image", "dlc:2.33"), None, "--candidate-image with a served candidate"),
    (("--neuron-instance", "h100-sxm"), None, "not a Neuron instance"),
    (("--neuron-instance", "trn9.huge"), None, "unknown hardware profile"),
    (("--neuron-instance", "trn2.3xlarge"), "http://127.0.0.1:8000", "let the check start it"),
])
def test_what_cannot_run_is_refused_before_anything_starts(tmp_path, argv, endpoint, message):
    with pytest.raises(ReleaseCheckError, match=message):
        with_device_options(options(*argv), migration(tmp_path, endpoint), {})


def test_an_image_sides_python_is_the_one_inside_the_image(tmp_path):
    args = options("--baseline-image", "dlc:2.29", "--baseline-python", "/opt/conda/bin/python")
    kept = stash_image_pythons(args)
    assert args.baseline_python == sys.executable  # what the host-side checks see
    plan = with_device_options(args, CheckPlan(Side("baseline", sys.executable), Side("candidate", sys.executable),
                                               tmp_path), kept)
    assert plan.baseline.python == "/opt/conda/bin/python" and plan.baseline.image == "dlc:2.29"
    assert plan.core_plan is None  # no instance named, none found on this host
