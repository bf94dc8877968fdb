"""What a release check runs on each side: the plan (both sides, the models, shapes and design), and each
pytest command line and environment built from it; built here, run by ``harness.release.run`` (the
conformance tiers) and ``harness.release.rounds`` (the perf rounds).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.process_environment import env_pairs
from harness.core.sequential import Design
from harness.release.children import child_env

CONFORMANCE_MARKERS = "compat or neuron or dna"
PERF_TESTS = ("tests/perf/test_latency.py",)
CONTRACT_TEST = "tests/compat/test_contract.py"
NXDI_SOURCE_ENV = "CARBON_NXDI_SOURCE"  # the NxDI tree the pytest plugin reads (harness.plugin.hooks)


@dataclass(frozen=True)
class Side:
    """One side: an environment (its interpreter, or in CPU mode an NxDI tree) and a backend. A served
    side (``openai``) is measured through a server: the team's (``endpoint``), or one the check starts
    with this side's own interpreter's vLLM (``endpoint`` filled in once it listens)."""

    name: str  # "baseline" or "candidate"
    python: str
    nxdi_source: Path | None = None  # CPU mode: the NxDI tree this side imports
    backend: str = "neuron"
    endpoint: str | None = None
    dtype: str | None = None  # --*-dtype: hf's torch dtype, NeuronConfig's torch_dtype, a started server's --dtype
    # (None: the backend's default, recorded as the engine reports it); a team's server: what it runs, if stated
    env: tuple[tuple[str, str], ...] = ()  # this side's own environment variables (--baseline-env K=V)
    started: bool = False  # the check started this side's server
    cores: str | None = None  # NEURON_RT_VISIBLE_CORES of this side's device processes (harness.release.cores)
    serve_script: str | None = None  # an openai side's server started through this script (ci/scripts/vllm-serve.sh)
    image: str | None = None  # this side's processes run in this container image (harness.release.images)

    def __post_init__(self) -> None:  # NAME=VALUE strings as pairs: every dict(side.env) then holds (issue 57)
        object.__setattr__(self, "env", env_pairs(self.env))

    def label(self) -> str:
        if self.backend == "openai":
            return f"vLLM at {self.endpoint}" + (f" ({self.python})" if self.started else "")
        return str(self.nxdi_source) if self.nxdi_source is not None else f"{self.backend} in {self.python}"


@dataclass(frozen=True)
class CheckPlan:
    baseline: Side
    candidate: Side
    out: Path
    models: tuple[str, ...] = ("carbon-tiny",)
    shapes: tuple[str, ...] = ("smoke",)
    design: Design = field(default_factory=Design)
    runs: int = 5
    cache_dir: Path | None = None
    cpu: bool = False
    model_root: Path | None = None
    conformance: bool = True
    conformance_markers: str = CONFORMANCE_MARKERS
    perf_tests: tuple[str, ...] = PERF_TESTS
    perf_select: str | None = None  # pytest -k for the perf rounds (None: every perf test of perf_tests)
    extra_env: dict[str, str] = field(default_factory=dict)  # for both sides (tests plant slowdowns this way)
    reference: bool = True  # the output contract's fp32 transformers reference run
    serve_args: tuple[str, ...] = ()  # added to the vLLM servers the check starts (both sides alike)
    perf: bool = True  # the perf rounds (--conformance-only: the correctness half alone)
    core_plan: Any = None  # harness.core.neuron_cores.CorePlan on a Neuron instance, else None
    serve_timeout: float = 900.0  # seconds a server the check starts may take to answer (compiles at warm-up)
    image_runner: str = "docker"  # runs a side's --*-image (harness.release.images)
    inspect_on_fail: str = "device"  # the evidence round on FAIL: on a device only, always, never
    gate_work: float | None = None  # --gate-work: the host-work gate's tolerance in percent (None: off)
    timer: str = "auto"  # --timer: auto (process CPU time where both sides run on the host), cpu, or wall
    shared_runtime: str | None = None  # --accept-shared-runtime: the runtime mismatch the user accepted (verdict)
    legs: tuple[str, ...] = ()  # --legs: the output contract's legs (harness.release.legs); () the sides' dtype alone


    @property
    def served(self) -> bool:
        return "openai" in (self.baseline.backend, self.candidate.backend)

    @property
    def in_process(self) -> bool:
        """Both sides compute in their own process on the CPU (NxDI's CPU mode, transformers): one torch thread
        each. A served side's work is in its server."""
        return not self.served and (self.cpu or {self.baseline.backend, self.candidate.backend} == {"hf"})

    @property
    def cpu_time(self) -> bool:
        """Timed in process CPU time: on the host unless ``--timer wall`` (a sleep or a wait is spent in wall
        time only, and a CPU-time timer cannot see it); a served side's work is in its server: wall time."""
        return self.in_process and self.timer != "wall"

    @property
    def mode(self) -> str:
        stacks = f"{self.baseline.backend} -> {self.candidate.backend}"
        if not self.perf:
            return f"{stacks}, conformance only (the correctness half: no perf rounds)"
        if self.cpu_time:
            return f"{stacks}, on the CPU (process CPU time, one torch thread)"
        if self.in_process:
            return f"{stacks}, on the CPU (wall time, --timer wall: a busy neighbour core shows in it; one torch thread)"
        if self.served and self.core_plan is not None and self.core_plan.exclusive:
            return (f"{stacks}, wall time; the sides cannot hold their NeuronCores at once ({self.core_plan.instance}): "
                    "a served side's server is stopped during the other side's turns and started again for its own, "
                    "each round a fresh client process")
        if self.served:
            return (f"{stacks}, wall time; each served side on one server for the whole check (the other side's "
                    "paused during each round), each round a fresh client process")
        return f"{stacks}, device (wall time)"


def pytest_args(plan: CheckPlan, side: Side) -> list[str]:
    """Both sides' options; paths in the ``--opt=PATH`` form, which pytest never takes for a test
    path (a bare path argument would move the rootdir and rename every test)."""
    args = ["-p", "no:cacheprovider", "-q", "--carbon-backend", side.backend]
    for model in plan.models:
        args.append(f"--carbon-model={model}")
    for shape in plan.shapes:
        args += ["--carbon-shape", shape]
    if plan.model_root is not None:
        args.append(f"--carbon-model-root={plan.model_root}")
    if plan.cache_dir is not None:
        args.append(f"--carbon-cache-dir={plan.cache_dir}")
    if plan.cpu and side.backend == "neuron":
        args += ["--carbon-neuron-cpu", f"--carbon-nxdi-source={side.nxdi_source}"]
    if side.backend == "hf":
        args += ["--carbon-device", "cpu"]  # a transformers release is qualified on the CPU, in CPU time
    if side.backend == "openai":
        args.append(f"--carbon-endpoint={side.endpoint}")
        if side.started:
            args.append(f"--carbon-served-model={served_name(plan)}")
    if side.dtype:
        args += ["--carbon-dtype", side.dtype]
    return args


def served_name(plan: CheckPlan) -> str:
    return Path(plan.models[0]).name


def side_env(plan: CheckPlan, side: Side) -> dict[str, str]:
    """Both sides draw the same Hypothesis examples (a property the dev profile's random draws
    break on one side only would read as an outcome change), and timed in CPU time run torch on one
    thread; then this side's own variables."""
    extra = {"HYPOTHESIS_PROFILE": "ci", **plan.extra_env}
    if plan.in_process:
        extra.setdefault("OMP_NUM_THREADS", "1")
    if side.cores is not None and side.backend == "neuron":  # a served side's cores are its server's
        extra["NEURON_RT_VISIBLE_CORES"] = side.cores
    env = child_env({**extra, **dict(side.env)})
    if side.backend == "openai" and NXDI_SOURCE_ENV not in dict(side.env):
        # a served side runs no NxDI (its CPU tier skips there): the user's exported tree (the migration's step 6)
        # is the NxDI side's, given it as --*-nxdi-source; read by the served side's pytest it would import NxDI
        # in the serving venv's transformers, and its errors would read as outcome changes
        env.pop(NXDI_SOURCE_ENV, None)
    return env


def contract_dir(plan: CheckPlan, who: str) -> Path:
    return plan.out / who / "contract"


def conformance_command(plan: CheckPlan, side: Side, junit: Path) -> list[str]:
    cmd = [side.python, "-m", "pytest", "-m", plan.conformance_markers, *pytest_args(plan, side),
           f"--junitxml={junit}", f"--carbon-contract-out={contract_dir(plan, side.name)}"]
    if plan.reference:
        cmd.append(f"--carbon-contract-reference={contract_dir(plan, 'reference')}")
    return cmd


def reference_command(plan: CheckPlan, junit: Path) -> list[str]:
    """The output contract's reference: transformers in fp32 on the CPU, in this interpreter, on the
    same checkpoints and shapes as both sides."""
    reference = Side("reference", sys.executable, backend="hf")
    return [sys.executable, "-m", "pytest", CONTRACT_TEST, "-m", "contract", *pytest_args(plan, reference),
            "--carbon-dtype", "fp32", f"--junitxml={junit}",
            f"--carbon-contract-out={contract_dir(plan, 'reference')}"]


def perf_selection(plan: CheckPlan) -> str | None:
    """pytest -k of the perf rounds: a served side times only the static batch a client can send
    (``test_e2e``); the user's ``--perf-select`` narrows it further."""
    if not plan.served:
        return plan.perf_select
    return f"test_e2e and ({plan.perf_select})" if plan.perf_select else "test_e2e"


def perf_command(plan: CheckPlan, side: Side, bench_json: Path, junit: Path) -> list[str]:
    cmd = [side.python, "-m", "pytest", "-m", "perf", *plan.perf_tests, *pytest_args(plan, side),
           "--carbon-runs", str(plan.runs), f"--benchmark-json={bench_json}", f"--junitxml={junit}"]
    select = perf_selection(plan)
    if select:
        cmd += ["-k", select]
    if plan.cpu_time:
        cmd += ["--benchmark-timer", "time.process_time"]
    return cmd
