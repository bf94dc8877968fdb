"""What a docs pytest line needs of the machine before its collection can pass here.

A collection configures the harness's plugin, whose pre-flight checks refuse a backend that cannot run
(``harness.session.preflight``): a CUDA device, a Trn2 host, a vLLM to serve with, an NxDI tree that
imports under this transformers, a model directory. Where this environment lacks one, the line is still
parsed (a renamed option fails everywhere), and its collection is left to the environment that has it,
saying which. Each need is read with the harness's own checks, not guessed from names.
"""

from __future__ import annotations

import os
from pathlib import Path


def option_values(args: list[str], option: str) -> list[str]:
    """Every value of ``--option V`` / ``--option=V`` in args."""
    values = []
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(option + "="):
            values.append(arg.split("=", 1)[1])
    return values


def nxdi_reason(source: str | None, root: Path) -> str | None:
    """NxDI's CPU mode: a tree at ``source`` whose transformers pin this environment meets."""
    if not source:
        return "needs an NxDI tree (--carbon-nxdi-source DIR or $CARBON_NXDI_SOURCE)"
    tree = (root / os.path.expanduser(source)).resolve()
    if not tree.is_dir():
        return f"needs an NxDI tree at {source} (here {tree} is not a directory)"
    from packaging.requirements import Requirement

    from harness.core.versions import installed_versions
    from harness.session.preflight import nxdi_release

    version, pin = nxdi_release(tree)
    installed = installed_versions(("transformers",)).get("transformers")
    try:
        requirement = Requirement(pin)
    except Exception:  # no pin found: the collection decides
        return None
    if installed and not requirement.specifier.contains(installed, prereleases=True):
        return f"needs NxDI {version}'s {pin} (transformers {installed} here): the trn2-stack session's environment"
    return None


def collect_skip_reason(args: list[str], root: Path) -> str | None:
    """Why this environment cannot collect the pytest line ``args`` (None: it can, and must)."""
    if "vllm" in option_values(args, "--carbon-serve"):
        from harness.session.preflight import vllm_unavailable_reason

        reason = vllm_unavailable_reason()
        if reason:
            return f"needs a Python with vLLM (nox -s serving): {reason}"
    if any(device.startswith("cuda") for device in option_values(args, "--carbon-device")):
        import torch

        if not torch.cuda.is_available():
            return "needs a CUDA GPU (--carbon-device cuda)"
    neuron = "neuron" in option_values(args, "--carbon-backend")
    if neuron and "--carbon-neuron-cpu" not in args:
        from harness.backends.neuron.host import neuron_unavailable_reason

        reason = neuron_unavailable_reason()
        if reason:
            return f"needs a Trn2 host: {reason}"
    sources = option_values(args, "--carbon-nxdi-source")
    if sources or (neuron and "--carbon-neuron-cpu" in args):
        reason = nxdi_reason((sources or [os.environ.get("CARBON_NXDI_SOURCE", "")])[-1] or None, root)
        if reason:
            return reason
    for made in option_values(args, "--carbon-thresholds"):
        if not (root / os.path.expanduser(made)).is_file():
            return f"needs {made}, a thresholds file the page's earlier command writes"
    for directory in option_values(args, "--carbon-model-root"):
        if not Path(os.path.expanduser(directory.replace("$HOME", "~"))).is_dir():
            return f"needs the checkpoints at {directory}"
    for model in option_values(args, "--carbon-model"):
        if "/" in model and not Path(os.path.expanduser(model.replace("$HOME", "~"))).exists():
            return f"needs the checkpoint at {model}"
    return None
