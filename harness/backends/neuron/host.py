"""What a host can run of NxDI: whether the Neuron stack and devices are here (and speculation on
this hardware), and which NeuronCores each pytest-xdist worker takes."""

from __future__ import annotations

import glob
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path


def parse_worker_index(worker_id: str) -> int:
    """pytest-xdist worker ids are ``gw0``, ``gw1``, ...; ``master`` (no xdist) is worker 0."""
    if worker_id == "master":
        return 0
    m = re.fullmatch(r"gw(\d+)", worker_id)
    if not m:
        raise ValueError(f"worker id {worker_id!r} is not an xdist worker id (gw0, gw1, ...) or 'master'")
    return int(m.group(1))


def visible_cores(worker_id: str, cores_per_worker: int, total_cores: int) -> str:
    """NEURON_RT_VISIBLE_CORES for one xdist worker: a disjoint range per worker, e.g. ``4-7``."""
    if cores_per_worker < 1:
        raise ValueError(f"--carbon-cores-per-worker={cores_per_worker} must be at least 1")
    index = parse_worker_index(worker_id)
    start = index * cores_per_worker
    end = start + cores_per_worker - 1
    if end >= total_cores:
        workers = total_cores // cores_per_worker
        raise ValueError(f"worker {worker_id} needs cores {start}-{end} but the host has {total_cores} logical cores: "
                         f"with --carbon-cores-per-worker {cores_per_worker} run at most {workers} workers (-n {workers})")
    return str(start) if start == end else f"{start}-{end}"


NEURON_STACK = (("torch_neuronx", "torch-neuronx"), ("neuronx_distributed_inference", "neuronx-distributed-inference"))


def host_find_spec(name: str) -> object | None:
    """``importlib.util.find_spec``, except that the harness's own CPU-mode stubs (a loader marked
    ``carbon_stub``) do not count: once the NxDI CPU tier has run in a process, ``torch_neuronx``
    imports, but that does not make the process a Trn2 host."""
    spec = importlib.util.find_spec(name)
    return None if spec is not None and getattr(spec.loader, "carbon_stub", False) else spec


def neuron_unavailable_reason(find_spec: Callable[[str], object | None] = host_find_spec,
                              dev: Path = Path("/dev")) -> str | None:
    """Why NxDI cannot run here (None when it can): the first missing piece, said plainly.

    ``find_spec`` and ``dev`` are this host's by default; a test passes its own to state a host
    explicitly (a module present or not, a device directory with or without ``neuron0``) instead
    of depending on the machine it happens to run on."""
    for module, package in NEURON_STACK:
        if find_spec(module) is None:
            return (f"{module} is not importable: install the Neuron stack on a Trn2 host "
                    f"(pip install -e '.[neuron]' --extra-index-url https://pip.repos.neuron.amazonaws.com; "
                    f"needs {package})")
    if not glob.glob(str(dev / "neuron[0-9]*")):
        return f"no {dev}/neuron* device: run on a Trainium2 instance with the Neuron driver loaded"
    return None


def neuron_speculation_unavailable_reason(hardware_kind: str) -> str | None:
    """Why NxDI speculation cannot run here (None on a Neuron host)."""
    if hardware_kind != "neuron":
        return ("NxDI speculation runs on Trainium only: its CPU mode raises 'Speculation is not yet supported "
                "for CPU inference' (application_base.py); run with --carbon-backend neuron on a Trn2 host")
    return None
