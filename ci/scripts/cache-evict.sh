#!/usr/bin/env bash
# Bound the runner's compile caches (NxDI's artifacts, each with its sharded weights, and vLLM Neuron's
# compile roots), least recently used first, and check the disk before a leg starts:
#   1. an entry not used for DAYS days (default 14) is evicted;
#   2. then, while the caches together hold more than MAX_GB, the least recently used entry is evicted;
#   3. then, while the caches' file system has less than FREE_GB free, likewise; if it still has less with
#      nothing left to evict, the step fails naming the free space, the need and the biggest directories.
# An entry is each directory directly under a cache. Its last use is the mtime of its `last_used` file
# (touched on every load of an NxDI artifact, harness/backends/neuron/artifacts.py, and on every start of a
# vLLM server, harness/core/vllm_neuron.py); an entry from before that file counts from its key file
# (written when it was built), and one with neither (an interrupted build's leftovers) from its own mtime.
# Never by atime: loading does not list a directory, and `du` over the cache refreshes every atime.
# Usage: cache-evict.sh [--days D] [--max-gb G] [--free-gb F] CACHE_DIR [CACHE_DIR ...]
set -euo pipefail
usage="usage: cache-evict.sh [--days D] [--max-gb G] [--free-gb F] CACHE_DIR [CACHE_DIR ...]"
days=14 max_gb="" free_gb=""
whole() {  # whole() NAME VALUE: a whole number, or exit 2 naming it
  case "$2" in
    '' | *[!0-9]*) echo "cache-evict.sh: $1 must be a whole number, got '$2'" >&2; exit 2 ;;
  esac
}
while [ "$#" -gt 0 ]; do
  case "$1" in
    --days) whole --days "${2:-}"; days="$2"; shift 2 ;;
    --max-gb) whole --max-gb "${2:-}"; max_gb="$2"; shift 2 ;;
    --free-gb) whole --free-gb "${2:-}"; free_gb="$2"; shift 2 ;;
    --*) echo "cache-evict.sh: unknown option $1; $usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ "$#" -gt 0 ] || { echo "$usage" >&2; exit 2; }
caches=()
for cache in "$@"; do
  if [ -d "$cache" ]; then caches+=("$cache"); fi
done
now=$(date +%s)
evicted=0
# every entry as "LAST_USE KIB PATH", least recently used first
entries() {
  local cache dir stamp candidate
  for cache in "${caches[@]}"; do
    for dir in "$cache"/* "$cache"/.[!.]*; do
      [ -d "$dir" ] || continue
      stamp="$dir"
      for candidate in "$dir/last_used" "$dir/carbon_artifact_key.json"; do
        if [ -e "$candidate" ]; then stamp="$candidate"; break; fi
      done
      printf '%s %s %s\n' "$(stat -c %Y "$stamp")" "$(du -sk "$dir" | cut -f1)" "$dir"
    done
  done | sort -n
}
evict() {  # evict WHY PATH LAST_USE
  echo "evicting $2 (last used $(date -u -d "@$3" +%F); $1)"
  rm -rf -- "$2"
  evicted=$((evicted + 1))
}
total_kib() { if [ "${#caches[@]}" -gt 0 ]; then du -sck "${caches[@]}" | tail -n 1 | cut -f1; else echo 0; fi; }
free_kib() { df -Pk "$1" | awk 'NR == 2 {print $4}'; }
if [ "${#caches[@]}" -gt 0 ]; then
  cutoff=$(( now - days * 86400 ))
  while read -r used _ dir; do
    if [ "$used" -lt "$cutoff" ]; then evict "over $days days ago" "$dir" "$used"; fi
  done < <(entries)
  if [ -n "$max_gb" ]; then
    while read -r used _ dir; do
      [ "$(total_kib)" -gt $(( max_gb * 1048576 )) ] || break
      evict "the caches hold more than $max_gb GiB" "$dir" "$used"
    done < <(entries)
  fi
fi
if [ -n "$free_gb" ]; then
  where="${caches[0]:-$1}"
  while [ ! -e "$where" ]; do where=$(dirname "$where"); done
  if [ "${#caches[@]}" -gt 0 ]; then
    while read -r used _ dir; do
      [ "$(free_kib "$where")" -lt $(( free_gb * 1048576 )) ] || break
      evict "less than $free_gb GiB free" "$dir" "$used"
    done < <(entries)
  fi
  free=$(free_kib "$where")
  if [ "$free" -lt $(( free_gb * 1048576 )) ]; then
    echo "::error::cache-evict.sh: $(( free / 1048576 )) GiB free on $(df -P "$where" | awk 'NR == 2 {print $6}'), the leg needs $free_gb GiB, and no cache entry is left to evict; the biggest directories there: $(du -xsh "$where"/* 2> /dev/null | sort -rh | head -n 3 | tr '\n\t' '; ')" >&2
    exit 1
  fi
fi
echo "cache-evict.sh: $evicted entr$([ "$evicted" -eq 1 ] && echo y || echo ies) evicted; $(( $(total_kib) / 1024 )) MiB left in ${caches[*]:-no cache yet}"
