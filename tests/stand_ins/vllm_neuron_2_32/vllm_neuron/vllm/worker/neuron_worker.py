"""STAND-IN of the 2.32+ plugin's worker check (jinhuang12/vllm-neuron ``vllm_neuron/vllm/worker/neuron_worker.py``
at 44a17b6ff476, ``NeuronWorker._get_visible_devices``; the range syntax of ``vllm_neuron/utils/hardware_config.py``
``parse_range_list`` at 0bae3e9c50d0, here ``utils/hardware_config.py``). The error text is the plugin's,
verbatim."""

from collections.abc import Mapping

from vllm_neuron.utils.hardware_config import parse_range_list


def visible_devices(environ: Mapping[str, str], num_local_ranks: int) -> list[int]:
    if "NEURON_RT_VISIBLE_CORES" in environ:
        raise RuntimeError(
            "NEURON_RT_VISIBLE_CORES cannot be used with multi-processing execution on vLLM. "
            "Set NEURON_VISIBLE_DEVICES to control device visibility.")
    value = environ.get("NEURON_VISIBLE_DEVICES") or ",".join(str(i) for i in range(num_local_ranks))
    devices = parse_range_list(value)
    assert len(devices) == num_local_ranks, (
        f"NEURON_VISIBLE_DEVICES={value} names {len(devices)} devices for {num_local_ranks} local ranks")
    return devices


def init_checks(environ: Mapping[str, str], num_local_ranks: int) -> list[int]:
    """``_init_neuron_distributed_environment_and_runtime``'s checks, in its order, for each local rank: the
    visible devices, then ``_set_efa_affinity`` (``hardware_config.get_efa_interface``) unless
    NEURON_SKIP_EFA_AFFINITY is set to anything but "0"."""
    from vllm_neuron.utils.hardware_config import get_efa_interface

    devices = visible_devices(environ, num_local_ranks)
    if environ.get("NEURON_SKIP_EFA_AFFINITY", "0") == "0":
        for rank in range(num_local_ranks):
            get_efa_interface(rank, devices)
    return devices
