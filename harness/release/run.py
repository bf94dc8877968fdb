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
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.analysis.compare import Tolerances
from harness.analysis.contract import ContractResult
from harness.analysis.pairing import SideReport
from harness.analysis.verdict import Verdict, cannot_run, decide
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_write_json, atomic_write_text
from harness.release.children import last_error_line, run_logged
from harness.release.errors import ReleaseCheckError
from harness.release.plan import (
    CheckPlan,
    Side,
    conformance_command,
    contract_dir,
    reference_command,
    served_name,
    side_env,
)
from harness.release.devices import device_records, focus_on
from harness.release.images import side_process
from harness.release.legs_run import judge_legs, own_sides
from harness.release.rounds import perf_rounds
from harness.release.side_tests import run_side_tests


def probe_side(plan: CheckPlan, side: Side, serve: list[str] | None = None) -> dict[str, Any]:
    """The side's versions (and, ``serve``: its vLLM server's arguments, its engine configuration),
    asked of its own interpreter; an interpreter that cannot import this checkout's harness is refused,
    naming the install command."""
    cmd = [side.python, "-m", "harness.release.probe"]
    if side.nxdi_source is not None:
        cmd += ["--nxdi-source", str(side.nxdi_source)]
    if serve is not None:
        cmd += ["--serve-args", json.dumps(serve)]
    cmd, env = side_process(plan, side, cmd)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env)
    except OSError as exc:
        raise ReleaseCheckError(f"--{side.name}-python {side.python}: cannot run it ({exc})") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        if "No module named 'harness" not in last:  # the harness ran: what it asked of the side failed
            raise ReleaseCheckError(f"the {side.name} environment ({side.label()}) cannot be probed: {last}")
        raise ReleaseCheckError(f"the {side.name} environment ({side.label()}) cannot import this harness: {last}; "
                                f"install it there with `{side.python} -m pip install -e {REPO_ROOT}`")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    if Path(info["harness_root"]).resolve() != REPO_ROOT.resolve():
        raise ReleaseCheckError(f"the {side.name} environment ({side.python}) imports the harness from "
                                f"{info['harness_root']}, not this checkout ({REPO_ROOT}): install it with "
                                f"`{side.python} -m pip install -e {REPO_ROOT}`")
    return info


def started_dtype(side: Side) -> str:
    """The ``--dtype`` of the server the check starts for ``side``: its ``--*-dtype``, else fp32 (vLLM on
    a CPU); the side is then labelled with what its server was given, never by default."""
    return side.dtype or "fp32"


def start_servers(plan: CheckPlan, progress: Callable[[str], None]) -> tuple[CheckPlan, dict[str, Any],
                                                                          dict[str, float], list[dict[str, Any]]]:
    """A server for each served side without an endpoint, in that side's interpreter (or through its
    ``--*-serve-script``), on its NeuronCores, both started side by side; the plan with their endpoints, the
    servers (stopped by the caller), each start's seconds (from launch to its first answer) and what each
    server process got (``harness.release.cores.read_back``). Where the sides cannot hold their cores at once
    (``exclusive``), none is started here: the focus starts each for its side's turns."""
    from harness.release.cores import read_back
    from harness.release.images import image_command
    from harness.release.served import ready, served_checkpoint, server_env, spawn, stop_started, timed_server

    exclusive = plan.core_plan is not None and plan.core_plan.exclusive
    started: dict[str, tuple[Any, float]] = {}
    read_backs: list[dict[str, Any]] = []
    starts = {}
    try:
        for side in (plan.baseline, plan.candidate):
            if side.backend != "openai" or side.endpoint is not None:
                continue
            if side.serve_script and len(plan.shapes) != 1:
                raise ReleaseCheckError(f"--{side.name}-serve-script starts a server compiled for one shape: give one "
                                        f"--shape (one served leg per shape), not {', '.join(plan.shapes)}")
            checkpoint = served_checkpoint(plan.models, plan.model_root, plan.cache_dir)
            server = spawn(side.name, side.python, server_env(side, plan.serve_timeout), checkpoint,
                           served_name(plan), plan.cache_dir, plan.out / side.name / "vllm-server.log",
                           plan.serve_args, progress, side.dtype, script=side.serve_script, shape=plan.shapes[0],
                           start=False, ready_timeout_s=plan.serve_timeout)
            if not plan.conformance:  # perf rounds only: started as users start a timed server
                timed_server(server)
            if side.image is not None and hasattr(server, "wrap"):
                server.wrap = lambda cmd, env, side=side: image_command(plan, side, cmd, env)
            if not exclusive:
                server.start()
                progress(f"{side.name}: starting vLLM (pid {server.proc.pid}) on {server.url}, log {server.log_path}")
            started[side.name] = (server, time.perf_counter())
        for name, (server, t0) in started.items():
            if exclusive:
                continue
            ready(name, server, progress, plan.serve_timeout)
            starts[name] = time.perf_counter() - t0
            progress(f"{name}: vLLM listening at {server.url} after {starts[name]:.0f} s")
            if plan.core_plan is not None:
                read_backs += read_back(name, server, getattr(plan, name).cores)
    except BaseException:
        stop_started({n: s for n, (s, _) in started.items()}, progress)
        raise
    sides = [replace(s, endpoint=started[s.name][0].url, dtype=started[s.name][0].dtype, started=True)
             if s.name in started else s for s in (plan.baseline, plan.candidate)]
    return (replace(plan, baseline=sides[0], candidate=sides[1]), {n: s for n, (s, _) in started.items()}, starts,
            read_backs)


