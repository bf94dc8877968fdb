"""STAND-IN of the 2.32+ plugin's worker check (jinhuang12/vllm-neuron ``vllm_neuron/vllm/worker/neuron_worker.py``
at 44a17b6ff476, ``NeuronWorker._get_visible_devices``; the range syntax of ``vllm_neuron/utils/hardware_config.py``
``parse_range_list`` at 0bae3e9c50d0). The error text is the plugin's, verbatim."""

from collections.abc import Mapping


def parse_range_list(value: str) -> list[int]:
    cores: list[int] = []
    for part in value.split(","):
        low, sep, high = part.strip().partition("-")
        cores += list(range(int(low), int(high) + 1)) if sep else [int(low)]
    return cores


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
