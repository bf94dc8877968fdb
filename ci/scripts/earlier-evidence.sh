#!/usr/bin/env bash
# The earlier evidence of the baseline release: the newest earlier run of this workflow that uploaded
# baseline-evidence-sdk$BASELINE_SDK-* is downloaded into DIR (one folder per model), for gate.sh to set
# this run's baseline beside. None found: this is the first release check against that release, and
# its evidence is recorded now. Any other gh failure (HTTP 403 when the job's token lacks
# `actions: read`, no network, a gh that is not logged in) fails the step naming gh's error: a missing
# comparison must never read as "first release check".
# Usage: earlier-evidence.sh DIR   (env: GH_TOKEN, BASELINE_SDK, THIS_RUN = github.run_id)
set -euo pipefail
dir="${1:?usage: earlier-evidence.sh DIR (env: GH_TOKEN, BASELINE_SDK, THIS_RUN)}"
: "${BASELINE_SDK:?set BASELINE_SDK, the Neuron SDK release of the baseline}" "${THIS_RUN:?set THIS_RUN (github.run_id)}"
mkdir -p "$dir"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() {
  echo "::error::earlier-evidence.sh: $1 failed: $(tail -n 1 "$err") (the gate job needs permissions: actions: read)" >&2
  exit 2
}
runs=$(gh run list --workflow trn2.yml --json databaseId --jq '.[].databaseId' --limit 20 2> "$err") || fail "gh run list"
for run in $runs; do
  [ "$run" = "$THIS_RUN" ] && continue
  if gh run download "$run" --pattern "baseline-evidence-sdk$BASELINE_SDK-*" --dir "$dir" 2> "$err"; then
    echo "earlier evidence of Neuron SDK $BASELINE_SDK: run $run"
    exit 0
  fi
  # gh's own words when the run has no artifact matching the pattern: "no valid artifacts found to download"
  # (a run without artifacts) or "no artifact matches any of the names or patterns provided" (a run with
  # artifacts, none of them this baseline's: another baseline release, a leg that failed early); anything
  # else is a failure
  grep -qiE "no valid artifacts found to download|no artifact matches any of the names or patterns provided" "$err" \
    || fail "gh run download $run"
done
echo "::notice::first release check against Neuron SDK $BASELINE_SDK: its evidence is recorded as baseline-evidence-sdk$BASELINE_SDK-*"
