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
# records it per side, into the verdict). A release whose file leaves packages open ("# unpinned:") is held to its
# first build's resolved set (ci/scripts/hold-resolved.sh; env RESOLVED, the record's path).
# Usage: sdk-venv.sh VENV CONSTRAINTS   (env: EXTRAS, the harness extras, default test; PYTHON, the interpreter
#        to build from, which must be one the constraints file's "# python:" line names; unset: python3 if that line
#        names its version, else the newest python3.X on PATH that the line names, said on stderr; none: exit 2)
#        sdk-venv.sh --which-python CONSTRAINTS   prints the path of the interpreter a build would use and builds
#        nothing (exit 2, with the same one-line error, where there is none)
set -euo pipefail
usage="usage: sdk-venv.sh VENV CONSTRAINTS (e.g. ci/constraints/sdk-2.29.0.txt), or sdk-venv.sh --which-python CONSTRAINTS"
which_only=
if [ "${1:-}" = --which-python ]; then
  which_only=1
  constraints="${2:?$usage}"
else
  venv="${1:?$usage}"
  constraints="${2:?$usage}"
fi
if [ ! -f "$constraints" ]; then
  echo "sdk-venv.sh: no constraints file $constraints; known: $(cd "$(dirname "$0")/../constraints" && echo *.txt)" >&2
  exit 2
fi
supported=$(sed -n 's/^# python: *\([0-9. ]*\).*/\1/p' "$constraints" | head -n 1)
read -r -a versions <<< "$supported"
supported="${versions[*]}"  # the versions alone, without the line's trailing spaces
supports() { case " $supported " in *" $1 "*) return 0 ;; esac; return 1; }
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2> /dev/null || true; }
either() {  # "a", "a or b", "a, b or c"
  local out="$1"; shift
  while [ $# -gt 1 ]; do out="$out, $1"; shift; done
  if [ $# -eq 1 ]; then out="$out or $1"; fi
  echo "$out"
}
if [ -n "${PYTHON:-}" ]; then
  python="$PYTHON"
  version=$(py_version "$python")
  if [ -z "$version" ]; then
    echo "sdk-venv.sh: PYTHON=$python does not run as a Python interpreter; $constraints supports Python ${supported:-(none named)}" >&2
    exit 2
  fi
  if ! supports "$version"; then
    echo "sdk-venv.sh: $python is Python $version; $constraints supports Python ${supported:-(none named)}: set PYTHON" >&2
    exit 2
  fi
else
  if [ "${#versions[@]}" -eq 0 ]; then
    echo "sdk-venv.sh: $constraints names no Python on a '# python:' line: add one (e.g. '# python: 3.11 3.12') or set PYTHON" >&2
    exit 2
  fi
  python='' version=''
  if ! command -v python3 > /dev/null; then
    why="there is no python3 on PATH" short="there is no python3"
  else
    version=$(py_version python3)
    if [ -z "$version" ]; then
      why="python3 does not run as a Python interpreter" short="python3 does not run"
    elif supports "$version"; then
      python=python3
      echo "sdk-venv.sh: building with python3 (Python $version, which $constraints supports)" >&2
    else
      why="python3 is Python $version, which $constraints does not support" short="python3 is $version"
    fi
  fi
  if [ -z "$python" ]; then
    mapfile -t newest_first < <(printf '%s\n' "${versions[@]}" | sort -t . -k 1,1nr -k 2,2nr)
    for v in "${newest_first[@]}"; do
      found=$(command -v "python$v" || true)
      if [ -n "$found" ] && [ "$(py_version "$found")" = "$v" ]; then
        python="$found" version="$v"
        break
      fi
    done
    if [ -z "$python" ]; then
      names=()
      for v in "${newest_first[@]}"; do names+=("python$v"); done
      if supports 3.12; then install="Ubuntu 24.04: apt-get install python3.12 python3.12-venv"
      else install="e.g. apt-get install ${names[0]} ${names[0]}-venv"; fi
      echo "sdk-venv.sh: $constraints needs Python $(either "${versions[@]}"); $short and no $(either "${names[@]}") is on PATH: install one ($install) or set PYTHON" >&2
      exit 2
    fi
    echo "sdk-venv.sh: $why; building with python$version (Python $version, $python)" >&2
  fi
fi
if [ -n "$which_only" ]; then
  command -v "$python"
  exit 0
fi
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
pins=$(mktemp) neuron_pins=$(mktemp)
trap 'rm -f "$pins" "$neuron_pins"' EXIT
sed 's/ --hash=[^ ]*//g' "$constraints" > "$pins"  # pip enforces hashes in a constraints file only partly (pypa/pip#12956)
# a pin marked "from: pypi" (the framework the plugin runs on: vllm) is PyPI's: held by $pins, not fetched from the
# Neuron index
grep -v 'from: pypi' "$constraints" > "$neuron_pins" || true
stamp="$venv/.carbon-harness-stamp"
want="$(sha256sum "$constraints" pyproject.toml | cut -c1-64 | tr '\n' ' ')python $version extras ${EXTRAS:-test}"
if [ ! -x "$venv/bin/python" ] || [ "$(head -n 1 "$stamp" 2> /dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # the pinned Neuron packages from the Neuron index alone, by hash where the file has them: PyPI's placeholders
  # of the same names (nki, neuronx-cc, vllm-neuron) are never candidates
  "$venv/bin/python" -m pip install --quiet --no-deps --index-url "$neuron_index" "${hash_mode[@]}" -r "$neuron_pins"
  "$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$pins" "${packages[@]}" -e ".[${EXTRAS:-test}]"
fi
# this checkout's harness and its dependencies (a new one is installed here), the SDK's pins held
"$venv/bin/python" -m pip install --quiet "${indexes[@]}" -c "$pins" -e ".[${EXTRAS:-test}]"
"$venv/bin/python" -m pip check
cp "$constraints" "$venv/carbon-harness-constraints.txt"  # the probe compares its OS packages with the host's
{ echo "$want"; "$venv/bin/python" -m pip freeze --exclude-editable; } > "$stamp.tmp"
mv "$stamp.tmp" "$stamp"   # written last: an interrupted build leaves no stamp, so the next run rebuilds
# where the constraints file cannot pin everything ("# unpinned:"), this build is held to the release's recorded
# resolved set (the first build records it): a drift stops here, naming the package and both versions
bash "$(dirname "$0")/hold-resolved.sh" "$venv" "$constraints"
"$venv/bin/python" -m harness.release.probe