def warming(plan: CheckPlan, servers: dict[str, Any], progress: Callable[[str], None]) -> Callable[[str], None]:
    """``warm(side)``: that side's server, just resumed for a round, gets its untimed warm-up batches
    (``harness.release.served.warm_up``) before the round's process starts."""
    if not servers:
        return lambda name: None
    from harness.release.served import served_checkpoint, warm_rows, warm_up

    batches = warm_rows(served_checkpoint(plan.models, plan.model_root, plan.cache_dir), plan.shapes)

    def warm(name: str) -> None:
        failed = warm_up(servers[name], served_name(plan), batches)
        if failed:
            progress(f"{name}: {len(failed)} warm-up request(s) failed ({failed[0]}); the round reports it")

    return warm


def work_of(plan: CheckPlan, verdict: Verdict, reports: dict[str, SideReport]) -> Any:
    """The verdict's "Work per step" (``harness.analysis.work_section``), the timing figures that failed named."""
    from harness.analysis.work_section import work_section
    from harness.core.sequential import FAIL

    failed: dict[str, float | None] = {}
    for f in verdict.figures:  # each failed benchmark: its largest timing change
        if f.state == FAIL:
            failed[f.benchmark] = max(filter(None, (failed.get(f.benchmark), f.change)), default=None)
    return work_section(reports[plan.baseline.name], reports[plan.candidate.name], failed, plan.gate_work)


def environment_lines(baseline: SideReport, candidate: SideReport) -> list[str]:
    """Where the sides' environments differ (``harness.core.process_environment``: module path, start hooks,
    preloads, thread and allocator settings, Neuron driver), each difference becomes a row of the side table
    (``env ...``, ``hook ...``, in both sides' versions) and the note under the verdict that names them."""
    from harness.core.process_environment import differences

    found = differences(baseline.versions.get("environment") or {}, candidate.versions.get("environment") or {})
    for key, base, new in found:
        baseline.versions[key], candidate.versions[key] = base, new
    if not found:
        return []
    return [f"**Note: the sides' environments differ in {', '.join(k for k, _, _ in found)}**: a module path, a "
            "start hook, a preload or a thread setting can change numbers by itself; the side table shows each.", ""]


