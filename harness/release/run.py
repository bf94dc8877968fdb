"""Running a release check: each side's suite and perf rounds in subprocesses, the evidence on disk.

Each side is an interpreter (``--baseline-python`` / ``--candidate-python``: an environment with one
Neuron SDK release installed, the harness installed from this checkout) or, in NxDI's CPU mode, an
NxDI source tree run by this interpreter. Per side: the conformance tiers once (``-m "compat or
neuron or dna"``, JUnit XML), then the perf job in fresh processes, one pair of rounds at a time,
interleaved A B, B A, A B... so that drift on the machine hits both sides alike. Pairs are added until
the sequential rule (``harness.core.sequential``) has decided every gated figure, between the
design's minimum and maximum; round ``k`` of one side is only ever compared with round ``k`` of the
other, and a round that left nothing is recorded with its error, never skipped over. In CPU mode each
process runs torch on one thread and pytest-benchmark times with ``time.process_time``: a busy neighbour
disturbs process CPU time less than wall time. Compiled artifacts (on a device) are built once per
side into the shared cache (their keys differ by NxDI build) and reused by every later round.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.contract import ContractResult
from harness.analysis.results import ReportError, load_results, parse_junit
from harness.analysis.verdict import SideReport, Verdict, cannot_run, decide, still_open
from harness.core.sequential import Design
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_json, atomic_write_text
from harness.release.errors import ReleaseCheckError

CONFORMANCE_MARKERS = "compat or neuron or dna"
PERF_TESTS = ("tests/perf/test_latency.py",)
CONTRACT_TEST = "tests/compat/test_contract.py"
# Set by an outer pytest / pytest-xdist run; a child that inherits them believes it is a worker.
OUTER_RUN_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
                 "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "NEURON_RT_VISIBLE_CORES")
# pytest's exit codes that mean the session never ran its tests (usage error, internal error,
# interrupted); 0, 1 (some failed) and 5 (none collected) mean it ran.
SESSION_ERRORS = {2: "interrupted", 3: "internal error", 4: "usage error"}


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what an outer pytest run set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_RUN_ENV}
    env.update(extra or {})
    return env


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
    dtype: str | None = None  # a served side's dtype, where known (the check starts its servers in fp32)
    env: tuple[tuple[str, str], ...] = ()  # this side's own environment variables (--baseline-env K=V)
    started: bool = False  # the check started this side's server

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

    @property
    def served(self) -> bool:
        return "openai" in (self.baseline.backend, self.candidate.backend)

    @property
    def cpu_time(self) -> bool:
        """Both sides compute in their own process on the CPU (NxDI's CPU mode, transformers): timed in
        process CPU time on one torch thread. A served side's work is in its server: wall time for both."""
        return not self.served and (self.cpu or {self.baseline.backend, self.candidate.backend} == {"hf"})

    @property
    def mode(self) -> str:
        stacks = f"{self.baseline.backend} -> {self.candidate.backend}"
        if self.cpu_time:
            return f"{stacks}, on the CPU (process CPU time, one torch thread)"
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
    if plan.cpu_time:
        extra.setdefault("OMP_NUM_THREADS", "1")
    return child_env({**extra, **dict(side.env)})


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


def probe_side(plan: CheckPlan, side: Side, serve: list[str] | None = None) -> dict[str, Any]:
    """The side's versions (and, ``serve``: its vLLM server's arguments, its engine configuration),
    asked of its own interpreter; an interpreter that cannot import this checkout's harness is refused,
    naming the install command."""
    cmd = [side.python, "-m", "harness.release.probe"]
    if side.nxdi_source is not None:
        cmd += ["--nxdi-source", str(side.nxdi_source)]
    if serve is not None:
        cmd += ["--serve-args", json.dumps(serve)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                           env=side_env(plan, side))
    except OSError as exc:
        raise ReleaseCheckError(f"--{side.name}-python {side.python}: cannot run it ({exc})") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReleaseCheckError(f"the {side.name} environment ({side.label()}) cannot import this harness: {last}; "
                                f"install it there with `{side.python} -m pip install -e {REPO_ROOT}`")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    if Path(info["harness_root"]).resolve() != REPO_ROOT.resolve():
        raise ReleaseCheckError(f"the {side.name} environment ({side.python}) imports the harness from "
                                f"{info['harness_root']}, not this checkout ({REPO_ROOT}): install it with "
                                f"`{side.python} -m pip install -e {REPO_ROOT}`")
    return info


# a pytest usage error, or an exception's message: not a traceback's "file:line: Error" nor the harness's
# informational "carbon-harness: ..." lines
ERROR_LINE = re.compile(r"^ERROR: carbon-harness:|\w(Error|Exception): ")


def last_error_line(log_text: str) -> str:
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    line = next((ln for ln in reversed(lines) if ERROR_LINE.search(ln)), None)
    line = line or next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return line.removeprefix("ERROR: ").removeprefix("E ").strip()


def session_error(rc: int, log_text: str, what: str) -> str | None:
    """Why a pytest run stopped before its tests, from its exit code and last error line."""
    if rc not in SESSION_ERRORS:
        return None
    return f"{what} stopped ({SESSION_ERRORS[rc]}, exit {rc}): {last_error_line(log_text)}"


def run_logged(cmd: Sequence[str], log: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Run ``cmd`` in this checkout with its output in ``log``; returns the exit code and the output."""
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(list(cmd), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 2, f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout_s:.0f} s"
    atomic_write_text(log, " ".join(cmd) + "\n\n" + text)
    return rc, text


def read_outcomes(junit: Path) -> dict[str, Any]:
    return parse_junit(junit.read_text(), str(junit)) if junit.is_file() else {}


def read_round(bench_json: Path) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """A perf round's results and its engines' load / compile seconds and whether they compiled
    (``model/shape`` -> record)."""
    if not bench_json.is_file():
        return [], {}
    try:
        results, manifest = load_results(bench_json)
    except ReportError:
        return [], {}
    engines: dict[str, dict[str, Any]] = {}
    for e in manifest.get("engines") or []:
        if isinstance(e, dict) and e.get("role") is None:
            record: dict[str, Any] = {k: float(e[k]) for k in ("load_s", "compile_s")
                                      if isinstance(e.get(k), (int, float))}
            if isinstance(e.get("compile"), str):
                record["compile"] = e["compile"]
            if isinstance(e.get("config"), dict):
                record["config"] = e["config"]
            engines[f"{e.get('model')}/{e.get('shape')}"] = record
    return results, engines


def run_round(plan: CheckPlan, side: Side, k: int, report: SideReport, timeout: float) -> str:
    """Round ``k`` of one side, a fresh process; its results land under index ``k`` (a round that
    left none is recorded with its exit code and last error line). Returns a progress line."""
    folder = plan.out / side.name
    bench, junit = folder / f"perf-round-{k}.json", folder / f"perf-round-{k}.xml"
    t0 = time.perf_counter()
    rc, text = run_logged(perf_command(plan, side, bench, junit), folder / f"perf-round-{k}.log",
                          side_env(plan, side), timeout)
    results, engines = read_round(bench)
    outcomes = read_outcomes(junit)
    if k == 1:
        report.outcomes.update({f"{t} (perf)": o for t, o in outcomes.items()})
    report.ran.append(k)
    report.round_outcomes[k] = outcomes
    if rc != 0 or not results:
        report.round_errors[k] = session_error(rc, text, f"perf round {k}") or f"exit {rc}: {last_error_line(text)}"
    if results:
        report.rounds[k] = results
        report.engines[k] = engines
    return f"{side.name}: exit {rc}, {len(results)} benchmarks, {time.perf_counter() - t0:.0f} s"


def start_servers(plan: CheckPlan, progress: Callable[[str], None]) -> tuple[CheckPlan, dict[str, Any],
                                                                          dict[str, float]]:
    """A server for each served side without an endpoint, in that side's interpreter, both started
    side by side; the plan with their endpoints, the servers (stopped by the caller) and each start's
    seconds (from launch to its first answer)."""
    from harness.release.served import ready, served_checkpoint, spawn

    started: dict[str, tuple[Any, float]] = {}
    try:
        for side in (plan.baseline, plan.candidate):
            if side.backend != "openai" or side.endpoint is not None:
                continue
            checkpoint = served_checkpoint(plan.models, plan.model_root, plan.cache_dir)
            started[side.name] = (spawn(side.name, side.python, dict(side.env), checkpoint, served_name(plan),
                                        plan.cache_dir, plan.out / side.name / "vllm-server.log", plan.serve_args,
                                        progress), time.perf_counter())
        starts = {}
        for name, (server, t0) in started.items():
            ready(name, server, progress)
            starts[name] = time.perf_counter() - t0
            progress(f"{name}: vLLM listening at {server.url} after {starts[name]:.0f} s")
    except BaseException:
        for server, _ in started.values():
            server.stop()
        raise
    sides = [replace(s, endpoint=started[s.name][0].url, dtype="fp32", started=True) if s.name in started else s
             for s in (plan.baseline, plan.candidate)]
    return replace(plan, baseline=sides[0], candidate=sides[1]), {n: s for n, (s, _) in started.items()}, starts


def probe_args(side: Side, servers: dict[str, Any]) -> list[str] | None:
    """The vLLM arguments of the server the check started for ``side`` (its engine configuration is then
    asked of the side's vLLM), else None."""
    from harness.release.served import serve_args

    return serve_args(servers[side.name]) if side.name in servers else None


def conformance(plan: CheckPlan, reports: dict[str, SideReport], timeout: float,
                progress: Callable[[str], None]) -> None:
    """The output contract's reference, then each side's conformance tiers (its contract among them)."""
    if plan.reference:
        progress("reference: the output contract in fp32 transformers (this interpreter)")
        rc, text = run_logged(reference_command(plan, plan.out / "reference" / "contract.xml"),
                              plan.out / "reference" / "contract.log", side_env(plan, Side("reference", sys.executable,
                                                                                           backend="hf")), timeout)
        if rc != 0:
            raise ReleaseCheckError(f"the output contract's fp32 reference did not run (exit {rc}): "
                                    f"{last_error_line(text)} (log in {plan.out / 'reference'})")
    for side in (plan.baseline, plan.candidate):
        folder = plan.out / side.name
        junit = folder / "conformance.xml"
        progress(f"{side.name}: conformance tiers (-m '{plan.conformance_markers}')")
        t0 = time.perf_counter()
        rc, text = run_logged(conformance_command(plan, side, junit), folder / "conformance.log",
                              side_env(plan, side), timeout)
        error = session_error(rc, text, "the conformance run")
        if error:
            reports[side.name].session_errors.append(error)
        reports[side.name].outcomes.update(read_outcomes(junit))
        progress(f"{side.name}: conformance exit {rc} in {time.perf_counter() - t0:.0f} s")


def judge_contracts(plan: CheckPlan, reports: dict[str, SideReport]) -> dict[str, ContractResult]:
    """The output contract of every (model, shape) the reference wrote, both sides against it. A side
    that wrote none: the candidate's is a reason, the baseline's a note (with its test's outcome)."""
    from harness.analysis.contract import judge_contract, load_tolerances

    reference = contract_dir(plan, "reference")
    if not plan.conformance or not plan.reference or not reference.is_dir():
        return {}
    tolerances = load_tolerances()
    out = {}
    for ref_file in sorted(reference.glob("contract-*.json")):
        key = ref_file.stem.removeprefix("contract-")
        files = {who: contract_dir(plan, who) / ref_file.name for who in ("baseline", "candidate")}
        missing = [who for who, f in files.items() if not f.is_file()]
        ran = {who: any("test_output_contract" in t for t in reports[who].outcomes) for who in files}
        if missing and not any(ran.values()):  # the conformance markers left the contract out on both sides
            out[key] = ContractResult(notes=[f"not measured: -m '{plan.conformance_markers}' selects no "
                                             "test_output_contract (the output contract is compat / contract)"])
            continue
        if missing:
            result = ContractResult()
            for who in missing:
                outcome = next((o for t, o in reports[who].outcomes.items() if "test_output_contract" in t), None)
                said = f"{outcome.outcome}: {outcome.message.strip()[:200]}" if outcome else \
                    f"not selected by -m '{plan.conformance_markers}'"
                line = f"the {who} wrote no output contract for {key} (test_output_contract {said})"
                (result.reasons if who == "candidate" else result.notes).append(line)
            out[key] = result
            continue
        base, new, ref = (json.loads(f.read_text()) for f in (files["baseline"], files["candidate"], ref_file))
        out[key] = judge_contract(base, new, ref, tolerances)
    return out


def engine_config(report: SideReport) -> dict[str, Any]:
    """An in-process side's engine configuration, from its first perf round's engines (one engine: its
    config; several: keyed by model/shape)."""
    first = min(report.engines, default=None)
    configs = {k: e["config"] for k, e in (report.engines.get(first) or {}).items() if e.get("config")}
    return next(iter(configs.values())) if len(configs) == 1 else configs


def perf_rounds(plan: CheckPlan, reports: dict[str, SideReport], tolerances: Tolerances, confidence: float,
                timeout: float, progress: Callable[[str], None],
                focus: Callable[[str | None], None] = lambda name: None) -> None:
    """Pairs of rounds until the design has decided every gated figure; ``focus(side)`` runs before each
    round (a served check pauses the other side's server), ``focus(None)`` after the last."""
    sides = (plan.baseline, plan.candidate)

    def one(side: Side, k: int) -> str:
        focus(side.name)
        return run_round(plan, side, k, reports[side.name], timeout)

    try:
        _pairs(plan, reports, tolerances, confidence, progress, lambda k: [one(side, k) for side in
                                                                         (sides if k % 2 else sides[::-1])])
    finally:
        focus(None)


def _pairs(plan: CheckPlan, reports: dict[str, SideReport], tolerances: Tolerances, confidence: float,
           progress: Callable[[str], None], pair: Callable[[int], list[str]]) -> None:
    design = plan.design
    for k in range(1, design.max_pairs + 1):
        lines = pair(k)
        progress(f"pair {k} (at most {design.max_pairs}): " + "; ".join(lines))
        open_figures, failing = still_open(reports[plan.baseline.name], reports[plan.candidate.name], tolerances,
                                           design, confidence)
        if failing:
            progress(f"stopping after {k} pairs: {failing[0]}")
            break
        if k < design.min_pairs:
            continue
        if not open_figures:
            progress(f"every gated figure decided after {k} pairs")
            break
        if k < design.max_pairs:
            progress(f"still open after {k} pairs: {', '.join(open_figures)}")


def run_check(plan: CheckPlan, tolerances: Tolerances, confidence: float,
              progress: Callable[[str], None] = lambda m: print(f"[release-check] {m}", file=sys.stderr,
                                                                flush=True)) -> Verdict:
    """Both sides' runs, then the verdict; every file lands under ``plan.out``. Raises
    ReleaseCheckError when the baseline itself cannot run (there is then nothing to qualify against)."""
    start = time.perf_counter()
    reports = {s.name: SideReport(s.name, backend=s.backend) for s in (plan.baseline, plan.candidate)}
    timeout = 3600.0
    plan, servers, starts = start_servers(plan, progress) if plan.served else (plan, {}, {})
    try:
        for side in (plan.baseline, plan.candidate):
            report = reports[side.name]
            report.versions = probe_side(plan, side, probe_args(side, servers))
            report.config = report.versions.pop("engine_config", None) or {}
            if side.backend == "openai" and not side.started:
                from harness.release.served import endpoint_config

                report.config = endpoint_config(str(side.endpoint))
            if side.name in starts:
                report.versions["vllm_start_s"] = round(starts[side.name], 1)
            stack = report.versions.get("vllm_version") or f"NxDI {report.versions.get('nxdi_version', '?')}"
            progress(f"{side.name}: {side.label()} ({side.backend}, {stack})")
        contracts: dict[str, ContractResult] = {}
        if plan.conformance:
            conformance(plan, reports, timeout, progress)
            contracts = judge_contracts(plan, reports)
        stopped = reports[plan.baseline.name].session_errors
        if stopped:  # an environment that cannot even start its tests: no perf round can run there either
            raise ReleaseCheckError("the baseline cannot run, so there is nothing to qualify against: "
                                    + "; ".join(stopped) + f" (logs in {plan.out / plan.baseline.name})")
        broken = [f"output contract ({k}): {r}" for k, c in contracts.items() for r in c.reasons]
        blocked = cannot_run(reports[plan.candidate.name]) + broken
        if blocked:
            progress(f"the verdict is FAIL ({blocked[0]}): perf rounds skipped")
        else:
            from harness.release.served import focus

            perf_rounds(plan, reports, tolerances, confidence, timeout, progress,
                        lambda name: focus(servers, name))
    finally:
        if servers:
            from harness.release.served import focus

            focus(servers, None)  # a paused server would not hear its SIGTERM
        for server in servers.values():
            progress(f"stopping vLLM (pid {server.proc.pid}); its log: {server.log_path}")
            server.stop()
    for report in reports.values():
        if report.backend != "openai":
            report.config = engine_config(report)
    baseline = reports[plan.baseline.name]
    problems = cannot_run(baseline) or ([] if baseline.rounds or baseline.outcomes else ["it produced no results"])
    if not problems and baseline.ran and not baseline.rounds:
        problems = [f"none of its {len(baseline.ran)} perf rounds produced results (round 1: {baseline.why(1)})"]
    if problems:
        raise ReleaseCheckError("the baseline cannot run, so there is nothing to qualify against: "
                                + "; ".join(problems)
                                + f" (logs in {plan.out / plan.baseline.name})")
    verdict = decide(baseline, reports[plan.candidate.name], tolerances, confidence, plan.mode, plan.design,
                     contracts)
    verdict.wall_s = time.perf_counter() - start
    write_verdict(plan.out, verdict)
    return verdict


def write_verdict(out: Path, verdict: Verdict) -> None:
    atomic_write_json(out / "verdict.json", verdict.to_dict())
    atomic_write_text(out / "verdict.md", verdict.markdown() + "\n")
