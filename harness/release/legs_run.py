"""Running the output contract's legs (issue 56; planned by ``harness.release.legs``): the check's own contract,
judged as before (``judge``: ``harness.release.run.judge_contracts``), then, where the plan has the fp32 leg, each
side's contract again in fp32 (``-m contract`` alone: the fp32 leg adds no conformance tiers and no perf rounds), judged
against the same fp32 reference, under ``out/fp32-leg``. Every result carries its leg and where each side
computed, so that one verdict holds both legs (``harness.analysis.contract_legs``); a failed fp32 leg fails the
check as the own leg's would.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.analysis.contract import ContractResult, SideJudgement
from harness.analysis.contract_legs import fp32_leg_ran, with_fp32_leg
from harness.analysis.pairing import SideReport
from harness.release.legs import Fp32Leg, fp32_leg, own_leg, reusable, unrunnable, where
from harness.release.plan import CONTRACT_TEST, CheckPlan, Side, contract_dir, pytest_args
from harness.release.side_tests import run_side_tests

FP32_SUFFIX = " (fp32 leg)"  # the fp32 leg's contracts: "model-shape (fp32 leg)"
NOT_RUN = "fp32 leg"  # the result saying why the fp32 leg could not run
Judge = Callable[[CheckPlan, dict[str, SideReport], float, Callable[[str], None]], dict[str, ContractResult]]


def contract_command(leg: Fp32Leg, side: Side, junit: Any) -> list[str]:
    """``side``'s contract alone in the fp32 leg, against the check's fp32 reference (copied into the leg's
    folder); a device NxDI side runs NxDI's CPU mode from its installed package."""
    plan = leg.plan
    cmd = [side.python, "-m", "pytest", CONTRACT_TEST, "-m", "contract", *pytest_args(plan, side),
           f"--junitxml={junit}", f"--carbon-contract-out={contract_dir(plan, side.name)}",
           f"--carbon-contract-reference={contract_dir(plan, 'reference')}"]
    return cmd + (["--carbon-neuron-cpu"] if side.name in leg.neuron_cpu else [])


def copy_reference(plan: CheckPlan, leg: CheckPlan, who: str = "reference") -> int:
    """The check's fp32 reference contracts (or ``who``'s, a side already fp32 in the check's own leg), for the
    fp32 leg: the same computation writes the same file; returns how many."""
    target = contract_dir(leg, who)
    target.mkdir(parents=True, exist_ok=True)
    files = sorted(contract_dir(plan, who).glob("contract-*.json"))
    for f in files:
        shutil.copy2(f, target / f.name)
    return len(files)


def run_fp32_leg(plan: CheckPlan, timeout: float, progress: Callable[[str], None], judge: Judge,
                 start: Callable[..., Any]) -> dict[str, ContractResult]:
    """Both sides' contracts in fp32, judged; servers the leg needs started in fp32 (``start``:
    ``harness.release.run.start_servers``) and stopped after it."""
    from harness.release.served import stop_started

    leg = fp32_leg(plan)
    if not copy_reference(plan, leg.plan):  # never silently: the legs table says it did not run
        return {NOT_RUN: ContractResult(leg="fp32", notes=["fp32 leg not run: the fp32 reference wrote no contract"])}
    reports = {s.name: SideReport(s.name, backend=s.backend, dtype="fp32") for s in (plan.baseline, plan.candidate)}
    lp, servers = leg.plan, {}
    try:
        if lp.served:
            lp, servers, _, _ = start(lp, progress)
            leg = Fp32Leg(lp, leg.neuron_cpu, leg.where)
        for side in (lp.baseline, lp.candidate):
            if side.name in reusable(plan) and copy_reference(plan, lp, side.name):
                progress(f"{side.name}: the output contract's fp32 leg is its own leg's (fp32 already): reused")
                continue
            folder = lp.out / side.name
            junit = folder / "contract.xml"
            progress(f"{side.name}: the output contract's fp32 leg ({leg.where[side.name]})")
            t0 = time.perf_counter()
            rc = run_side_tests(lp, side, contract_command(leg, side, junit), junit, folder / "contract.log",
                                "the fp32 leg's contract run", reports[side.name], timeout)
            progress(f"{side.name}: fp32 leg exit {rc} in {time.perf_counter() - t0:.0f} s")
    finally:
        unstopped = stop_started(servers, progress)
    judged = judge(lp, reports, timeout, progress)
    if unstopped:
        for result in judged.values():
            result.notes.append(f"not every fp32 leg server stopped: {'; '.join(unstopped)}")
    return {key + FP32_SUFFIX: labelled(result, "fp32", leg.where) for key, result in judged.items()}


def own_sides(contracts: dict[str, ContractResult]) -> Iterator[SideJudgement]:
    """The sides judged in the check's own leg (what each side's engines computed in there: its dtype in the
    verdict's side table), not those of the fp32 leg beside it."""
    return (s for key, c in contracts.items() if not key.endswith(FP32_SUFFIX) and key != NOT_RUN for s in c.sides)


def labelled(result: ContractResult, leg: str, places: dict[str, str]) -> ContractResult:
    result.leg, result.where = leg, dict(places)
    return result


def judge_legs(plan: CheckPlan, reports: dict[str, SideReport], timeout: float, progress: Callable[[str], None],
               judge: Judge, start: Callable[..., Any]) -> dict[str, ContractResult]:
    """The check's contracts in each of its legs: its own (as ``judge_contracts`` always judged it), then the
    fp32 leg where the plan asks for it and the sides can run it (``judge`` judges each leg's contracts); where
    they cannot, a result saying why, so the verdict's legs table and the bf16 caveat both show it."""
    own = judge(plan, reports, timeout, progress)
    places = {s.name: where(plan, s) for s in (plan.baseline, plan.candidate)}
    out = {key: labelled(result, own_leg(plan), places) for key, result in own.items()}
    if "fp32" not in plan.legs or own_leg(plan) == "fp32" or not any(r.sides for r in own.values()):
        return out  # no fp32 leg asked, the check's own is it, or its contract was not measured at all
    why = unrunnable(plan)
    if why is not None:
        progress(f"the output contract's fp32 leg cannot run: {why}")
        out[NOT_RUN] = ContractResult(leg="fp32", notes=[f"fp32 leg not run: {why}"])
        return out
    fp32 = run_fp32_leg(plan, timeout, progress, judge, start)
    if fp32_leg_ran(fp32):
        out = {key: with_fp32_leg(result) for key, result in out.items()}
    return out | fp32
