"""Hardware profiles (data in ``fixtures/hardware/``) and detection of the machine we run on.

A profile gives the physical limits the roofline and HBM plans are computed against, and the
price the cost lens uses; missing numbers (a plain CPU) are measured or read from the machine.
"""

from __future__ import annotations

import glob
import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.measure import Timer
from harness.core.neuron_host import (NeuronHostError, NeuronInstance, instance_from_neuron_ls, neuron_ls_path,
                                       run_neuron_ls)
from harness.core.paths import FIXTURES_DIR

HARDWARE_DIR = FIXTURES_DIR / "hardware"
PROFILE_FIELDS = ("name", "kind", "chips", "logical_cores", "logical_nc_config", "memory_gib",
                  "memory_bandwidth_gbps", "peak_bf16_tflops", "price_per_hour", "price_note")


class HardwareError(ValueError):
    """An unknown or malformed hardware profile; the message names it and the known ones."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    kind: str  # "neuron", "cuda" or "cpu"
    chips: int = 1
    logical_cores: int | None = None
    logical_nc_config: int | None = None
    memory_gib: float | None = None
    memory_bandwidth_gbps: float | None = None  # GB/s (1e9 bytes), whole instance: see bandwidth_gbps(tp)
    peak_bf16_tflops: float | None = None  # whole instance: see bf16_tflops(tp)
    price_per_hour: float | None = None
    price_note: str = ""
    bandwidth_source: str = "profile"

    @property
    def memory_bytes(self) -> float | None:
        return None if self.memory_gib is None else self.memory_gib * 2**30

    def per_core(self, value: float | None) -> float | None:
        """Share of one logical core (a TP rank), assuming the instance's resources split evenly."""
        if value is None or not self.logical_cores:
            return None
        return value / self.logical_cores

    def cores_used(self, tp_degree: int | None) -> int | None:
        """Logical cores a ``tp_degree`` artifact spans on a Neuron instance (one rank per logical
        core, so at most all of them); None elsewhere: a GPU profile is one device and a CPU
        process uses the whole machine, so tp does not slice either."""
        if self.kind != "neuron" or not self.logical_cores or not tp_degree:
            return None
        return min(tp_degree, self.logical_cores)

    def _share(self, value: float | None, tp_degree: int | None) -> float | None:
        cores = self.cores_used(tp_degree)
        if value is None or cores is None:
            return value
        return value / self.logical_cores * cores

    def bandwidth_gbps(self, tp_degree: int | None) -> float | None:
        """HBM bandwidth the cores of a ``tp_degree`` artifact can read at: on a trn2.48xlarge a tp=8
        artifact runs on 8 of 64 logical cores (2 of 16 chips) and reads their 5.8 TB/s, not the
        instance's 46.4 TB/s; whole-profile figures elsewhere."""
        return self._share(self.memory_bandwidth_gbps, tp_degree)

    def bf16_tflops(self, tp_degree: int | None) -> float | None:
        """Peak BF16 compute of the cores a ``tp_degree`` artifact runs on (as ``bandwidth_gbps``)."""
        return self._share(self.peak_bf16_tflops, tp_degree)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_profile(data: Any, source: str) -> HardwareProfile:
    if not isinstance(data, dict):
        raise HardwareError(f"{source}: must hold a JSON object")
    unknown = set(data) - set(PROFILE_FIELDS)
    if unknown:
        raise HardwareError(f"{source}: unknown field {sorted(unknown)[0]!r}; fields: {', '.join(PROFILE_FIELDS)}")
    if data.get("kind") not in ("neuron", "cuda", "cpu"):
        raise HardwareError(f"{source}: field 'kind' is {data.get('kind')!r}; expected neuron, cuda or cpu")
    return HardwareProfile(**{k: v for k, v in data.items()})


def load_profiles(directory: Path = HARDWARE_DIR) -> dict[str, HardwareProfile]:
    profiles = {}
    for f in sorted(directory.glob("*.json")):
        try:
            p = _parse_profile(json.loads(f.read_text()), str(f))
        except json.JSONDecodeError as exc:
            raise HardwareError(f"{f}: not valid JSON ({exc})") from exc
        profiles[p.name] = p
    return profiles


