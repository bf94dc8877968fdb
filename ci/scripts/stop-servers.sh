#!/usr/bin/env bash
# Stop every vLLM server a leg's release check left running (a cancelled job, a killed check): each
# `vllm-server.pid` under DIR (ci/scripts/vllm-serve.sh writes its pid there; the server replaced the script,
# so it is the server's pid and its process group's id) gets SIGTERM to its whole group, then SIGKILL after
# 30 s, and the pidfile is removed. Only a server is signalled: the pid must still run vllm-serve.sh,
# `python -m harness.core.vllm_neuron` or vLLM's `vllm.entrypoints.openai.api_server` (what that pid is during
# its life, per /proc/PID/cmdline); a pid that is now something else (the server is gone and its pid was
# reused) is left alone, said in one line, and its stale pidfile removed; so is a pid that no longer runs (or
# is a zombie): what may still run in its process group cannot be told apart from the group of a process that
# took the pid after the server, so nothing is signalled. Nothing running is not an error.
# Usage: stop-servers.sh DIR
set -euo pipefail
dir="${1:?usage: stop-servers.sh DIR (the evidence directory of a leg)}"
[ -d "$dir" ] || exit 0

stop() {  # stop TARGET WHAT: SIGTERM (and SIGCONT: a paused server must hear it), then SIGKILL after 30 s
  local target="$1" what="$2"
  echo "stopping $what"
  kill -TERM -- "$target" 2> /dev/null || true
  kill -CONT -- "$target" 2> /dev/null || true
  for _ in $(seq 30); do kill -0 -- "$target" 2> /dev/null || return 0; sleep 1; done
  kill -KILL -- "$target" 2> /dev/null || true
}

while IFS= read -r pidfile; do
  pid=$(cat "$pidfile" 2> /dev/null || true)
  case "$pid" in '' | *[!0-9]*) echo "stop-servers.sh: $pidfile holds no pid ('$pid')" >&2; continue ;; esac
  stat=$(cat "/proc/$pid/stat" 2> /dev/null || true)
  state=$(echo "${stat##*) }" | cut -d ' ' -f 1)
  if [ -z "$stat" ] || [ "$state" = Z ]; then  # gone (a zombie's cmdline is empty: nothing to tell it by)
    echo "stop-servers.sh: $pidfile's pid $pid no longer runs: removed the pidfile"
    rm -f "$pidfile"
    continue
  fi
  cmdline=$(tr '\0\n' '  ' < "/proc/$pid/cmdline" 2> /dev/null || true)
  case "$cmdline" in
    *vllm.entrypoints.openai.api_server* | *harness.core.vllm_neuron* | *vllm-serve.sh*) ;;
    *) echo "stop-servers.sh: $pidfile's pid $pid is now \`${cmdline% }\`, not a vLLM server: left alone" >&2
       rm -f "$pidfile"
       continue ;;
  esac
  pgid=$(echo "${stat##*) }" | cut -d ' ' -f 3)
  if [ "$pgid" = "$pid" ]; then
    stop "-$pid" "the vLLM server of $pidfile (process group $pid)"
  else  # started without a group of its own: the server's process alone
    stop "$pid" "the vLLM server of $pidfile (pid $pid; its process group $pgid is not its own, left alone)"
  fi
  rm -f "$pidfile"
done < <(find "$dir" -name vllm-server.pid)
