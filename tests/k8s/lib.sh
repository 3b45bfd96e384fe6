#!/usr/bin/env bash
# Helpers for tests on the cluster of tests/k8s/cluster-up.sh DIR:
#   lib.sh kubectl DIR ARGS...        kubectl as the admin, inside the cluster's network
#   lib.sh import DIR ARCHIVE         an OCI image archive into the cluster's containerd
#   lib.sh restart-apiserver DIR      kube-apiserver started again with the arguments
#                                     cluster-up.sh gave it (after the tests stopped it)
set -euo pipefail
exec </dev/null
cmd=${1:?usage: lib.sh kubectl|import|restart-apiserver DIR ...}
DIR=$(cd "${2:?DIR}" && pwd)
shift 2
set -a
# shellcheck disable=SC1091
. "$DIR/env"
set +a
in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }
case "$cmd" in
  kubectl)
    in_ns "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@" ;;
  import)
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$1" ;;
  restart-apiserver)
    # shellcheck disable=SC1091
    . "$DIR/kube-apiserver.args"
    setsid nsenter --net="/run/netns/$NETNS" "$(dirname "$KUBECTL")/kube-apiserver" \
      "${APISERVER_ARGS[@]}" >>"$DIR/logs/kube-apiserver.log" 2>&1 &
    echo $! > "$DIR/kube-apiserver.pid"
    for _ in $(seq 1 240); do
      in_ns "$KUBECTL" --kubeconfig "$KUBECONFIG" get --raw /readyz >/dev/null 2>&1 && exit 0
      sleep 0.5
    done
    echo "kube-apiserver not ready within 120 s" >&2
    exit 1 ;;
  *)
    echo "lib.sh: unknown command $cmd" >&2; exit 2 ;;
esac