def get_profile(name: str, directory: Path = HARDWARE_DIR) -> HardwareProfile:
    profiles = load_profiles(directory)
    if name not in profiles:
        raise HardwareError(f"unknown hardware profile {name!r}; known profiles: {', '.join(profiles)}")
    return profiles[name]


def neuron_device_count() -> int:
    return len(glob.glob("/dev/neuron[0-9]*"))


def host_neuron_ls() -> list[dict[str, Any]] | None:
    """``neuron-ls -j``'s devices where this host has a Neuron device (None where it has none)."""
    if not neuron_device_count():
        return None
    path = neuron_ls_path()
    if path is None:
        raise HardwareError("/dev/neuron* exists but neuron-ls (aws-neuronx-tools) is not on PATH nor in "
                            "/opt/aws/neuron/bin: install it, or pass --carbon-hardware NAME")
    return run_neuron_ls(path)


def neuron_profile_name(instance: NeuronInstance, profiles: dict[str, HardwareProfile]) -> str:
    """The profile of the instance neuron-ls reports, checked against it: the same number of devices
    and the same logical NeuronCore config (LNC=1 doubles the logical cores a profile assumes). An
    instance no Neuron profile describes (an inf2, a trn1) is refused, never gated as a trn2."""
    known = ", ".join(n for n, p in profiles.items() if p.kind == "neuron")
    seen = (f"{instance.instance_type} ({instance.devices} Neuron device(s), {instance.logical_cores} logical cores, "
            f"LNC={instance.logical_nc_config})")
    profile = profiles.get(instance.instance_type)
    if profile is None or profile.kind != "neuron":
        raise HardwareError(f"neuron-ls reports a {seen}: no Neuron hardware profile describes it (known: {known}); "
                            f"add fixtures/hardware/{instance.instance_type}.json and pass --carbon-hardware NAME")
    if (profile.chips, profile.logical_cores, profile.logical_nc_config) != (
            instance.devices, instance.logical_cores, instance.logical_nc_config):
        raise HardwareError(f"neuron-ls reports a {seen}; the {profile.name} profile is for {profile.chips} device(s), "
                            f"{profile.logical_cores} logical cores, LNC={profile.logical_nc_config}: set the "
                            f"instance's LNC to {profile.logical_nc_config} or pass --carbon-hardware NAME")
    return profile.name


def detect_profile_name(gpu_name: Callable[[], str | None] = lambda: None,
                        neuron_ls: Callable[[], list[dict[str, Any]] | None] = host_neuron_ls,
                        directory: Path = HARDWARE_DIR) -> str:
    """The Neuron profile of the instance ``neuron-ls`` reports (``neuron_ls``: its devices, None on a
    host without a Neuron device), a known GPU by name (``gpu_name``: the first CUDA device's, asked
    of torch by the caller only when there is no Neuron device, so this layer stays torch-free), else
    the CPU profile."""
    try:
        devices = neuron_ls()
        if devices is not None:
            return neuron_profile_name(instance_from_neuron_ls(devices), load_profiles(directory))
    except NeuronHostError as exc:
        raise HardwareError(str(exc)) from None
    gpu = (gpu_name() or "").upper()
    for key, profile in (("H200", "h200"), ("H100", "h100-sxm")):
        if key in gpu:
            return profile
    return "cpu"


def measure_copy_bandwidth_gbps(nbytes: int = 256 * 2**20, runs: int = 5) -> float:
    """Sustained memory bandwidth of this CPU: a large array copy reads and writes every byte."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(runs):
        with Timer() as t:
            np.copyto(dst, src)
        best = min(best, t.ms)
    return 2 * nbytes / (best / 1000.0) / 1e9


def complete_profile(profile: HardwareProfile) -> HardwareProfile:
    """Fill what a CPU profile leaves open from this machine (cores, memory, bandwidth)."""
    if profile.kind != "cpu":
        return profile
    updates: dict[str, Any] = {}
    if profile.logical_cores is None:
        updates["logical_cores"] = os.cpu_count() or 1
    if profile.memory_gib is None:
        try:
            updates["memory_gib"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        except (ValueError, OSError, AttributeError):
            pass
    if profile.memory_bandwidth_gbps is None:
        updates["memory_bandwidth_gbps"] = measure_copy_bandwidth_gbps()
        updates["bandwidth_source"] = "measured (array copy)"
    return replace(profile, **updates)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
