#!/usr/bin/env bash
# The gate: every leg's verdict merged into one (FAIL if any leg failed), its markdown appended to
# $GITHUB_STEP_SUMMARY when set. Usage: gate.sh OUT LEG_DIR [LEG_DIR ...]
set -euo pipefail
out="${1:?usage: gate.sh OUT LEG_DIR [LEG_DIR ...]}"; shift
[ "$#" -gt 0 ] || { echo "gate.sh: no leg directories given" >&2; exit 2; }
PYTHON="${PYTHON:-python}"
status=0
"$PYTHON" -m harness.cli release-check --merge "$@" --out "$out" --force || status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/verdict.md" ]; then
  cat "$out/verdict.md" >> "$GITHUB_STEP_SUMMARY"
  for leg in "$@"; do [ -f "$leg/verdict.md" ] && cat "$leg/verdict.md" >> "$GITHUB_STEP_SUMMARY"; done
fi
exit "$status"