def restart_timed(plan: CheckPlan, servers: dict[str, Any], reports: dict[str, SideReport],
                  progress: Callable[[str], None], events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each server the check started, started again as users start one they time (``--max-logprobs 0``:
    ``harness.release.served.timed_server``) before the perf rounds; the output contract, which needs
    logprobs, had it with its top-k. Where the sides take turns on their NeuronCores the focus starts it for
    its first round; otherwise it is started here and its cores read back. Both settings go in the side's
    versions (the verdict's side table). Returns the read-backs; a stop is added to ``events``."""
    from harness.release.cores import read_back
    from harness.release.served import ready, served_logprobs, server_settings, timed_server

    exclusive = plan.core_plan is not None and plan.core_plan.exclusive
    read_backs: list[dict[str, Any]] = []
    for name, server in servers.items():
        versions = reports[name].versions
        versions.setdefault("max_logprobs_contract", served_logprobs(server) if plan.conformance else "-")
        versions.setdefault("server_contract", server_settings(server)["server"] if plan.conformance else "-")
        if plan.conformance:
            progress(f"{name}: restarting its vLLM server as a timed one (--max-logprobs 0) for the perf rounds")
            running = server.proc is not None and server.proc.poll() is None
            server.stop()
            if running and events is not None:  # the NeuronCore turns' record (ExclusiveFocus.events)
                events.append({"server": name, "action": "stop", "for": "the perf rounds' timed server"})
            timed_server(server)
            if not exclusive:
                server.start()
                ready(name, server, progress, plan.serve_timeout)
                if plan.core_plan is not None:
                    read_backs += read_back(name, server, getattr(plan, name).cores)
        versions["max_logprobs_perf"] = served_logprobs(server)
        versions["server_timed"] = (timed := server_settings(server))["server"]
        reports[name].config["timed_server"] = timed  # both servers' settings in the drift table
    return read_backs


def probe_args(side: Side, servers: dict[str, Any]) -> list[str] | None:
    """The vLLM arguments of the server the check started for ``side`` (its engine configuration is then
    asked of the side's vLLM), else None."""
    from harness.release.served import serve_args

    return serve_args(servers[side.name]) if side.name in servers else None


def conformance(plan: CheckPlan, reports: dict[str, SideReport], timeout: float,
                progress: Callable[[str], None], focus: Callable[[str | None], None] = lambda name: None) -> None:
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
        focus(side.name)
        progress(f"{side.name}: conformance tiers (-m '{plan.conformance_markers}')")
        t0 = time.perf_counter()
        rc = run_side_tests(plan, side, conformance_command(plan, side, junit), junit, folder / "conformance.log",
                            "the conformance run", reports[side.name], timeout)
        progress(f"{side.name}: conformance exit {rc} in {time.perf_counter() - t0:.0f} s")


def judge_contracts(plan: CheckPlan, reports: dict[str, SideReport], timeout: float = 3600.0,
                    progress: Callable[[str], None] = lambda m: None) -> dict[str, ContractResult]:
    """The output contract of every (model, shape) the reference wrote: the reference and each side's
    yardstick computed in this interpreter on that side's sequences (``harness.workloads.threeway``), then
    each side judged three ways. A side that wrote none: the candidate's is a reason, the baseline's a
    note (with its test's outcome)."""
    from harness.analysis.contract import judge_contract, load_tolerances
    from harness.workloads.threeway import expected_file

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
        result = ContractResult()
        for who in missing:
            outcome = next((o for t, o in reports[who].outcomes.items() if "test_output_contract" in t), None)
            said = f"{outcome.outcome}: {outcome.message.strip()[:200]}" if outcome else \
                f"not selected by -m '{plan.conformance_markers}'"
            line = f"the {who} wrote no output contract for {key} (test_output_contract {said})"
            (result.reasons if who == "candidate" else result.notes).append(line)
        present = {who: f for who, f in files.items() if who not in missing}
        if present:
            folder = reference / "threeway"
            progress(f"reference: the fp32 reference and each side's yardstick on its sequences ({key})")
            cmd = [sys.executable, "-m", "harness.workloads.threeway", f"--reference={ref_file}", f"--out={folder}",
                   *(f"--side={who}={f}" for who, f in present.items())]
            rc, text = run_logged(cmd, plan.out / "reference" / f"threeway-{key}.log",
                                  side_env(plan, Side("reference", sys.executable, backend="hf")), timeout)
            if rc != 0:
                raise ReleaseCheckError(f"the output contract's reference and yardstick did not run (exit {rc}): "
                                        f"{last_error_line(text)} (log in {plan.out / 'reference'})")
            sides = {who: json.loads(f.read_text()) for who, f in present.items()}
            expected = {who: {role: json.loads(expected_file(folder, who, role, key).read_text())
                              for role in ("reference", "yardstick")} for who in present}
            judged = judge_contract(sides, expected, tolerances)
            result.reasons += judged.reasons
            result.notes += judged.notes
            result.sides, result.divergences = judged.sides, judged.divergences
            result.identical, result.prompts = judged.identical, judged.prompts
        out[key] = result
    return out


def engine_config(report: SideReport) -> dict[str, Any]:
    """An in-process side's engine configuration, from its first perf round's engines (one engine: its
    config; several: keyed by model/shape)."""
    first = min(report.engines, default=None)
    configs = {k: e["config"] for k, e in (report.engines.get(first) or {}).items() if e.get("config")}
    return next(iter(configs.values())) if len(configs) == 1 else configs


def run_check(plan: CheckPlan, tolerances: Tolerances, confidence: float,
              progress: Callable[[str], None] = lambda m: print(f"[release-check] {m}", file=sys.stderr,
                                                                flush=True), fail_on_likely: bool = False) -> Verdict:
    """Both sides' runs, then the verdict; every file lands under ``plan.out``. Raises
    ReleaseCheckError when the baseline itself cannot run (there is then nothing to qualify against).
    ``fail_on_likely``: a passed figure likely beyond its tolerance fails the verdict."""
    from harness.release.served import stop_started

    start = time.perf_counter()
    reports = {s.name: SideReport(s.name, backend=s.backend, dtype=s.dtype) for s in (plan.baseline, plan.candidate)}
    timeout = 3600.0
    plan, servers, starts, read_backs = start_servers(plan, progress) if plan.served else (plan, {}, {}, [])
    focus: Callable[[str | None], None] = lambda name: None
    try:  # from here on, whatever stops the check (an error, SIGINT, SIGTERM: CheckStopped) stops its servers
        for side in (plan.baseline, plan.candidate):
            reports[side.name].dtype = side.dtype  # a started server's: the --dtype it was given
        focus = focus_on(servers, plan, progress, warming(plan, servers, progress))
        for side in (plan.baseline, plan.candidate):
            report = reports[side.name]
            report.versions = probe_side(plan, side, probe_args(side, servers))
            report.config = report.versions.pop("engine_config", None) or {}
            if side.backend == "openai":
                from harness.release.served import endpoint_config

                if side.started and servers[side.name].proc is None:  # a NeuronCore turn's, not started yet:
                    focus(side.name)  # what it tells is asked of it running
                told = endpoint_config(str(side.endpoint), served_name(plan) if side.started else None)
                report.config = {**report.config, **told} if side.started else told
            if side.name in starts:
                report.versions["vllm_start_s"] = round(starts[side.name], 1)
            if side.image is not None:
                report.versions["image"] = side.image
            stack = report.versions.get("vllm_version") or f"NxDI {report.versions.get('nxdi_version', '?')}"
            progress(f"{side.name}: {side.label()} ({side.backend}, {stack})")
        contracts: dict[str, ContractResult] = {}
        if plan.conformance:
            conformance(plan, reports, timeout, progress, focus)
            contracts = judge_legs(plan, reports, timeout, progress, judge_contracts, start_servers)  # and fp32's
            for judged in own_sides(contracts):  # its own leg's (the fp32 leg's are that leg's)
                reports[judged.who].dtype = judged.dtype  # what its engines reported computing in
        stopped = reports[plan.baseline.name].session_errors
        if stopped:  # an environment that cannot even start its tests: no perf round can run there either
            raise ReleaseCheckError("the baseline cannot run, so there is nothing to qualify against: "
                                    + "; ".join(stopped) + f" (logs in {plan.out / plan.baseline.name})")
        broken = [f"output contract ({k}): {r}" for k, c in contracts.items() for r in c.reasons]
        blocked = cannot_run(reports[plan.candidate.name]) + broken
        if blocked:
            progress(f"the verdict is FAIL ({blocked[0]}): perf rounds skipped")
        elif not plan.perf:
            progress("--conformance-only: no perf rounds")
        else:
            read_backs += restart_timed(plan, servers, reports, progress, getattr(focus, "events", None))
            perf_rounds(plan, reports, tolerances, confidence, timeout, progress, focus)
    finally:
        focus(None)  # a paused server would not hear its SIGTERM
        for name, seconds in getattr(focus, "starts", {}).items():  # NeuronCore turns: each server's first start
            reports[name].versions.setdefault("vllm_start_s", round(seconds, 1))
        unstopped = stop_started(servers, progress)  # only those started: a turn's may never have been
    if unstopped:
        raise ReleaseCheckError(f"not every vLLM server the check started stopped: {'; '.join(unstopped)}")
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
    environment = environment_lines(reports[plan.baseline.name], reports[plan.candidate.name])
    verdict = decide(baseline, reports[plan.candidate.name], tolerances, confidence, plan.mode, plan.design,
                     contracts, fail_on_likely)
    verdict.config_lines[:0] = environment
    work = work_of(plan, verdict, reports)
    verdict.reasons += work.reasons
    verdict.config_lines += work.markdown()
    extras = device_records(plan, reports, read_backs + getattr(focus, "read_backs", []),
                            getattr(focus, "events", []), verdict.word, progress)
    verdict.config_lines += extras.pop("markdown")
    verdict.wall_s = time.perf_counter() - start
    write_verdict(plan.out, verdict, {**extras, "work": work.to_dict()})
    return verdict


def write_verdict(out: Path, verdict: Verdict, extras: dict[str, Any] | None = None) -> None:
    atomic_write_json(out / "verdict.json", {**verdict.to_dict(), **(extras or {})})
    atomic_write_text(out / "verdict.md", verdict.markdown() + "\n")
