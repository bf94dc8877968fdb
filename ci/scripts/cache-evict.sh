#!/usr/bin/env bash
# Bound the runner's compile cache: compiled artifacts (each with its sharded weights, which load
# needs) unused for DAYS days (default 14) are removed; their keys hold the NxDI / compiler versions,
# so a new release never reuses an old one. Usage: cache-evict.sh CACHE_DIR [DAYS]
set -euo pipefail
cache="${1:?usage: cache-evict.sh CACHE_DIR [DAYS]}"
[ -d "$cache" ] || exit 0
find "$cache" -mindepth 1 -maxdepth 1 -type d -atime "+${2:-14}" -print -exec rm -rf {} +
du -sh "$cache"
