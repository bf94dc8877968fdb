"""STAND-IN entry point for serving with the NxDI-based vLLM Neuron plugin (vllm-project/vllm-neuron 0.2.0,
vLLM 0.11.0) over NxDI's CPU mode on a host with no Neuron device (tests/release/test_vllm_neuron_nxdi.py;
the venv: ci/scripts/vllm-neuron-nxdi-venv.sh). Python imports this module at start in every process that has
this directory on PYTHONPATH: a release check's candidate side (pytest, probe, the vLLM server and the engine
processes it spawns). It does nothing unless CARBON_VN_NXDI_SOURCE names an NxDI source tree (one with
neuronx-distributed-inference/src and neuronx-distributed/src), and then only arms import hooks: the
stand-ins (``vn_nxdi_standins``: P1, P2, P3, E1 and the stub-name extension) apply when torchvision or the
plugin is first imported, so a process that imports neither (the side's pytest run) is unchanged.
No code of the plugin is here.
"""

import os

if os.environ.get("CARBON_VN_NXDI_SOURCE"):
    import vn_nxdi_standins

    vn_nxdi_standins.arm(os.environ["CARBON_VN_NXDI_SOURCE"])
