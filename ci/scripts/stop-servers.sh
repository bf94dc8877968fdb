#!/usr/bin/env bash
# Stop every vLLM server a leg's release check left running (a cancelled job, a killed check): each
# `vllm-server.pid` under DIR (ci/scripts/vllm-serve.sh writes its pid there; the server replaced the script,
# so it is the server's pid and its process group's id) gets SIGTERM to its whole group, then SIGKILL after
# 30 s. Nothing running is not an error. Usage: stop-servers.sh DIR
set -euo pipefail
dir="${1:?usage: stop-servers.sh DIR (the evidence directory of a leg)}"
[ -d "$dir" ] || exit 0
while IFS= read -r pidfile; do
  pid=$(cat "$pidfile")
  case "$pid" in '' | *[!0-9]*) echo "stop-servers.sh: $pidfile holds no pid ('$pid')" >&2; continue ;; esac
  if kill -0 -- "-$pid" 2> /dev/null; then
    echo "stopping the vLLM server of $pidfile (process group $pid)"
    kill -TERM -- "-$pid" 2> /dev/null || true
    kill -CONT -- "-$pid" 2> /dev/null || true  # a paused server must hear it
    for _ in $(seq 30); do kill -0 -- "-$pid" 2> /dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2> /dev/null || true
  fi
done < <(find "$dir" -name vllm-server.pid)
