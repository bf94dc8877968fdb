#!/usr/bin/env bash
# A fresh venv for one Neuron SDK release: the exact Python packages of that release (a constraints
# file of ci/constraints/, from Neuron's release content: NxDI, NxD, neuronx-cc, torch-neuronx,
# libneuronxla, nki) installed together from the Neuron pip repository, torch from PyTorch's CPU index
# as Neuron's own instructions do (PyPI's x86 torch is the CUDA build), then this harness. The runner's
# DLAMI venv is never touched. The pinned Neuron packages come from the Neuron index alone (--index-url,
# --no-deps: PyPI's placeholders of the same names are never candidates), by hash where the constraints file
# records them (every pin or none). Only Python packages are swapped: the Neuron runtime, driver and
# collectives are the host's OS packages, the same for both sides (the probe records their versions and
# compares them with the constraints file's, which is kept in the venv as carbon-harness-constraints.txt).
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
hashed=$(grep -cE '^[A-Za-z0-9_.-]+==[^ ]+ .*--hash=sha256:[0-9a-f]{64}' "$constraints" || true)
if [ "$hashed" -gt 0 ] && [ "$hashed" -ne "${#packages[@]}" ]; then
  echo "sdk-venv.sh: $constraints hashes $hashed of its ${#packages[@]} pins: hash every pin or none (pip's hash-checking mode is all or nothing)" >&2
  exit 2
fi
neuron_index=https://pip.repos.neuron.amazonaws.com
indexes=(--extra-index-url "$neuron_index" --extra-index-url https://download.pytorch.org/whl/cpu)
hash_mode=()
if [ "$hashed" -gt 0 ]; then hash_mode=(--require-hashes); fi
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
sed 's/ --hash=[^ ]*//g' "$constraints" > "$pins"  # pip enforces hashes in a constraints file only partly (pypa/pip#12956)
stamp="$venv/.carbon-harness-stamp"
want="$(sha256sum "$constraints" pyproject.toml | cut -c1-64 | tr '\n' ' ')python $version extras ${EXTRAS:-test}"
if [ ! -x "$venv/bin/python" ] || [ "$(head -n 1 "$stamp" 2> /dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # the pinned Neuron packages from the Neuron index alone, by hash where the file has them: PyPI's placeholders
  # of the same names (nki, neuronx-cc, vllm-neuron) are never candidates
  "$venv/bin/python" -m pip install --quiet --no-deps --index-url "$neuron_index" "${hash_mode[@]}" -r "$constraints"
  "$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$pins" "${packages[@]}" -e ".[${EXTRAS:-test}]"
fi
# this checkout's harness and its dependencies (a new one is installed here), the SDK's pins held
"$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$pins" -e ".[${EXTRAS:-test}]"
"$venv/bin/python" -m pip check
cp "$constraints" "$venv/carbon-harness-constraints.txt"  # the probe compares its OS packages with the host's
{ echo "$want"; "$venv/bin/python" -m pip freeze --exclude-editable; } > "$stamp.tmp"
mv "$stamp.tmp" "$stamp"   # written last: an interrupted build leaves no stamp, so the next run rebuilds
"$venv/bin/python" -m harness.release.probe
