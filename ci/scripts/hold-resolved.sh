#!/usr/bin/env bash
# Holds a side's venv to its release's resolved set (harness/release/resolved.py), where the release's constraints
# file cannot pin every package its plugin leaves open (a "# unpinned:" line naming them: the 2.32+ vLLM Neuron
# plugin leaves libtorch-neuronx-lite, transformers, fastapi and more to pip). The first build of a release records
# name==version of every package its venv holds; every later build of the same release (either side's venv, any
# run on this runner) is held to that record, and a drift stops here: one line naming the package and both
# versions, exit 2. A constraints file with no "# unpinned:" line pins everything: nothing to hold, exit 0.
# The record lives beside the venvs, outside any one of them (sdk-venv.sh rebuilds a venv with rm -rf):
# RESOLVED, default DIR/resolved/NAME.txt for a venv DIR/VENV and constraints NAME.txt. The venv gets
# carbon-harness-resolved.json (the set, the record, the outcome), which the probe puts into the verdict.
# Usage: hold-resolved.sh VENV CONSTRAINTS   (called by sdk-venv.sh after each build or reuse)
set -euo pipefail
usage="usage: hold-resolved.sh VENV CONSTRAINTS"
venv="${1:?$usage}"
constraints="${2:?$usage}"
if [ ! -x "$venv/bin/python" ]; then
  echo "hold-resolved.sh: $venv is no venv (no bin/python): build it first (sdk-venv.sh)" >&2
  exit 2
fi
unpinned=$(sed -n 's/^# unpinned: *//p' "$constraints" | head -n 1)
if [ -z "${unpinned// /}" ]; then exit 0; fi
release=$(basename "$constraints" .txt)
record="${RESOLVED:-$(cd "$(dirname "$venv")" && pwd)/resolved/$release.txt}"
# run by path with the side's own interpreter, isolated (-I: no PYTHONPATH, no user site, not the script's folder on
# sys.path): the set it reads is that interpreter's own
exec "$venv/bin/python" -I "$(cd "$(dirname "$0")/../.." && pwd)/harness/release/resolved.py" "$record" --release "$release"
