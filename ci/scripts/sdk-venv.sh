#!/usr/bin/env bash
# A fresh venv for one Neuron SDK release: the exact Python packages of that release (a constraints
# file of ci/constraints/, from Neuron's release content: NxDI, NxD, neuronx-cc, torch-neuronx,
# libneuronxla, nki) installed together from the Neuron pip repository, torch from PyTorch's CPU index
# as Neuron's own instructions do (PyPI's x86 torch is the CUDA build), then this harness. The runner's
# DLAMI venv is never touched. Only Python packages are swapped: the Neuron runtime, driver and
# collectives are the host's OS packages, the same for both sides (the probe records their versions).
# Reused while its stamp's first line holds: the constraints file, pyproject.toml and the interpreter's
# version; any change rebuilds it. The rest of the stamp is the venv's `pip freeze` (the probe also
# records it per side, into the verdict).
# Usage: sdk-venv.sh VENV CONSTRAINTS   (env: EXTRAS, the harness extras, default test; PYTHON, the interpreter
#        to build from, default python3;
#        it must be one the constraints file's "# python:" line names)
set -euo pipefail
venv="${1:?usage: sdk-venv.sh VENV CONSTRAINTS (e.g. ci/constraints/sdk-2.29.0.txt)}"
constraints="${2:?usage: sdk-venv.sh VENV CONSTRAINTS (e.g. ci/constraints/sdk-2.29.0.txt)}"
if [ ! -f "$constraints" ]; then
  echo "sdk-venv.sh: no constraints file $constraints; known: $(cd "$(dirname "$0")/../constraints" && echo *.txt)" >&2
  exit 2
fi
python="${PYTHON:-python3}"
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
supported=$(sed -n 's/^# python: *\([0-9. ]*\).*/\1/p' "$constraints" | head -n 1)
case " $supported " in
  *" $version "*) ;;
  *) echo "sdk-venv.sh: $python is Python $version; $constraints supports Python ${supported:-(none named)}: set PYTHON" >&2
     exit 2 ;;
esac
mapfile -t packages < <(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$constraints")
[ "${#packages[@]}" -gt 0 ] || { echo "sdk-venv.sh: $constraints pins no package" >&2; exit 2; }
indexes=(--extra-index-url https://pip.repos.neuron.amazonaws.com --extra-index-url https://download.pytorch.org/whl/cpu)
stamp="$venv/.carbon-harness-stamp"
want="$(sha256sum "$constraints" pyproject.toml | cut -c1-64 | tr '\n' ' ')python $version extras ${EXTRAS:-test}"
if [ ! -x "$venv/bin/python" ] || [ "$(head -n 1 "$stamp" 2> /dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$constraints" "${packages[@]}" -e ".[${EXTRAS:-test}]"
fi
# this checkout's harness and its dependencies (a new one is installed here), the SDK's pins held
"$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$constraints" -e ".[${EXTRAS:-test}]"
"$venv/bin/python" -m pip check
{ echo "$want"; "$venv/bin/python" -m pip freeze --exclude-editable; } > "$stamp.tmp"
mv "$stamp.tmp" "$stamp"   # written last: an interrupted build leaves no stamp, so the next run rebuilds
"$venv/bin/python" -m harness.release.probe
