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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.results import ReportError, load_results, parse_junit
from harness.analysis.verdict import SideReport, Verdict, cannot_run, decide, still_open
from harness.core.sequential import Design
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_json, atomic_write_text

CONFORMANCE_MARKERS = "compat or neuron or dna"
PERF_TESTS = ("tests/perf/test_latency.py",)
# Set by an outer pytest / pytest-xdist run; a child that inherits them believes it is a worker.
OUTER_RUN_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
                 "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "NEURON_RT_VISIBLE_CORES")
# pytest's exit codes that mean the session never ran its tests (usage error, internal error,
# interrupted); 0, 1 (some failed) and 5 (none collected) mean it ran.
SESSION_ERRORS = {2: "interrupted", 3: "internal error", 4: "usage error"}


class ReleaseCheckError(ValueError):
    """The check cannot be run as asked (a side that does not exist, a baseline that cannot run)."""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what an outer pytest run set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_RUN_ENV}
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Side:
    name: str  # "baseline" or "candidate"
    python: str
    nxdi_source: Path | None = None  # CPU mode: the NxDI tree this side imports

    def label(self) -> str:
        return str(self.nxdi_source) if self.nxdi_source is not None else self.python


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

    @property
    def mode(self) -> str:
        return "NxDI CPU mode (process CPU time, one torch thread)" if self.cpu else "device (wall time)"


def pytest_args(plan: CheckPlan, side: Side) -> list[str]:
    """Both sides' options; paths in the ``--opt=PATH`` form, which pytest never takes for a test
    path (a bare path argument would move the rootdir and rename every test)."""
    args = ["-p", "no:cacheprovider", "-q", "--carbon-backend", "neuron"]
    for model in plan.models:
        args.append(f"--carbon-model={model}")
    for shape in plan.shapes:
        args += ["--carbon-shape", shape]
    if plan.model_root is not None:
        args.append(f"--carbon-model-root={plan.model_root}")
    if plan.cache_dir is not None:
        args.append(f"--carbon-cache-dir={plan.cache_dir}")
    if plan.cpu:
        args += ["--carbon-neuron-cpu", f"--carbon-nxdi-source={side.nxdi_source}"]
    return args


def side_env(plan: CheckPlan) -> dict[str, str]:
    """Both sides draw the same Hypothesis examples (a property the dev profile's random draws
    break on one side only would read as an outcome change), and in CPU mode run torch on one thread."""
    extra = {"HYPOTHESIS_PROFILE": "ci", **plan.extra_env}
    if plan.cpu:
        extra.setdefault("OMP_NUM_THREADS", "1")
    return child_env(extra)


def conformance_command(plan: CheckPlan, side: Side, junit: Path) -> list[str]:
    return [side.python, "-m", "pytest", "-m", plan.conformance_markers, *pytest_args(plan, side),
            f"--junitxml={junit}"]


def perf_command(plan: CheckPlan, side: Side, bench_json: Path, junit: Path) -> list[str]:
    cmd = [side.python, "-m", "pytest", "-m", "perf", *plan.perf_tests, *pytest_args(plan, side),
           "--carbon-runs", str(plan.runs), f"--benchmark-json={bench_json}", f"--junitxml={junit}"]
    if plan.perf_select:
        cmd += ["-k", plan.perf_select]
    if plan.cpu:
        cmd += ["--benchmark-timer", "time.process_time"]
    return cmd


def probe_side(plan: CheckPlan, side: Side) -> dict[str, Any]:
    """The side's versions, asked of its own interpreter; an interpreter that cannot import this
    checkout's harness is refused, naming the install command."""
    cmd = [side.python, "-m", "harness.release.probe"]
    if side.nxdi_source is not None:
        cmd += ["--nxdi-source", str(side.nxdi_source)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=side_env(plan))
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
            engines[f"{e.get('model')}/{e.get('shape')}"] = record
    return results, engines


def run_round(plan: CheckPlan, side: Side, k: int, report: SideReport, timeout: float) -> str:
    """Round ``k`` of one side, a fresh process; its results land under index ``k`` (a round that
    left none is recorded with its exit code and last error line). Returns a progress line."""
    folder = plan.out / side.name
    bench, junit = folder / f"perf-round-{k}.json", folder / f"perf-round-{k}.xml"
    t0 = time.perf_counter()
    rc, text = run_logged(perf_command(plan, side, bench, junit), folder / f"perf-round-{k}.log", side_env(plan),
                          timeout)
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


def run_check(plan: CheckPlan, tolerances: Tolerances, confidence: float,
              progress: Callable[[str], None] = lambda m: print(f"[release-check] {m}", file=sys.stderr,
                                                                flush=True)) -> Verdict:
    """Both sides' runs, then the verdict; every file lands under ``plan.out``. Raises
    ReleaseCheckError when the baseline itself cannot run (there is then nothing to qualify against)."""
    start = time.perf_counter()
    sides = (plan.baseline, plan.candidate)
    reports = {s.name: SideReport(s.name) for s in sides}
    timeout = 3600.0
    for side in sides:
        reports[side.name].versions = probe_side(plan, side)
        progress(f"{side.name}: {side.label()} (NxDI {reports[side.name].versions.get('nxdi_version', '?')})")
    if plan.conformance:
        for side in sides:
            folder = plan.out / side.name
            junit = folder / "conformance.xml"
            progress(f"{side.name}: conformance tiers (-m '{plan.conformance_markers}')")
            t0 = time.perf_counter()
            rc, text = run_logged(conformance_command(plan, side, junit), folder / "conformance.log", side_env(plan),
                                  timeout)
            error = session_error(rc, text, "the conformance run")
            if error:
                reports[side.name].session_errors.append(error)
            reports[side.name].outcomes.update(read_outcomes(junit))
            progress(f"{side.name}: conformance exit {rc} in {time.perf_counter() - t0:.0f} s")
    blocked = cannot_run(reports[plan.candidate.name])
    if blocked:
        progress(f"candidate cannot run ({blocked[0]}): perf rounds skipped, the verdict is FAIL")
    design = plan.design
    for k in range(1, 0 if blocked else design.max_pairs + 1):
        lines = [run_round(plan, side, k, reports[side.name], timeout) for side in (sides if k % 2 else sides[::-1])]
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
    baseline = reports[plan.baseline.name]
    problems = cannot_run(baseline) or ([] if baseline.rounds or baseline.outcomes else ["it produced no results"])
    if not problems and baseline.ran and not baseline.rounds:
        problems = [f"none of its {len(baseline.ran)} perf rounds produced results (round 1: {baseline.why(1)})"]
    if problems:
        raise ReleaseCheckError("the baseline cannot run, so there is nothing to qualify against: "
                                + "; ".join(problems)
                                + f" (logs in {plan.out / plan.baseline.name})")
    verdict = decide(baseline, reports[plan.candidate.name], tolerances, confidence, plan.mode, design)
    verdict.wall_s = time.perf_counter() - start
    write_verdict(plan.out, verdict)
    return verdict


def write_verdict(out: Path, verdict: Verdict) -> None:
    atomic_write_json(out / "verdict.json", verdict.to_dict())
    atomic_write_text(out / "verdict.md", verdict.markdown() + "\n")
