"""Evidence on FAIL, on a device: one more candidate round with the Neuron runtime's inspect output on
(``NEURON_RT_INSPECT_ENABLE=1``, ``NEURON_RT_INSPECT_OUTPUT_DIR``: the runtime writes its per-execution
trace there, which ``neuron-profile view`` reads), kept beside the verdict (``candidate/inspect/``), so that
whoever reads a FAIL has the device's own account of the slow or failing round, taken under the same check.

Device-only: on a CPU the runtime is absent and the variables change nothing. ``--inspect-on-fail always``
runs the same round anywhere (the suite rehearses the command on the CPU); ``never`` skips it. A candidate
served by the team (``--candidate-endpoint``) cannot be restarted with the variables: the record says how
to start it so. A candidate served by the check gets a fresh server started with them, for the round only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.core.device_context import on_neuron_host
from harness.release.children import last_error_line, run_logged
from harness.release.images import side_process
from harness.release.plan import CheckPlan, perf_command

INSPECT_DIR = "inspect"


def wanted(plan: CheckPlan, on_device: Callable[[], bool] = on_neuron_host) -> tuple[bool, str]:
    """Whether the evidence round runs, and why (or why not)."""
    if plan.inspect_on_fail == "never":
        return False, "--inspect-on-fail never"
    if plan.inspect_on_fail == "always":
        return True, "--inspect-on-fail always"
    if plan.cpu or not on_device():
        return False, "not on a Neuron device (the inspect output is the device runtime's; --inspect-on-fail always " \
                      "runs the round anyway)"
    return True, "the verdict is FAIL on a Neuron device"


def inspect_env(plan: CheckPlan) -> dict[str, str]:
    return {"NEURON_RT_INSPECT_ENABLE": "1",
            "NEURON_RT_INSPECT_OUTPUT_DIR": str(plan.out / plan.candidate.name / INSPECT_DIR)}


def run_evidence(plan: CheckPlan, start_server: Callable[[CheckPlan], tuple[CheckPlan, Any]] | None,
                 progress: Callable[[str], None], timeout: float = 3600.0) -> dict[str, Any]:
    """The evidence round of a FAILed check (``start_server(plan)``: a fresh candidate server with the plan's
    variables, for a candidate the check serves). Returns verdict.json's ``evidence``."""
    run, why = wanted(plan)
    env = inspect_env(plan)
    side = replace(plan.candidate, env=(*plan.candidate.env, *env.items()))
    folder = plan.out / side.name / INSPECT_DIR
    record: dict[str, Any] = {"ran": False, "why": why, "env": env, "dir": str(folder)}
    if not run:
        return record
    if side.backend == "openai" and not side.started:
        record["why"] = (f"the candidate's server is the team's ({side.endpoint}): start it with "
                         + " ".join(f"{k}={v}" for k, v in env.items()) + " and run the check again")
        return record
    folder.mkdir(parents=True, exist_ok=True)
    inspected = replace(plan, candidate=side)
    server = None
    t0 = time.perf_counter()
    try:
        if side.backend == "openai" and start_server is not None:
            inspected, server = start_server(inspected)
        cmd, proc_env = side_process(inspected, inspected.candidate,
                                     perf_command(inspected, inspected.candidate, folder / "perf-round.json",
                                                  folder / "perf-round.xml"))
        progress(f"evidence: one candidate round with the Neuron runtime's inspect output in {folder}")
        rc, text = run_logged(cmd, folder / "perf-round.log", proc_env, timeout)
    finally:
        if server is not None:
            server.stop()
    record.update({"ran": True, "command": cmd, "exit": rc, "seconds": round(time.perf_counter() - t0, 1),
                   "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())})
    if rc != 0:
        record["error"] = last_error_line(text)
    return record


def markdown(evidence: dict[str, Any]) -> list[str]:
    if not evidence:
        return []
    if not evidence.get("ran"):
        return ["### Evidence", "", f"Not taken: {evidence['why']}.", ""]
    return ["### Evidence", "", f"One candidate round with the Neuron runtime's inspect output "
            f"(`{' '.join(f'{k}={v}' for k, v in evidence['env'].items())}`): exit {evidence['exit']}, "
            f"{len(evidence['files'])} files in `{evidence['dir']}`.", ""]
