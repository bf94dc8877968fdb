"""What a Neuron host says about itself: ``neuron-ls --json-output`` (instance type, devices, logical
NeuronCore config) and the versions of the Neuron OS packages (``dpkg-query``: runtime, driver,
collectives, tools).

The OS packages matter because a release check swaps only Python packages: both sides run on the
host's libnrt, driver and collectives, and real regressions live in that layer (aws-neuron-sdk#1370,
Neuron 2.31's inter-executable latency). So they are recorded beside each side's Python versions.

Parsing is pure (``instance_from_neuron_ls``); running the tools is at the edge (``run_neuron_ls``,
``neuron_os_packages``), each taking the runner so tests can feed recorded outputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NEURON_LS_FALLBACK = Path("/opt/aws/neuron/bin/neuron-ls")  # where aws-neuronx-tools installs it
# The Neuron OS packages (apt names) a Python-only swap leaves as they are.
NEURON_OS_PACKAGE_PATTERN = "aws-neuronx-*"
Runner = Callable[..., subprocess.CompletedProcess]


class NeuronHostError(ValueError):
    """neuron-ls cannot be run or read, or names an instance no profile describes (one line)."""


@dataclass(frozen=True)
class NeuronInstance:
    """The instance as ``neuron-ls`` reports it."""

    instance_type: str
    devices: int
    cores_per_device: int  # nc_count: logical cores per device at this LNC
    logical_nc_config: int | None

    @property
    def logical_cores(self) -> int:
        return self.devices * self.cores_per_device


def neuron_ls_path(which: Callable[[str], str | None] = shutil.which) -> Path | None:
    found = which("neuron-ls")
    if found:
        return Path(found)
    return NEURON_LS_FALLBACK if NEURON_LS_FALLBACK.is_file() else None


def run_neuron_ls(path: Path, run: Runner = subprocess.run) -> list[dict[str, Any]]:
    """``neuron-ls --json-output``, parsed: one object per Neuron device. (Neuron 2.34 replaces this
    format with ``--output-format json``: a changed format fails here, naming what came back.)"""
    try:
        r = run([str(path), "--json-output"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NeuronHostError(f"{path} --json-output could not run ({exc})") from None
    if r.returncode != 0:
        last = (r.stderr or r.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise NeuronHostError(f"{path} --json-output exited {r.returncode}: {last[0]}")
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError as exc:
        raise NeuronHostError(f"{path} --json-output did not print JSON ({exc})") from None
    return devices_of(data, str(path))


def devices_of(data: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise NeuronHostError(f"{source}: expected neuron-ls's JSON list of devices, got {str(data)[:80]!r}")
    return data


def instance_from_neuron_ls(devices: list[dict[str, Any]], source: str = "neuron-ls") -> NeuronInstance:
    """Instance type, device count, cores per device and LNC from ``neuron-ls -j``'s device list.
    Every device names the instance; they must agree, and each must give its core count."""
    devices = devices_of(devices, source)
    types = {d.get("instance_type") for d in devices}
    if len(types) != 1 or not isinstance(next(iter(types)), str) or not next(iter(types)):
        raise NeuronHostError(f"{source}: the devices name no single instance_type ({sorted(map(str, types))}); "
                              "pass --carbon-hardware NAME")
    cores = {d.get("nc_count") for d in devices}
    if len(cores) != 1 or not isinstance(next(iter(cores)), int):
        raise NeuronHostError(f"{source}: the devices give no single nc_count ({sorted(map(str, cores))})")
    lnc = {d.get("logical_neuroncore_config") for d in devices}
    return NeuronInstance(instance_type=next(iter(types)), devices=len(devices), cores_per_device=next(iter(cores)),
                          logical_nc_config=next(iter(lnc)) if len(lnc) == 1 else None)


def neuron_os_packages(run: Runner = subprocess.run, pattern: str = NEURON_OS_PACKAGE_PATTERN) -> dict[str, str]:
    """Installed versions of the Neuron OS packages (``aws-neuronx-runtime-lib``, ``-dkms``,
    ``-collectives``, ``-tools``...), from ``dpkg-query``; ``{"error": why}`` where it cannot say
    (no dpkg on the host, no Neuron package installed)."""
    try:
        r = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n", pattern],
                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"dpkg-query could not run ({exc})"}
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip().startswith("ii"):  # installed, not merely known
            out[parts[0]] = parts[1]
    if not out:
        last = (r.stderr or "").strip().splitlines()[-1:] or ["none installed"]
        return {"error": f"dpkg-query -W {pattern}: {last[0]}"}
    return out


def host_record(run: Runner = subprocess.run, which: Callable[[str], str | None] = shutil.which) -> dict[str, Any]:
    """What the probe and the verdict record about the host: neuron-ls's JSON as printed (or why it is
    absent) and the Neuron OS packages' versions."""
    record: dict[str, Any] = {"neuron_os_packages": neuron_os_packages(run)}
    path = neuron_ls_path(which)
    if path is None:
        record["neuron_ls"] = {"error": "neuron-ls not found (aws-neuronx-tools): not a Neuron host"}
        return record
    try:
        record["neuron_ls"] = run_neuron_ls(path, run)
    except NeuronHostError as exc:
        record["neuron_ls"] = {"error": str(exc)}
    return record
