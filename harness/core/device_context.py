"""The device context a Neuron number depends on and a package list does not show: the Neuron, XLA and vLLM
environment variables of the process, the logical NeuronCore config (LNC), the kernel, the AMI, and the
Neuron runtime library (libnrt) the process actually loaded.

Two runs with the same packages differ when one set ``NEURON_RT_VISIBLE_CORES``, ``XLA_FLAGS`` or
``NEURON_CC_FLAGS``, ran at LNC=1, on another kernel (the driver is a kernel module) or another DLAMI, or
loaded a libnrt from another path than the one dpkg names (a venv's, a container's). Each is recorded in the
run manifest (``harness.session.manifest``) and, for a release check's server, read from that process.

The AMI id comes from the EC2 instance metadata service, asked only on a Neuron host (``/dev/neuron*``) and
with a short timeout: anywhere else, or where it does not answer, it is ``unknown``. Variables whose name
says they hold a secret (KEY, TOKEN, SECRET, PASSWORD) are recorded by name only.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PREFIXES = ("NEURON_", "XLA_", "VLLM_")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)
IMDS = "http://169.254.169.254/latest"
IMDS_TIMEOUT_S = 1.0
LIBNRT = re.compile(r"\s(/\S*libnrt\.so[.\d]*)$")


def device_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The NEURON_*, XLA_* and VLLM_* variables, secrets redacted."""
    return {k: ("<set>" if SECRET.search(k) else v) for k, v in sorted(environ.items()) if k.startswith(PREFIXES)}


def loaded_libnrt(maps: str) -> dict[str, Any]:
    """The libnrt a process has mapped (``/proc/PID/maps``): its path, the file it resolves to, and the
    version its file name carries (``libnrt.so.2.35.30.0``), where it does."""
    paths = sorted({m.group(1) for line in maps.splitlines() if (m := LIBNRT.search(line))})
    if not paths:
        return {"loaded": None}
    real = [str(Path(p).resolve()) for p in paths]
    versions = sorted({v.group(1) for r in real if (v := re.search(r"libnrt\.so\.(\d+(?:\.\d+)+)$", r))})
    return {"loaded": paths[0] if len(paths) == 1 else paths, "file": real[0] if len(real) == 1 else real,
            "version": versions[0] if len(versions) == 1 else (versions or None)}


def process_libnrt(pid: int | str = "self", proc: Path = Path("/proc")) -> dict[str, Any]:
    try:
        return loaded_libnrt((proc / str(pid) / "maps").read_text(errors="replace"))
    except OSError as exc:
        return {"loaded": None, "error": f"{proc / str(pid) / 'maps'}: {exc.strerror or exc}"}


def on_neuron_host(dev: Path = Path("/dev")) -> bool:
    return bool(glob.glob(str(dev / "neuron[0-9]*")))


def imds_ami_id(urlopen: Callable[..., Any] = urllib.request.urlopen) -> str:
    """The AMI id from the instance metadata (IMDSv2: a session token first), or ``unknown``."""
    try:
        token_req = urllib.request.Request(f"{IMDS}/api/token", method="PUT",
                                           headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urlopen(token_req, timeout=IMDS_TIMEOUT_S) as resp:
            token = resp.read().decode()
        req = urllib.request.Request(f"{IMDS}/meta-data/ami-id", headers={"X-aws-ec2-metadata-token": token})
        with urlopen(req, timeout=IMDS_TIMEOUT_S) as resp:
            ami = resp.read().decode().strip()
    except (OSError, ValueError):
        return "unknown"
    return ami if re.fullmatch(r"ami-[0-9a-f]+", ami) else "unknown"


def device_context(environ: Mapping[str, str] = os.environ, neuron_host: bool | None = None,
                   ami: Callable[[], str] = imds_ami_id, lnc_from_neuron_ls: int | None = None) -> dict[str, Any]:
    """This process's device context. ``lnc_from_neuron_ls``: what neuron-ls reported, where it ran; the
    variable ``NEURON_LOGICAL_NC_CONFIG`` overrides the instance's default, so both are kept."""
    host = on_neuron_host() if neuron_host is None else neuron_host
    return {"env": device_env(environ), "kernel": platform.release(),
            "lnc": {"NEURON_LOGICAL_NC_CONFIG": environ.get("NEURON_LOGICAL_NC_CONFIG"),
                    "neuron_ls": lnc_from_neuron_ls},
            "ami_id": ami() if host else "unknown", "libnrt": process_libnrt()}
