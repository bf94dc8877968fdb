#!/usr/bin/env bash
# The release check's own venv: where `carbon-harness release-check` itself runs (the output contract's fp32
# reference and yardsticks, the statistics, the verdict), apart from both sides' venvs. A neutral CPU
# environment: torch from PyTorch's CPU index, transformers as the NxDI 2.29 stack pins it (4.57.*, the
# release the contract's criterion was calibrated on), this harness, and no Neuron package, so nothing it runs
# can start the Neuron runtime or take a NeuronCore; the reference is the same whichever releases the sides
# install. Reused while its stamp holds (pyproject.toml and the interpreter's version).
# Usage: check-venv.sh VENV   (env: PYTHON, the interpreter to build from, default python3, 3.10 or later)
set -euo pipefail
venv="${1:?usage: check-venv.sh VENV (e.g. /opt/carbon-harness-venvs/check)}"
python="${PYTHON:-python3}"
version=$("$python" -c 'import sys; assert sys.version_info >= (3, 10); print("%d.%d" % sys.version_info[:2])' 2> /dev/null) || {
  echo "check-venv.sh: $python is not a Python 3.10 or later: set PYTHON" >&2
  exit 2
}
stamp="$venv/.carbon-harness-stamp"
want="$(sha256sum pyproject.toml | cut -c1-64) python $version check"
if [ ! -x "$venv/bin/python" ] || [ "$(head -n 1 "$stamp" 2> /dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
fi
"$venv/bin/python" -m pip install --quiet -e ".[test]" "transformers==4.57.*"
if "$venv/bin/python" -m pip list 2> /dev/null | grep -qiE '^(neuronx|torch-neuronx|libneuronxla|vllm-neuron|nki) '; then
  echo "check-venv.sh: $venv holds a Neuron package: the check's own venv must not (rebuild it: rm -rf $venv)" >&2
  exit 2
fi
{ echo "$want"; "$venv/bin/python" -m pip freeze --exclude-editable; } > "$stamp.tmp"
mv "$stamp.tmp" "$stamp"  # written last: an interrupted build leaves no stamp, so the next run rebuilds
