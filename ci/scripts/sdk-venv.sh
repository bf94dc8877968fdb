#!/usr/bin/env bash
# A fresh venv for one Neuron SDK release: its NxDI, NxD, neuronx-cc and torch-neuronx installed
# together (one resolver run, from the Neuron pip repository), then this harness. The runner's DLAMI
# venv is never touched. Reused when it already holds exactly these specs.
# Usage: sdk-venv.sh VENV NXDI_SPEC NXD_SPEC CC_SPEC TORCH_NEURONX_SPEC   (specs such as "==0.9.*")
set -euo pipefail
venv="${1:?usage: sdk-venv.sh VENV NXDI_SPEC NXD_SPEC CC_SPEC TORCH_NEURONX_SPEC}"
specs=("neuronx-distributed-inference${2:?}" "neuronx-distributed${3:?}" "neuronx-cc${4:?}" "torch-neuronx${5:?}")
stamp="$venv/.carbon-harness-specs"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${specs[*]}" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet --extra-index-url https://pip.repos.neuron.amazonaws.com \
    "${specs[@]}" -e ".[test]"
  echo "${specs[*]}" > "$stamp"
fi
"$venv/bin/python" -m pip install --quiet --no-deps -e .   # this checkout's harness, whatever was cached
"$venv/bin/python" -m pip check
"$venv/bin/python" -m harness.release.probe
