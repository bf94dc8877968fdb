"""Whether a vLLM Neuron 2.32+ server's workers will find an EFA device, read from the host as the plugin reads
it, and the variable that lets them start where they will not.

Each 2.32+ worker calls ``_set_efa_affinity`` unless ``NEURON_SKIP_EFA_AFFINITY`` is set
(``vllm_neuron/vllm/worker/neuron_worker.py`` in the public fork jinhuang12/vllm-neuron at
44a17b6ff476626879662307db4b698df8a6da47), which resolves its Neuron device to an EFA PCI address and lists
``/sys/bus/pci/devices/<bdf>/infiniband`` (``vllm_neuron/utils/hardware_config.py`` at
0bae3e9c50d0c54f58498e371c08d272124cdbca: ``get_efa_interface``: the host device is the minor number of
``/dev/neuron<N>``, the address ``_INSTANCE_CONFIGS["trn2"]``'s; the family from
``/sys/devices/virtual/dmi/id/product_name``). No such directory, or an empty one, stops the worker ("No EFA
device found ... set NEURON_SKIP_EFA_AFFINITY=1 to skip it on instances without EFA"): a trn2.3xlarge has no
EFA, and a trn2.48xlarge launched without EFA interfaces neither. EFA affinity is a CPU placement optimization,
not correctness (the plugin's own words), so where any of the host's Neuron devices has no EFA interface the
server gets ``NEURON_SKIP_EFA_AFFINITY=1``; where all have one, the variable is left unset, as the plugin ships.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SKIP_EFA = "NEURON_SKIP_EFA_AFFINITY"
# hardware_config.py@0bae3e9: trn2's Neuron device (ND 0..15) -> its EFA PCI address
TRN2_EFA_BDF = ("0000:c9:00.0", "0000:b4:00.0", "0000:b3:00.0", "0000:ca:00.0", "0000:6c:00.0", "0000:57:00.0",
                "0000:56:00.0", "0000:6d:00.0", "0000:98:00.0", "0000:83:00.0", "0000:82:00.0", "0000:99:00.0",
                "0000:f5:00.0", "0000:e0:00.0", "0000:df:00.0", "0000:f6:00.0")


@dataclass(frozen=True)
class EfaHost:
    """What the plugin reads of the host: its instance family, its Neuron devices (minor numbers of
    ``/dev/neuron*``) and, per PCI address, the interfaces under ``/sys/bus/pci/devices/<bdf>/infiniband``."""

    family: str | None
    devices: tuple[int, ...] = ()
    interfaces: dict[str, tuple[str, ...]] = field(default_factory=dict)


def missing_efa(host: EfaHost) -> str | None:
    """Why a worker would find no EFA device on ``host`` (one line), or None where every Neuron device has one."""
    if host.family != "trn2":
        return f"instance family {host.family or 'unknown'}: not a trn2 (no EFA mapping the harness knows)"
    if not host.devices:
        return "no Neuron device (/dev/neuron*)"
    for device in host.devices:
        if device >= len(TRN2_EFA_BDF):
            return f"Neuron device {device} has no EFA address on a trn2"
        bdf = TRN2_EFA_BDF[device]
        if not host.interfaces.get(bdf):
            return f"no EFA interface for Neuron device {device} (/sys/bus/pci/devices/{bdf}/infiniband)"
    return None


def efa_environment(host: EfaHost) -> dict[str, str]:
    """The variables a 2.32+ server needs on ``host``: ``NEURON_SKIP_EFA_AFFINITY=1`` without EFA, else none."""
    return {SKIP_EFA: "1"} if missing_efa(host) else {}


def read_efa_host(root: Path = Path("/")) -> EfaHost:
    """``EfaHost`` as this host shows it (``root``: where its /sys and /dev are, for a test)."""
    try:
        product = (root / "sys/devices/virtual/dmi/id/product_name").read_text().strip()
    except OSError:
        product = ""
    family = "trn2" if product.startswith("trn2") else (product.split(".")[0] or None)
    devices = []
    for node in sorted((root / "dev").glob("neuron[0-9]*")):
        try:
            devices.append(os.minor(node.stat().st_rdev) if node.is_char_device() else int(node.name[6:]))
        except (OSError, ValueError):
            continue
    interfaces = {}
    for bdf in TRN2_EFA_BDF:
        try:
            interfaces[bdf] = tuple(sorted(os.listdir(root / "sys/bus/pci/devices" / bdf / "infiniband")))
        except OSError:
            continue
    return EfaHost(family, tuple(sorted(devices)), interfaces)
