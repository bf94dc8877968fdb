"""What each side of a release check is asked to run, per stack (``harness.release.plan``): its backend's
options, what a perf round times, and on which clock. The commands are checked as argv lists; running
them is ``tests/release``'s job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.release.plan import CheckPlan, Side, conformance_command, perf_command, reference_command

pytestmark = pytest.mark.unit


def plan_of(baseline: Side, candidate: Side, **kw) -> CheckPlan:
    return CheckPlan(baseline, candidate, Path("/tmp/out"), **kw)


NXDI = Side("baseline", sys.executable, Path("/src/nxdi"), "neuron")
SERVED = Side("candidate", "/venv/bin/python", None, "openai", endpoint="http://127.0.0.1:9", dtype="fp32",
              started=True)


def option(cmd: list[str], name: str) -> str | None:
    for i, arg in enumerate(cmd):
        if arg == name:
            return cmd[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def test_a_migration_times_the_static_batch_on_the_wall_clock_on_both_sides():
    plan = plan_of(NXDI, SERVED, cpu=True)
    assert plan.served and not plan.cpu_time and "wall time" in plan.mode
    for side in (NXDI, SERVED):
        cmd = perf_command(plan, side, Path("/tmp/b.json"), Path("/tmp/j.xml"))
        assert option(cmd, "-k") == "test_e2e" and option(cmd, "--benchmark-timer") is None
    nxdi = perf_command(plan, NXDI, Path("/tmp/b.json"), Path("/tmp/j.xml"))
    assert option(nxdi, "--carbon-backend") == "neuron" and "--carbon-neuron-cpu" in nxdi
    served = perf_command(plan, SERVED, Path("/tmp/b.json"), Path("/tmp/j.xml"))
    assert option(served, "--carbon-backend") == "openai" and "--carbon-neuron-cpu" not in served
    assert option(served, "--carbon-endpoint") == SERVED.endpoint and option(served, "--carbon-dtype") == "fp32"
    assert option(served, "--carbon-served-model") == "carbon-tiny"


def test_the_users_perf_selection_narrows_a_served_round_and_never_widens_it():
    plan = plan_of(NXDI, SERVED, cpu=True, perf_select="smoke")
    cmd = perf_command(plan, SERVED, Path("/tmp/b.json"), Path("/tmp/j.xml"))
    assert option(cmd, "-k") == "test_e2e and (smoke)"


@pytest.mark.parametrize("baseline, candidate, cpu, cpu_time", [
    (NXDI, Side("candidate", sys.executable, Path("/src/other"), "neuron"), True, True),
    (Side("baseline", "/a/python", None, "hf"), Side("candidate", "/b/python", None, "hf"), False, True),
    (Side("baseline", "/a/python"), Side("candidate", "/b/python"), False, False),  # a device: wall time
])
def test_in_process_cpu_checks_time_process_cpu_on_one_thread(baseline, candidate, cpu, cpu_time):
    plan = plan_of(baseline, candidate, cpu=cpu)
    assert plan.cpu_time is cpu_time
    cmd = perf_command(plan, candidate, Path("/tmp/b.json"), Path("/tmp/j.xml"))
    assert (option(cmd, "--benchmark-timer") == "time.process_time") is cpu_time


HF_A, HF_B = Side("baseline", "/a/python", None, "hf"), Side("candidate", "/b/python", None, "hf")


@pytest.mark.parametrize("timer, process_time", [("auto", True), ("cpu", True), ("wall", False)])
def test_timer_wall_times_an_in_process_check_on_the_wall_clock_and_keeps_one_torch_thread(timer, process_time):
    """A sleep or a wait is spent in wall time only: ``--timer wall`` is how a host check sees one."""
    from harness.release.plan import side_env

    plan = plan_of(HF_A, HF_B, timer=timer)
    cmd = perf_command(plan, HF_B, Path("/tmp/b.json"), Path("/tmp/j.xml"))
    assert (option(cmd, "--benchmark-timer") == "time.process_time") is process_time
    assert ("process CPU time" in plan.mode) is process_time and ("wall time" in plan.mode) is not process_time
    assert side_env(plan, HF_B)["OMP_NUM_THREADS"] == "1"


def test_timer_cpu_is_refused_for_a_device_check_naming_what_would_do(tmp_path):
    from tests.helpers import run_cli

    r = run_cli("release-check", "--out", str(tmp_path / "o"), "--baseline-python", sys.executable,
                "--candidate-python", sys.executable, "--timer", "cpu")
    assert r.returncode == 2 and "--timer cpu" in r.stderr and "--timer wall or auto" in r.stderr, r.stderr


def test_every_side_writes_its_contract_against_the_reference():
    plan = plan_of(NXDI, SERVED, cpu=True)
    for side in (NXDI, SERVED):
        cmd = conformance_command(plan, side, Path("/tmp/j.xml"))
        assert option(cmd, "--carbon-contract-out") == f"/tmp/out/{side.name}/contract"
        assert option(cmd, "--carbon-contract-reference") == "/tmp/out/reference/contract"
    ref = reference_command(plan, Path("/tmp/r.xml"))
    assert ref[0] == sys.executable and option(ref, "--carbon-backend") == "hf"
    assert option(ref, "--carbon-dtype") == "fp32" and option(ref, "--carbon-device") == "cpu"
    assert option(ref, "--carbon-contract-out") == "/tmp/out/reference/contract"


@pytest.mark.parametrize("backend, extra", [("hf", []), ("neuron", ["--carbon-neuron-cpu"]), ("openai", [])])
def test_a_sides_dtype_reaches_its_backend_and_none_is_labelled_by_default(backend, extra):
    kw = {"endpoint": "http://127.0.0.1:9"} if backend == "openai" else {}
    source = Path("/src/nxdi") if backend == "neuron" else None
    for dtype in ("bf16", "fp32", None):
        side = Side("candidate", sys.executable, source, backend, dtype=dtype, **kw)
        cmd = conformance_command(plan_of(NXDI, side, cpu=backend == "neuron"), side, Path("/tmp/j.xml"))
        assert option(cmd, "--carbon-dtype") == dtype and all(a in cmd for a in extra)
    reference = reference_command(plan_of(NXDI, SERVED), Path("/tmp/j.xml"))
    assert option(reference, "--carbon-dtype") == "fp32" and option(reference, "--carbon-backend") == "hf"


def test_a_started_server_runs_and_is_labelled_with_the_sides_dtype():
    from harness.release.run import started_dtype
    from harness.serving.server import VLLMServer

    for dtype, flag in (("bf16", "bfloat16"), (None, "float32")):
        side = Side("candidate", sys.executable, None, "openai", dtype=dtype)
        server = VLLMServer(Path("/ckpt"), None, Path("/tmp/log"), dtype=started_dtype(side))
        cmd = server.command()
        assert cmd[cmd.index("--dtype") + 1] == flag and server.dtype == (dtype or "fp32")


def test_conformance_only_says_so_in_the_mode_line():
    side = Side("candidate", sys.executable, None, "hf", dtype="bf16")
    plan = plan_of(Side("baseline", sys.executable, None, "hf", dtype="fp32"), side, perf=False)
    assert plan.mode == "hf -> hf, conformance only (the correctness half: no perf rounds)"
