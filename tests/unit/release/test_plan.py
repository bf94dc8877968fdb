"""A release check's plan as the user reads it (``harness.release.plan``): each side's label, the mode line the
report opens with, and the exact pytest command lines and environment each side's processes get. A wrong
option here runs the wrong model, shape or clock on one side only, and the verdict compares unlike runs; so
each argv is pinned whole."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.neuron_cores import CorePlan
from harness.release.plan import (
    CONFORMANCE_MARKERS,
    CONTRACT_TEST,
    PERF_TESTS,
    CheckPlan,
    Side,
    conformance_command,
    contract_dir,
    perf_command,
    perf_selection,
    pytest_args,
    reference_command,
    served_name,
    side_env,
)

pytestmark = pytest.mark.unit

OUT = Path("/tmp/out")
NXDI_A = Side("baseline", "/a/bin/python", Path("/src/nxdi-a"), "neuron")
NXDI_B = Side("candidate", "/b/bin/python", Path("/src/nxdi-b"), "neuron", dtype="bf16")
HF_A = Side("baseline", "/a/bin/python", backend="hf")
HF_B = Side("candidate", "/b/bin/python", backend="hf")
DEVICE = Side("candidate", "/b/bin/python", backend="neuron", cores="4-7", env=("EXTRA=1",))
STARTED = Side("candidate", "/b/bin/python", backend="openai", endpoint="http://127.0.0.1:8001", started=True)
TEAMS = Side("baseline", "/a/bin/python", backend="openai", endpoint="http://team:8000")


def plan_of(baseline: Side, candidate: Side, **kw) -> CheckPlan:
    return CheckPlan(baseline, candidate, OUT, **kw)


def test_the_defaults_a_user_gets_without_options():
    plan = plan_of(HF_A, HF_B)
    assert (plan.models, plan.shapes, plan.runs, plan.conformance, plan.reference, plan.perf) == (
        ("carbon-tiny",), ("smoke",), 5, True, True, True)
    assert (CONFORMANCE_MARKERS, PERF_TESTS, CONTRACT_TEST) == (
        "compat or neuron or dna", ("tests/perf/test_latency.py",), "tests/compat/test_contract.py")
    assert (plan.serve_timeout, plan.image_runner, plan.inspect_on_fail, plan.timer) == (900.0, "docker", "device",
                                                                                         "auto")


@pytest.mark.parametrize("side, label", [
    (NXDI_A, "/src/nxdi-a"),
    (HF_A, "hf in /a/bin/python"),
    (STARTED, "vLLM at http://127.0.0.1:8001 (/b/bin/python)"),  # the check started it with this interpreter
    (TEAMS, "vLLM at http://team:8000"),  # the team's server: no interpreter of ours
])
def test_each_side_is_labelled_by_what_it_runs(side, label):
    assert side.label() == label


def test_a_sides_env_strings_become_pairs():
    assert Side("baseline", "/p", env=("A=1", "B=x=y")).env == (("A", "1"), ("B", "x=y"))


EXCLUSIVE = CorePlan("trn2.3xlarge", 4, "exclusive", {"baseline": "0-3", "candidate": "0-3"}, {"baseline": 4,
                                                                                                "candidate": 4})
DISJOINT = CorePlan("trn2.48xlarge", 64, "disjoint", {"baseline": "0-3", "candidate": "4-7"}, {"baseline": 4,
                                                                                              "candidate": 4})


@pytest.mark.parametrize("baseline, candidate, kw, served, in_process, cpu_time, mode", [
    (HF_A, HF_B, {}, False, True, True, "hf -> hf, on the CPU (process CPU time, one torch thread)"),
    (HF_A, HF_B, {"timer": "wall"}, False, True, False,
     "hf -> hf, on the CPU (wall time, --timer wall: a busy neighbour core shows in it; one torch thread)"),
    (HF_A, HF_B, {"timer": "cpu"}, False, True, True, "hf -> hf, on the CPU (process CPU time, one torch thread)"),
    (NXDI_A, NXDI_B, {"cpu": True}, False, True, True,
     "neuron -> neuron, on the CPU (process CPU time, one torch thread)"),
    (NXDI_A, NXDI_B, {}, False, False, False, "neuron -> neuron, device (wall time)"),  # a device: not in process
    (NXDI_A, HF_B, {}, False, False, False, "neuron -> hf, device (wall time)"),  # hf alone on one side only
    (HF_A, HF_B, {"perf": False}, False, True, True,
     "hf -> hf, conformance only (the correctness half: no perf rounds)"),
    (TEAMS, STARTED, {}, True, False, False,
     "openai -> openai, wall time; each served side on one server for the whole check (the other side's paused "
     "during each round), each round a fresh client process"),
    (NXDI_A, STARTED, {"cpu": True}, True, False, False,
     "neuron -> openai, wall time; each served side on one server for the whole check (the other side's paused "
     "during each round), each round a fresh client process"),
    (STARTED, NXDI_B, {"core_plan": DISJOINT}, True, False, False,
     "openai -> neuron, wall time; each served side on one server for the whole check (the other side's paused "
     "during each round), each round a fresh client process"),
    (STARTED, NXDI_B, {"core_plan": EXCLUSIVE}, True, False, False,
     "openai -> neuron, wall time; the sides cannot hold their NeuronCores at once (trn2.3xlarge): a served "
     "side's server is stopped during the other side's turns and started again for its own, each round a fresh "
     "client process"),
    (NXDI_A, NXDI_B, {"core_plan": EXCLUSIVE}, False, False, False, "neuron -> neuron, device (wall time)"),
])
def test_the_mode_line_says_which_clock_and_how_the_sides_share_the_host(baseline, candidate, kw, served,
                                                                         in_process, cpu_time, mode):
    plan = plan_of(baseline, candidate, **kw)
    assert (plan.served, plan.in_process, plan.cpu_time, plan.mode) == (served, in_process, cpu_time, mode)


def test_pytest_args_carry_every_option_of_the_plan_in_order():
    plan = plan_of(NXDI_A, NXDI_B, cpu=True, models=("m1", "/models/m2"), shapes=("smoke", "long"),
                   model_root=Path("/models"), cache_dir=Path("/cache"))
    assert pytest_args(plan, NXDI_B) == [
        "-p", "no:cacheprovider", "-q", "--carbon-backend", "neuron", "--carbon-model=m1", "--carbon-model=/models/m2",
        "--carbon-shape", "smoke", "--carbon-shape", "long", "--carbon-model-root=/models",
        "--carbon-cache-dir=/cache", "--carbon-neuron-cpu", "--carbon-nxdi-source=/src/nxdi-b",
        "--carbon-dtype", "bf16"]


@pytest.mark.parametrize("baseline, side, kw, tail", [
    (NXDI_A, NXDI_A, {}, []),  # a device: no CPU mode, no source
    (HF_A, HF_B, {"cpu": True}, ["--carbon-device", "cpu"]),  # --cpu adds no NxDI option to a transformers side
    (TEAMS, TEAMS, {}, ["--carbon-endpoint=http://team:8000"]),  # the team's server: its own model name
    (TEAMS, STARTED, {"models": ("/models/carbon-tiny",)},
     ["--carbon-endpoint=http://127.0.0.1:8001", "--carbon-served-model=carbon-tiny"]),
])
def test_pytest_args_per_backend(baseline, side, kw, tail):
    plan = plan_of(baseline, side, **kw)
    head = ["-p", "no:cacheprovider", "-q", "--carbon-backend", side.backend,
            *[f"--carbon-model={m}" for m in plan.models], "--carbon-shape", "smoke"]
    assert pytest_args(plan, side) == head + tail


def test_a_started_server_is_asked_for_the_first_models_name():
    assert served_name(plan_of(TEAMS, STARTED, models=("/root/ckpt/carbon-small", "other"))) == "carbon-small"


def test_side_env_one_thread_in_process_the_plans_then_the_sides_own_variables(monkeypatch):
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "outer")  # an outer pytest run's variable never reaches a side
    plan = plan_of(HF_A, Side("candidate", "/b", backend="hf", env=("OMP_NUM_THREADS=2", "X=side")),
                   extra_env={"X": "plan", "Y": "plan"})
    env = side_env(plan, plan.candidate)
    assert (env["HYPOTHESIS_PROFILE"], env["OMP_NUM_THREADS"], env["X"], env["Y"]) == ("ci", "2", "side", "plan")
    assert "PYTEST_CURRENT_TEST" not in env and "NEURON_RT_VISIBLE_CORES" not in env
    assert side_env(plan, HF_A)["OMP_NUM_THREADS"] == "1"
    plan = plan_of(HF_A, HF_B, extra_env={"OMP_NUM_THREADS": "3", "HYPOTHESIS_PROFILE": "dev"})
    assert (side_env(plan, HF_A)["OMP_NUM_THREADS"], side_env(plan, HF_A)["HYPOTHESIS_PROFILE"]) == ("3", "dev")


def test_side_env_gives_a_device_side_its_cores_and_a_served_side_none(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    plan = plan_of(NXDI_A, DEVICE)
    env = side_env(plan, DEVICE)
    assert (env["NEURON_RT_VISIBLE_CORES"], env["EXTRA"]) == ("4-7", "1")
    assert "OMP_NUM_THREADS" not in env  # a device: not timed in process CPU time
    served = Side("candidate", "/b", backend="openai", endpoint="http://h:1", cores="4-7")
    assert "NEURON_RT_VISIBLE_CORES" not in side_env(plan_of(NXDI_A, served), served)


def test_the_conformance_command_with_and_without_the_reference():
    plan = plan_of(HF_A, HF_B)
    assert contract_dir(plan, "candidate") == OUT / "candidate" / "contract"
    args = pytest_args(plan, HF_B)
    assert conformance_command(plan, HF_B, Path("/j.xml")) == [
        "/b/bin/python", "-m", "pytest", "-m", "compat or neuron or dna", *args, "--junitxml=/j.xml",
        "--carbon-contract-out=/tmp/out/candidate/contract", "--carbon-contract-reference=/tmp/out/reference/contract"]
    plan = plan_of(HF_A, HF_B, reference=False, conformance_markers="compat")
    assert conformance_command(plan, HF_B, Path("/j.xml")) == [
        "/b/bin/python", "-m", "pytest", "-m", "compat", *args, "--junitxml=/j.xml",
        "--carbon-contract-out=/tmp/out/candidate/contract"]


def test_the_reference_is_transformers_fp32_on_the_cpu_in_this_interpreter():
    plan = plan_of(NXDI_A, NXDI_B, cpu=True, shapes=("long",))
    assert reference_command(plan, Path("/r.xml")) == [
        sys.executable, "-m", "pytest", "tests/compat/test_contract.py", "-m", "contract", "-p", "no:cacheprovider",
        "-q", "--carbon-backend", "hf", "--carbon-model=carbon-tiny", "--carbon-shape", "long", "--carbon-device",
        "cpu", "--carbon-dtype", "fp32", "--junitxml=/r.xml", "--carbon-contract-out=/tmp/out/reference/contract"]


@pytest.mark.parametrize("baseline, select, expected", [
    (HF_A, None, None), (HF_A, "tkg", "tkg"),
    (TEAMS, None, "test_e2e"), (TEAMS, "tkg", "test_e2e and (tkg)"),
])
def test_perf_selection(baseline, select, expected):
    candidate = HF_B if baseline is HF_A else STARTED
    assert perf_selection(plan_of(baseline, candidate, perf_select=select)) == expected


def test_the_perf_command_in_process_cpu_time_with_a_selection():
    plan = plan_of(HF_A, HF_B, runs=7, perf_select="tkg", perf_tests=("tests/perf/a.py", "tests/perf/b.py"))
    assert perf_command(plan, HF_A, Path("/b.json"), Path("/j.xml")) == [
        "/a/bin/python", "-m", "pytest", "-m", "perf", "tests/perf/a.py", "tests/perf/b.py",
        *pytest_args(plan, HF_A), "--carbon-runs", "7", "--benchmark-json=/b.json", "--junitxml=/j.xml",
        "-k", "tkg", "--benchmark-timer", "time.process_time"]


def test_the_perf_command_on_a_device_wall_time_no_selection():
    plan = plan_of(NXDI_A, NXDI_B)
    assert perf_command(plan, NXDI_A, Path("/b.json"), Path("/j.xml")) == [
        "/a/bin/python", "-m", "pytest", "-m", "perf", "tests/perf/test_latency.py", *pytest_args(plan, NXDI_A),
        "--carbon-runs", "5", "--benchmark-json=/b.json", "--junitxml=/j.xml"]
