"""Each side in its own container image: the way a release check sees the runtime layer.

A venv swaps Python packages only; both sides then share the host's libnrt and collectives
(``harness.release.runtime_layer``). With ``--baseline-image`` / ``--candidate-image`` every process of that
side (its probe, conformance run, perf rounds, and a server started through ``--*-serve-script``) runs as
``IMAGE_RUNNER run ... IMAGE COMMAND``: a Neuron DLC image brings its SDK's runtime and collectives, and the
host's Neuron devices are passed through (``--device /dev/neuronN``, each one the host has; the driver is
the host's kernel module either way). The checkout, the evidence folder and the caches are mounted at the
same paths, the working directory is the checkout and ``PYTHONPATH`` names it, so the image runs this
harness: build the image from the DLC with the harness's dependencies installed (``pip install -e
.[test,serving]`` of this checkout, as ``ci/scripts/sdk-venv.sh`` does in a venv). ``--*-python`` names the
interpreter inside the image. Variables reach the container by name (``-e NAME``: the runner reads their
values from its own environment), so no value, secret or not, is on a command line. The command line is
recorded in the verdict; the suite rehearses it on the CPU with a stand-in runner.
"""

from __future__ import annotations

import glob
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from harness.core.paths import REPO_ROOT
from harness.release.plan import CheckPlan, Side, side_env

PASSED_PREFIXES = ("NEURON_", "XLA_", "VLLM_", "CARBON_", "HYPOTHESIS_", "OMP_", "SERVE_")
PASSED_NAMES = ("PYTHONPATH", "CHECKPOINT", "SHAPE", "SERVED_MODEL", "HOST", "PORT", "DTYPE", "TOKENIZERS_PARALLELISM")


def neuron_devices(dev: Path = Path("/dev")) -> list[str]:
    return sorted(glob.glob(str(dev / "neuron[0-9]*")), key=lambda p: int(p.rsplit("neuron", 1)[1]))


def mounts(plan: CheckPlan, side: Side) -> list[str]:
    paths = [REPO_ROOT, plan.out, plan.cache_dir, plan.model_root, side.nxdi_source,
             Path("~/.cache/carbon-harness").expanduser()]
    seen: list[str] = []
    for path in paths:
        if path is not None and str(Path(path).expanduser().resolve()) not in seen:
            seen.append(str(Path(path).expanduser().resolve()))
    return seen


def image_command(plan: CheckPlan, side: Side, cmd: Sequence[str], env: dict[str, str],
                  devices: Sequence[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``cmd`` as ``side``'s image runs it, and the environment the runner needs; unchanged without an image."""
    if side.image is None:
        return list(cmd), env
    env = {**env, "PYTHONPATH": str(REPO_ROOT)}
    passed = sorted(k for k in env if k.startswith(PASSED_PREFIXES) or k in PASSED_NAMES
                    or (k not in os.environ or os.environ[k] != env[k]) and k not in ("PATH", "HOME", "PWD"))
    wrapped = [*shlex.split(plan.image_runner), "run", "--rm", "--init", "--network", "host", "--ipc", "host"]
    wrapped += [f"--device={d}" for d in (neuron_devices() if devices is None else devices)]
    for path in mounts(plan, side):
        wrapped += ["-v", f"{path}:{path}"]
    wrapped += ["-w", str(REPO_ROOT)]
    for key in passed:
        wrapped += ["-e", key]
    return [*wrapped, side.image, *cmd], env


def side_process(plan: CheckPlan, side: Side, cmd: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """A side's pytest or probe process: its command (in its image, where it has one) and environment."""
    return image_command(plan, side, cmd, side_env(plan, side))
