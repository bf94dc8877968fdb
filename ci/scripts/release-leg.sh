#!/usr/bin/env bash
# One leg of a release check: the same suite in the baseline and the candidate environment, perf rounds
# interleaved, one verdict in $OUT (verdict.json, verdict.md, each side's logs, JSON and JUnit XML).
# Exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE (a gated figure still open at MAX_ROUNDS: more rounds or a quieter
# host decide it), 2 a usage or environment error.
#
# On a Trn2 runner:      BASELINE_PYTHON=/opt/.../bin/python CANDIDATE_PYTHON=.venv-candidate/bin/python
# In NxDI's CPU mode:    NEURON_CPU=1 BASELINE_NXDI_SOURCE=DIR CANDIDATE_NXDI_SOURCE=DIR
# Per side's stack:      BASELINE_BACKEND / CANDIDATE_BACKEND (neuron, default; hf; openai: a vLLM server),
#                        CANDIDATE_ENDPOINT / BASELINE_ENDPOINT (a served side's running server), or
#                        CANDIDATE_SERVE_SCRIPT / BASELINE_SERVE_SCRIPT (the check starts the served side's server
#                        through it: ci/scripts/vllm-serve.sh, one SHAPES shape), CANDIDATE_IMAGE / BASELINE_IMAGE
# On a Trn2 host:        NEURON_INSTANCE (trn2.3xlarge, trn2.48xlarge: how the sides share the NeuronCores)
#                        LEG_TIMEOUT_MIN (the job's timeout: a plan estimated not to fit it is refused up front),
#                        ACCEPT_SHARED_RUNTIME (non-empty: a served pair of releases that ship different Neuron
#                        runtimes runs on the host's one runtime, recorded in the verdict, instead of stopping)
# Always:                MODEL (e.g. carbon-3b), OUT; optional SHAPES (space-separated, default "smoke"),
#                        ROUNDS (a fixed number of pairs; default: sequential, MIN_ROUNDS 4 .. MAX_ROUNDS 16),
#                        LEGS (the legs merged into one verdict: each spends 1/LEGS of the false-alarm budget),
#                        MODEL_ROOT (real checkpoints), EXTRA_ARGS (more release-check options)
set -euo pipefail
: "${MODEL:?set MODEL, e.g. carbon-3b}" "${OUT:?set OUT, the evidence directory}"
PYTHON="${PYTHON:-python}"
args=(--model "$MODEL" --out "$OUT" --legs "${LEGS:-1}")
if [ -n "${ROUNDS:-}" ]; then
  args+=(--rounds "$ROUNDS")
else
  args+=(--min-rounds "${MIN_ROUNDS:-4}" --max-rounds "${MAX_ROUNDS:-16}")
fi
for shape in ${SHAPES:-smoke}; do args+=(--shape "$shape"); done
args+=(--baseline-backend "${BASELINE_BACKEND:-neuron}" --candidate-backend "${CANDIDATE_BACKEND:-neuron}")
if [ -n "${NEURON_CPU:-}" ]; then args+=(--neuron-cpu); fi
for side in baseline candidate; do
  upper=$(echo "$side" | tr '[:lower:]' '[:upper:]')
  backend_var="${upper}_BACKEND" python_var="${upper}_PYTHON" source_var="${upper}_NXDI_SOURCE"
  endpoint_var="${upper}_ENDPOINT" script_var="${upper}_SERVE_SCRIPT" image_var="${upper}_IMAGE"
  if [ -n "${NEURON_CPU:-}" ] && [ "${!backend_var:-neuron}" = neuron ]; then
    want="$source_var" flag="--$side-nxdi-source"
  else
    want="$python_var" flag="--$side-python"
  fi
  if [ -z "${!want:-}" ]; then echo "release-leg.sh: set $want (the $side's ${flag#--"$side"-})" >&2; exit 2; fi
  args+=("$flag" "${!want}")
  if [ -n "${!endpoint_var:-}" ]; then args+=("--$side-endpoint" "${!endpoint_var}"); fi
  if [ -n "${!script_var:-}" ]; then args+=("--$side-serve-script" "${!script_var}"); fi
  if [ -n "${!image_var:-}" ]; then args+=("--$side-image" "${!image_var}"); fi
done
if [ -n "${MODEL_ROOT:-}" ]; then args+=(--model-root "$MODEL_ROOT"); fi
if [ -n "${NEURON_INSTANCE:-}" ]; then args+=(--neuron-instance "$NEURON_INSTANCE"); fi
if [ -n "${LEG_TIMEOUT_MIN:-}" ]; then args+=(--leg-timeout "$LEG_TIMEOUT_MIN"); fi
if [ -n "${ACCEPT_SHARED_RUNTIME:-}" ]; then args+=(--accept-shared-runtime); fi
# shellcheck disable=SC2086  # EXTRA_ARGS is a list of options
exec "$PYTHON" -m harness.cli release-check "${args[@]}" ${EXTRA_ARGS:-}
