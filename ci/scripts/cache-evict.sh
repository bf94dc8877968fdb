#!/usr/bin/env bash
# Bound the runner's compile cache: compiled artifacts (each with its sharded weights, which load
# needs) not loaded for DAYS days (default 14) are removed; their keys hold the NxDI / compiler versions,
# so a new release never reuses an old one. When an artifact was last loaded is the mtime of its
# `last_used` file (touched on every load: harness/backends/neuron/artifacts.py); an artifact from
# before that file existed counts from its key file (written when it was built), and a directory with
# neither (an interrupted build's leftovers) from its own mtime. Never by atime: loading does not list
# a directory, and `du` over the cache refreshes every atime. Usage: cache-evict.sh CACHE_DIR [DAYS]
set -euo pipefail
cache="${1:?usage: cache-evict.sh CACHE_DIR [DAYS]}"
days="${2:-14}"
case "$days" in
  ''|*[!0-9]*) echo "cache-evict.sh: DAYS must be a whole number of days, got '$days'" >&2; exit 2 ;;
esac
[ -d "$cache" ] || exit 0
cutoff=$(( $(date +%s) - days * 86400 ))
evicted=0
for dir in "$cache"/* "$cache"/.[!.]*; do
  [ -d "$dir" ] || continue
  stamp="$dir"
  for candidate in "$dir/last_used" "$dir/carbon_artifact_key.json"; do
    if [ -e "$candidate" ]; then stamp="$candidate"; break; fi
  done
  used=$(stat -c %Y "$stamp")
  if [ "$used" -lt "$cutoff" ]; then
    echo "evicting $dir (last used $(date -u -d "@$used" +%F), over $days days ago)"
    rm -rf -- "$dir"
    evicted=$((evicted + 1))
  fi
done
echo "cache-evict.sh: $evicted artifact(s) evicted; $(du -sh "$cache" | cut -f1) left in $cache"
