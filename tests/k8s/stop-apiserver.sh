#!/usr/bin/env bash
# Stop the etcd + kube-apiserver started by start-apiserver.sh DIR.
# Only the pids recorded in DIR are signalled, and only if they still run
# the expected binary.  DIR itself is left in place (logs, certs).
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$1"

stop_one() {  # stop_one NAME  (reads DIR/NAME.pid, expects NAME in the command line)
  local name="$1" f="$DIR/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "$name"; then
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "[stop-apiserver] $name (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}
stop_one kube-apiserver
stop_one etcd
exit 0
