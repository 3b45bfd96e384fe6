#!/usr/bin/env bash
# Helpers for the cluster of tests/k8s/cluster-up.sh DIR. Run it, or source it for functions.
#
#   lib.sh kubectl DIR ARGS...        kubectl as the admin, inside the cluster's network namespace
#   lib.sh ctr DIR ARGS...            ctr on the cluster's containerd, namespace k8s.io
#   lib.sh import DIR ARCHIVE...      OCI/docker image archives into the cluster's containerd
#                                     (ctr images import --all-platforms; pods use them with
#                                     imagePullPolicy: Never or IfNotPresent)
#   lib.sh run DIR CMD...             any command in the cluster's network namespace (Prometheus,
#                                     curl to $APISERVER_URL or a pod IP); mounts, cgroups and
#                                     /proc stay the host's
#   lib.sh restart-apiserver DIR      kube-apiserver started again with the arguments
#                                     cluster-up.sh gave it (after a test stopped it)
#
#   . tests/k8s/lib.sh                the same as functions: nmk8s_kubectl DIR ..., nmk8s_ctr,
#                                     nmk8s_import, nmk8s_run, nmk8s_restart_apiserver, and
#                                     nmk8s_env DIR (exports DIR/env's KEY=value lines),
#                                     nmk8s_live DIR, nmk8s_other_cluster DIR

# containerd 2 and the runc it is tested with, built from the Go module proxy by
# build-containerd.sh: first on PATH, so that ctr, containerd and the shim it starts are those
# (Debian's containerd 1.6 may be installed too, by an older checkout's run).
NMK8S_CONTAINERD_BIN="${NODEMEDIC_CONTAINERD_CACHE:-/var/cache/nodemedic-containerd}/bin"
case ":$PATH:" in *":$NMK8S_CONTAINERD_BIN:"*) ;; *) export PATH="$NMK8S_CONTAINERD_BIN:$PATH" ;; esac

nmk8s_env() {  # nmk8s_env DIR: exports DIR/env
  [ -f "$1/env" ] || { echo "lib.sh: no $1/env (is the cluster up? tests/k8s/cluster-up.sh $1)" >&2; return 1; }
  set -a
  # shellcheck disable=SC1091
  . "$1/env"
  set +a
}
# The variables of DIR/env in a subshell, so that sourcing this file changes nothing.
nmk8s_run() {  # nmk8s_run DIR CMD...
  local d=$1; shift
  ( nmk8s_env "$d" && exec nsenter --net="/run/netns/$NETNS" "$@" )
}
nmk8s_kubectl() {  # nmk8s_kubectl DIR ARGS...
  local d=$1; shift
  ( nmk8s_env "$d" && exec nsenter --net="/run/netns/$NETNS" "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@" )
}
nmk8s_ctr() {  # nmk8s_ctr DIR ARGS...: containerd is reached through its socket, no netns needed
  local d=$1; shift
  ( nmk8s_env "$d" && exec ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@" )
}
nmk8s_import() {  # nmk8s_import DIR ARCHIVE...
  local d=$1 a; shift
  for a in "$@"; do
    nmk8s_ctr "$d" images import --all-platforms "$a" >/dev/null || return 1
  done
}
nmk8s_restart_apiserver() {  # nmk8s_restart_apiserver DIR
  (
    set -euo pipefail
    d=$1
    nmk8s_env "$d"
    # shellcheck disable=SC1091
    . "$d/kube-apiserver.args"
    setsid nsenter --net="/run/netns/$NETNS" "$(dirname "$KUBECTL")/kube-apiserver" \
      "${APISERVER_ARGS[@]}" </dev/null >>"$d/logs/kube-apiserver.log" 2>&1 &
    pid=$!
    echo "$pid" > "$d/kube-apiserver.pid"
    sed "s/^APISERVER_PID=.*/APISERVER_PID=$pid/" "$d/env" > "$d/env.tmp.$$" && mv -f "$d/env.tmp.$$" "$d/env"
    for _ in $(seq 1 240); do   # 120 s, polling /readyz
      kill -0 "$pid" 2>/dev/null || { echo "kube-apiserver exited: see $d/logs/kube-apiserver.log" >&2; exit 1; }
      nsenter --net="/run/netns/$NETNS" "$KUBECTL" --kubeconfig "$KUBECONFIG" get --raw /readyz \
        >/dev/null 2>&1 && exit 0
      sleep 0.5
    done
    echo "kube-apiserver not ready within 120 s" >&2
    exit 1
  )
}

# One cluster per machine: the kubelet's pod cgroups (/kubepods in every hierarchy), the pods'
# network namespaces (/run/netns/cni-*) and a few kernel settings are the host's. Which DIR
# owns which network namespace is recorded in $NMK8S_RUN/NETNS.dir.
NMK8S_RUN=/run/nodemedic-k8s
nmk8s_live() {  # nmk8s_live DIR: true while a daemon of DIR's cluster runs
  local f pid
  for f in "$1"/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    # The pid must still be ours: every daemon's command line names a path in DIR.
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] \
      && tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$1/" && return 0
  done
  return 1
}
nmk8s_other_cluster() {  # nmk8s_other_cluster DIR: prints the DIR of another live cluster
  local f d
  for f in "$NMK8S_RUN"/*.dir; do
    [ -f "$f" ] || continue
    d=$(cat "$f" 2>/dev/null) || continue
    if [ -z "$d" ] || [ "$d" = "$1" ]; then continue; fi
    if nmk8s_live "$d"; then echo "$d"; return 0; fi
  done
  return 1
}

# Sourced: the functions only.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  return 0
fi

set -euo pipefail
# stdin is passed on: lib.sh kubectl DIR apply -f - <manifest.yaml
cmd=${1:?usage: lib.sh kubectl|ctr|import|run|restart-apiserver DIR ...}
DIR=$(cd "${2:?usage: lib.sh $cmd DIR ...}" && pwd)
shift 2
case "$cmd" in
  kubectl) nmk8s_kubectl "$DIR" "$@" ;;
  ctr) nmk8s_ctr "$DIR" "$@" ;;
  import) nmk8s_import "$DIR" "$@" ;;
  run) nmk8s_run "$DIR" "$@" ;;
  restart-apiserver) nmk8s_restart_apiserver "$DIR" ;;
  *) echo "lib.sh: unknown command $cmd (kubectl|ctr|import|run|restart-apiserver)" >&2; exit 2 ;;
esac
