#!/usr/bin/env bash
# The gate: every leg's verdict merged into one (FAIL if any leg failed, else INCONCLUSIVE if any leg was:
# a gated figure still open at --max-rounds), its markdown appended to $GITHUB_STEP_SUMMARY when set.
# Exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE (neither: rerun with more rounds or on a quieter host), 2 an error. With EARLIER (the folder earlier-evidence.sh filled) each leg's
# baseline is also set beside the same release's baseline of an earlier run (`carbon-harness compare`
# of their first perf rounds): a drift there is the host (runtime, driver, a noisy runner), not the
# candidate. Reported as a warning and in the summary; it does not change the verdict.
# Usage: gate.sh OUT LEG_DIR [LEG_DIR ...]   (env: EARLIER, BASELINE_SDK)
set -euo pipefail
out="${1:?usage: gate.sh OUT LEG_DIR [LEG_DIR ...]}"; shift
[ "$#" -gt 0 ] || { echo "gate.sh: no leg directories given" >&2; exit 2; }
PYTHON="${PYTHON:-python}"
status=0
"$PYTHON" -m harness.cli release-check --merge "$@" --out "$out" --force || status=$?
case "$status" in
  0) ;;
  1) echo "::error title=Release check FAIL::a regression, a broken contract or a candidate that cannot run: $out/verdict.md" ;;
  3) echo "::warning title=Release check INCONCLUSIVE::a gated figure is still open at --max-rounds (not a pass, not a regression): more rounds or a quieter host decide it; $out/verdict.md" ;;
  *) echo "::error title=Release check error::release-check --merge exited $status" ;;
esac
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/verdict.md" ]; then
  cat "$out/verdict.md" >> "$GITHUB_STEP_SUMMARY"
  for leg in "$@"; do [ -f "$leg/verdict.md" ] && cat "$leg/verdict.md" >> "$GITHUB_STEP_SUMMARY"; done
fi
if [ -n "${EARLIER:-}" ] && [ -d "$EARLIER" ] && [ -n "$(ls -A "$EARLIER")" ]; then
  : "${BASELINE_SDK:?set BASELINE_SDK with EARLIER}"
  for leg in "$@"; do
    model=$(basename "$leg")
    model="${model#verdict-}"
    before="$EARLIER/baseline-evidence-sdk$BASELINE_SDK-$model/perf-round-1.json" now="$leg/baseline/perf-round-1.json"
    if [ ! -f "$before" ] || [ ! -f "$now" ]; then
      echo "::warning::$model: no baseline round 1 to compare with the earlier run ($before, $now)"
      continue
    fi
    drift=0
    report=$("$PYTHON" -m harness.cli compare "$before" "$now" 2>&1) || drift=$?
    echo "$report"
    if [ "$drift" -eq 1 ]; then
      echo "::warning::$model: the baseline (Neuron SDK $BASELINE_SDK) is slower than in the earlier run: the host changed"
    elif [ "$drift" -eq 3 ]; then
      echo "::warning::$model: the baseline (Neuron SDK $BASELINE_SDK) may be slower than in the earlier run (compare is inconclusive)"
    elif [ "$drift" -ne 0 ]; then
      echo "::error::$model: carbon-harness compare of the earlier baseline failed (exit $drift)" >&2
      status=2
    fi
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
      # shellcheck disable=SC2016  # the backticks are markdown's code fence
      printf '\n### %s: the baseline against the earlier run\n\n```\n%s\n```\n' "$model" "$report" >> "$GITHUB_STEP_SUMMARY"
    fi
  done
fi
exit "$status"
