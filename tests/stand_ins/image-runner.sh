#!/usr/bin/env bash
# STAND-IN for a container runner (`docker run`), for rehearsing a release check's --*-image command lines on
# a machine without one: it reads `run` and its options as docker does (--rm, --init, --network, --ipc,
# --device, -v SRC:DST, -w DIR, -e NAME), checks each -v mounts a path onto itself (the check mounts the
# checkout, the evidence and the caches at the same paths), then runs the command after the image on this
# host with only the -e variables (their values from its own environment, as `docker run -e NAME` takes them),
# PATH and HOME, in the -w directory: a container's clean environment. The image is not used; each call is
# appended to $STAND_IN_LOG (one JSON line: its arguments).
set -euo pipefail
call=("$@")
[ "${1:-}" = run ] || { echo "stand-in image runner: only 'run' is supported, got '${1:-}'" >&2; exit 2; }
shift
devices=() mounts=() names=() workdir=$PWD
while [ "$#" -gt 0 ]; do
  case "$1" in
    --rm | --init) shift ;;
    --network | --ipc) shift 2 ;;
    --device=*) devices+=("${1#--device=}"); shift ;;
    -v) src="${2%%:*}" dst="${2#*:}"
        [ "$src" = "$dst" ] || { echo "stand-in image runner: -v $2 mounts elsewhere" >&2; exit 2; }
        mounts+=("$src"); shift 2 ;;
    -w) workdir=$2; shift 2 ;;
    -e) names+=("$2"); shift 2 ;;
    -*) echo "stand-in image runner: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
: "${1:?stand-in image runner: no image}"  # the image: not used
shift
env_args=("PATH=$PATH" "HOME=${HOME:-/root}")
for name in "${names[@]}"; do
  if [ -n "${!name+set}" ]; then env_args+=("$name=${!name}"); fi
done
if [ -n "${STAND_IN_LOG:-}" ]; then
  python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${call[@]}" >> "$STAND_IN_LOG"
fi
cd "$workdir"
exec env -i "${env_args[@]}" "$@"
