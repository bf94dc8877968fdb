"""What a release check records of the device under it, after its verdict: the NeuronCores each process got
(``harness.release.cores``), the runtime layer each side ran on (``harness.release.runtime_layer``), and on
a FAIL the evidence round (``harness.release.evidence``); and the focus that shares the cores between the
sides' turns. Kept apart from ``harness.release.run`` so that the run stays the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.analysis.pairing import SideReport
from harness.core.verdicts import FAIL
from harness.release.plan import CheckPlan, served_name


def focus_on(servers: dict[str, Any], plan: CheckPlan, progress: Callable[[str], None],
             warm: Callable[[str], Any] | None = None) -> Callable[[str | None], None]:
    """``focus(side)`` before each side's turn (its conformance run, each of its perf rounds): where the
    sides cannot hold their NeuronCores at once, the other side's server is stopped and this side's started
    (``ExclusiveFocus``); otherwise the other side's server is paused (``harness.release.rounds.focus_on``).
    Either way ``warm(side)`` then sends the side's server its untimed warm-up batches (``run.warming``):
    a server started again for its turn is as cold as a resumed one, or colder."""
    if plan.core_plan is not None and plan.core_plan.exclusive and servers:
        from harness.release.cores import ExclusiveFocus
        from harness.release.served import ready

        planned = {s.name: s.cores for s in (plan.baseline, plan.candidate)}
        return ExclusiveFocus(servers, lambda name, server: ready(name, server, progress, plan.serve_timeout),
                              planned, progress, warm)
    from harness.release.rounds import focus_on as pausing

    return pausing(servers, warm)


def evidence_server(progress: Callable[[str], None]) -> Callable[[CheckPlan], tuple[CheckPlan, Any]]:
    """A fresh candidate server with the candidate's variables (the inspect ones among them), for the evidence
    round only: the plan pointing at it, and the server (the caller stops it)."""

    def start(plan: CheckPlan) -> tuple[CheckPlan, Any]:
        from harness.release.images import image_command
        from harness.release.served import ready, served_checkpoint, server_env, spawn

        side = plan.candidate
        server = spawn(side.name, side.python, server_env(side, plan.serve_timeout), served_checkpoint(plan.models, plan.model_root, plan.cache_dir),
                       served_name(plan), plan.cache_dir, plan.out / side.name / "inspect" / "vllm-server.log",
                       plan.serve_args, progress, side.dtype, script=side.serve_script, shape=plan.shapes[0],
                       start=side.image is None, ready_timeout_s=plan.serve_timeout)
        if side.image is not None:
            server.wrap = lambda cmd, env: image_command(plan, side, cmd, env)
            server.start()
        ready(side.name, server, progress, plan.serve_timeout)
        return replace(plan, candidate=replace(side, endpoint=server.url)), server

    return start


def device_records(plan: CheckPlan, reports: dict[str, SideReport], read_backs: list[dict[str, Any]],
                   events: list[dict[str, Any]], word: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """verdict.json's ``neuron_cores``, ``runtime_layer`` and ``evidence``, and their lines for verdict.md
    (``markdown``). ``word``: the verdict's (``harness.core.verdicts``); the evidence round is a FAIL's only
    (an INCONCLUSIVE check has no slow or failing round to show: it needs more rounds)."""
    from harness.release import cores, evidence, runtime_layer

    neuron_cores = cores.record(plan, plan.core_plan, read_backs, events)
    layer = runtime_layer.runtime_layer({name: report.versions for name, report in reports.items()},
                                        {s.name: s.image for s in (plan.baseline, plan.candidate)},
                                        accepted=plan.shared_runtime)
    proof = evidence.run_evidence(plan, evidence_server(progress), progress) if word == FAIL else {}
    own = check_process(plan)
    served = served_notes(plan)
    lines = (cores.markdown(neuron_cores) + runtime_layer.markdown(layer) + evidence.markdown(proof)
             + own.pop("markdown") + [f"Note: {n}." for n in served] + ([""] if served else []))
    return {"neuron_cores": neuron_cores, "runtime_layer": layer, "evidence": proof, "check_process": own,
            "served_notes": served, "markdown": lines}


def served_notes(plan: CheckPlan) -> list[str]:
    """What a served side's figures are at a batched shape (``harness.core.vllm_neuron_args``: the plugin
    prefills one request per step, so the prefill compared is per request), once per shape."""
    from harness.core.spec import get_shape
    from harness.core.vllm_neuron import engine_arguments

    if not any(s.backend == "openai" for s in (plan.baseline, plan.candidate)):
        return []
    return [f"{name}: {note}" for name in plan.shapes for note in engine_arguments(get_shape(name)).notes]


def check_process(plan: CheckPlan) -> dict[str, Any]:
    """The interpreter the check itself ran in (the fp32 reference, the yardsticks, the verdict), and whether it
    is a side's: on a Trn2 runner it belongs in a neutral CPU venv (ci/scripts/check-venv.sh), where the
    reference cannot depend on what a side installed and nothing starts the Neuron runtime."""
    import platform
    import sys
    from pathlib import Path

    here = Path(sys.executable).resolve()
    shared = [s.name for s in (plan.baseline, plan.candidate) if s.python and Path(s.python).resolve() == here]
    record = {"python": sys.executable, "python_version": platform.python_version(), "shared_with": shared}
    if shared:
        lines = [f"Note: the check's own process ran in the {' and '.join(shared)}'s interpreter ({sys.executable}): "
                 "its fp32 reference was computed in a side's environment (on a Trn2 runner, run the check from a "
                 "neutral venv: ci/scripts/check-venv.sh).", ""]
    else:
        lines = [f"The check's own process: {sys.executable} (Python {record['python_version']}), neither side's.", ""]
    return {**record, "markdown": lines}
