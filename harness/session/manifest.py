"""The run manifest: every number carries its context (package versions, NxDI build, hardware,
CPU, git sha, options, engines with their load times, how loaded the box was: ``harness.core.load``; the
device context: NEURON_* / XLA_* / VLLM_* variables, LNC, kernel, AMI, the libnrt loaded:
``harness.core.device_context``).

It is written at the top level of the benchmark JSON (``carbon_harness``), where pytest-benchmark
does not look; ``machine_info.carbon_harness`` keeps only ``machine_identity``: what names the
machine and software stack and is the same at session start and end and from run to run on one
machine. pytest-benchmark's ``--benchmark-compare`` diffs ``machine_info`` as a whole and prints it
all in one warning when anything differs: with argv, engine load times and a measured bandwidth in
it, every comparison warned, in 7,000 characters."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from harness.core.device_context import device_context
from harness.core.hardware import cpu_model
from harness.core.load import loadavg, run_load, snapshot
from harness.core.paths import REPO_ROOT
from harness.core.versions import checkout_commit, distribution_version, installed_versions
from harness.session.engines import Session

VERSIONED = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pytest-benchmark",
             "neuronx-distributed-inference", "neuronx-distributed", "neuronx-cc", "torch-neuronx", "libneuronxla")


def package_versions() -> dict[str, str]:
    return {"python": platform.python_version(), **installed_versions(VERSIONED)}


HARNESS_DISTRIBUTION = "carbon-harness"


def git_sha(repo: Path = REPO_ROOT) -> str | None:
    """The harness's own commit: its package's checkout's (``harness.core.versions.checkout_commit``),
    never that of a repository that happens to enclose it; None where it is not a checkout (the
    manifest's ``harness_version`` then names the installed harness)."""
    return checkout_commit(repo, "harness/__init__.py")


def device_name(cfg: Any) -> tuple[str | None, str | None]:
    """(what the engines run on, by name; the device resolved): the GPU's name on CUDA, the hardware
    profile on a Neuron device, the endpoint for a server; no name on a CPU (the report names the host
    CPU already)."""
    if cfg.backend == "openai":
        return cfg.endpoint or (f"a vLLM server ({cfg.serve})" if cfg.serve else None), None
    if cfg.backend == "neuron":
        return ("NxDI CPU mode" if cfg.neuron_cpu else cfg.hardware_name), None
    from harness.backends.hf import cuda_device_name, resolve_device

    try:
        device = resolve_device(cfg.device)
    except Exception:  # a device that cannot run here stopped the session at configure: nothing to name
        return None, None
    return (cuda_device_name() if device.type == "cuda" else None), str(device)


def run_manifest(session: Session) -> dict[str, Any]:
    cfg = session.config
    endpoint = session.servers.started_endpoint
    device = device_name(cfg)
    return {
        "versions": package_versions(),
        "harness_git_sha": git_sha(),
        "harness_version": distribution_version(HARNESS_DISTRIBUTION),
        "device_name": device[0],
        "device_resolved": device[1],
        "backend": cfg.backend,
        "device": cfg.device,
        "dtype": cfg.dtype,
        "hf_compile": cfg.hf_compile,
        "models": [{"label": m.label, "path": str(m.path) if m.path else None, "real": m.real} for m in cfg.models],
        "shapes": [s.name for s in cfg.shapes],
        "hardware": session.hardware.to_dict(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch_threads(),
        "runs": cfg.runs,
        "warmup": cfg.warmup,
        "threshold_files": cfg.threshold_files,
        "variants": list(cfg.variants),
        "drafts": [{"label": d.label, "path": str(d.path) if d.path else None, "real": d.real} for d in cfg.drafts],
        "speculation_length": cfg.speculation_length,
        "neuron_rt_visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "device_context": device_context(lnc_from_neuron_ls=getattr(session.hardware, "logical_nc_config", None)),
        "engines": session.load_log,
        "load": run_load(session.load_start, snapshot(), os.cpu_count(), loadavg()),
        "nxdi": nxdi_manifest(),
        "endpoint": endpoint.url if endpoint is not None else cfg.endpoint,
        "served_model": endpoint.model if endpoint is not None else cfg.served_model,
        "serve": cfg.serve,
        "argv": sys.argv,
    }


# What machine_info keeps: the same for two runs of one machine and stack, known from session start.
IDENTITY_KEYS = ("schema", "backend", "device", "dtype", "versions", "cpu_model", "cpu_count")


def machine_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The part of a run manifest for pytest-benchmark's ``machine_info`` (which it diffs between
    runs): ``IDENTITY_KEYS`` and the hardware profile's name, never a measured value, a path, argv,
    a git sha or a load time."""
    identity = {k: manifest[k] for k in IDENTITY_KEYS if k in manifest}
    hardware = manifest.get("hardware")
    if isinstance(hardware, dict) and "name" in hardware:
        identity["hardware"] = hardware["name"]
    return identity


def torch_threads() -> int | None:
    """torch's intra-op threads in this process (None if torch is not loaded)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def nxdi_manifest() -> dict[str, Any] | None:
    """Which NxDI build this process imports, from where, and what was stubbed (None: no NxDI)."""
    import importlib.util

    from harness.backends.neuron.stubs import installed

    where = installed()
    if where is None and importlib.util.find_spec("neuronx_distributed_inference") is None:
        return None
    from harness.backends.neuron.artifacts import nxdi_build

    return {**nxdi_build(), "source": where.source if where else None,
            "stubbed_packages": list(where.stubbed) if where else []}
