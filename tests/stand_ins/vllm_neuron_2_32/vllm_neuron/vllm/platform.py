"""STAND-IN of the 2.32+ plugin's platform class (jinhuang12/vllm-neuron ``vllm_neuron/vllm/platform.py`` at
ce02eaf4de30): only the attribute that names the variable a server's NeuronCores go in, read by
``harness.core.neuron_visibility`` from the source, as it reads the real one."""


class NeuronPlatform:
    device_control_env_var: str = "NEURON_VISIBLE_DEVICES"
