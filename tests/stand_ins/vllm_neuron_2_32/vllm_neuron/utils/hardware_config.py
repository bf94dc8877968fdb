"""STAND-IN of the 2.32+ plugin's EFA lookup (jinhuang12/vllm-neuron ``vllm_neuron/utils/hardware_config.py`` at
0bae3e9c50d0c54f58498e371c08d272124cdbca), the functions of the same names, with the plugin's messages verbatim:

- ``parse_range_list``: "0-3,5" -> [0, 1, 2, 3, 5];
- ``get_efa_interface(local_rank, visible_devices)``: the worker's logical core (``visible_devices[local_rank]``,
  else ``local_rank``) -> Neuron device ``core * 2 // 8`` (logical-core grouping 2) -> trn2's EFA PCI address
  for that device -> ``get_efa_interface_from_bdf``;
- ``get_efa_interface_from_bdf(bdf)``: the first entry of ``/sys/bus/pci/devices/<bdf>/infiniband``; no such
  directory: "No EFA device found ..."; an empty one: "No infiniband interfaces found ...".

The host it reads is the test's: ``/sys`` under ``CARBON_STANDIN_HOST_ROOT`` (default ``/``), and the host's
Neuron devices are numbered as their /dev/neuronN (the plugin reads the device's minor number: there is no
/dev/neuron here). Standard library only, as the plugin's file is."""

import os

# trn2's EFA PCI address of each Neuron device (ND 0..15), as the plugin's table lists them
TRN2_EFA_BDF = ("0000:c9:00.0", "0000:b4:00.0", "0000:b3:00.0", "0000:ca:00.0", "0000:6c:00.0", "0000:57:00.0",
                "0000:56:00.0", "0000:6d:00.0", "0000:98:00.0", "0000:83:00.0", "0000:82:00.0", "0000:99:00.0",
                "0000:f5:00.0", "0000:e0:00.0", "0000:df:00.0", "0000:f6:00.0")
LOGICAL_NC_CONFIG = 2


def parse_range_list(range_list_str):
    values = []
    for item in range_list_str.split(","):
        first, _, last = item.strip().partition("-")
        values.extend(range(int(first), int(last or first) + 1))
    return values


def get_efa_interface_from_bdf(bdf):
    root = os.environ.get("CARBON_STANDIN_HOST_ROOT", "/")
    shown = f"/sys/bus/pci/devices/{bdf}/infiniband"
    try:
        interfaces = sorted(os.listdir(os.path.join(root, shown.lstrip("/"))))
    except FileNotFoundError as e:
        raise RuntimeError(
            f"No EFA device found at {shown} for BDF {bdf}. This is expected on instances without EFA (e.g. trn3 "
            f"3xlarge). EFA affinity is a CPU performance optimization, not a correctness requirement; set "
            f"NEURON_SKIP_EFA_AFFINITY=1 to skip it on instances without EFA. If you are using an instance that "
            f"supports EFA, we recommend installing EFA to improve performance.") from e
    if not interfaces:
        raise RuntimeError(f"No infiniband interfaces found in {shown} for BDF {bdf}. The EFA device may not be "
                           f"properly initialized.")
    return interfaces[0]


def get_efa_interface(local_rank, visible_devices):
    core = visible_devices[local_rank] if local_rank < len(visible_devices) else local_rank
    device = core * LOGICAL_NC_CONFIG // 8
    if device >= len(TRN2_EFA_BDF):
        raise IndexError(f"Computed Neuron device index {device} exceeds available EFA BDF mappings (max index: "
                         f"{len(TRN2_EFA_BDF) - 1}). local_rank={local_rank}, visible_devices={visible_devices}, "
                         f"lnc_config={LOGICAL_NC_CONFIG}")
    return get_efa_interface_from_bdf(TRN2_EFA_BDF[device])
