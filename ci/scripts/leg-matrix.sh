#!/usr/bin/env bash
# The Trn2 workflow's legs, as GitHub's matrix: one leg per (instance type, model) where both sides are NxDI
# (all SHAPES in one check), one per (instance type, model, shape) where a side is served (a vLLM Neuron
# server is compiled for one shape: one served leg per shape; the migration, and vLLM Neuron -> vLLM Neuron). Each leg runs on runners labelled with its
# instance type, and spends 1/count of the verdict's false-alarm budget. Prints `legs=<JSON>` and
# `count=<N>` for $GITHUB_OUTPUT.
# Usage: leg-matrix.sh   (env: INSTANCES, SHAPES: space-separated; CANDIDATE_BACKEND, BASELINE_BACKEND: neuron or openai)
set -euo pipefail
: "${INSTANCES:?usage: leg-matrix.sh (env: INSTANCES SHAPES CANDIDATE_BACKEND)}" "${SHAPES:?usage: leg-matrix.sh (env: INSTANCES SHAPES CANDIDATE_BACKEND)}"
backend=neuron
for var in CANDIDATE_BACKEND BASELINE_BACKEND; do
  case "${!var:-neuron}" in
    neuron) ;;
    openai) backend=openai ;;
    *) echo "leg-matrix.sh: $var must be neuron or openai, got '${!var}'" >&2; exit 2 ;;
  esac
done
declare -A checkpoint=([carbon-500m]=Carbon-500M [carbon-3b]=Carbon-3B [carbon-8b]=Carbon-8B)
read -ra instances <<< "$INSTANCES"
read -ra shapes <<< "$SHAPES"
for name in "${instances[@]}" "${shapes[@]}"; do
  case "$name" in
    *[!a-z0-9.-]*) echo "leg-matrix.sh: '$name' is not an instance type or shape name ([a-z0-9.-])" >&2; exit 2 ;;
  esac
done
for instance in "${instances[@]}"; do
  case "$instance" in trn2.3xlarge | trn2.48xlarge) ;; *) echo "leg-matrix.sh: instance type '$instance': give trn2.3xlarge or trn2.48xlarge" >&2; exit 2 ;; esac
done
legs=()
for instance in "${instances[@]}"; do
  for model in carbon-500m carbon-3b carbon-8b; do
    if [ "$backend" = openai ]; then
      for shape in "${shapes[@]}"; do
        legs+=("{\"instance\":\"$instance\",\"model\":\"$model\",\"checkpoint\":\"${checkpoint[$model]}\",\"shapes\":\"$shape\",\"leg\":\"$instance-$model-$shape\"}")
      done
    else
      legs+=("{\"instance\":\"$instance\",\"model\":\"$model\",\"checkpoint\":\"${checkpoint[$model]}\",\"shapes\":\"${shapes[*]}\",\"leg\":\"$instance-$model\"}")
    fi
  done
done
joined=$(IFS=,; echo "${legs[*]}")
echo "legs={\"include\":[$joined]}"
echo "count=${#legs[@]}"
