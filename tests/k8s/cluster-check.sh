#!/usr/bin/env bash
# Checks that the cluster of tests/k8s/cluster-up.sh DIR does what the tests need, with
# images built here (nothing pulled), and prints how long each step took:
#   1. a pod of the pause image reaches Running
#   2. a pod of the hello image (a static Go binary, no shell) reaches Running, and
#      kubectl logs shows its line                       (apiserver -> kubelet, client certs)
#   3. kubectl exec runs a command in it                 (kubelet streaming, webhook authz)
#   4. from that pod and from a hostNetwork pod, the API server answers through the Service
#      address (KUBERNETES_SERVICE_HOST = 10.96.0.1, kube-proxy's DNAT) with the pod's
#      ServiceAccount token, verified against the CA of kube-root-ca.crt
#   5. the pods are deleted and their namespace goes
#
#   tests/k8s/cluster-check.sh DIR        # exit 0 when all pass
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$(cd "$1" && pwd)"
# shellcheck source=tests/k8s/lib.sh
. "$HERE/lib.sh"
nmk8s_env "$DIR"
NS=nmk8s-check
HELLO=localhost/nodemedic-test-hello:1
k() { nmk8s_kubectl "$DIR" "$@"; }
ms() { date +%s%3N; }
t0=$(ms)
since() { echo "$(( $(ms) - $1 ))ms"; }
log() { printf '[cluster-check] %s\n' "$*" >&2; }
fail() {
  log "FAIL: $*"
  k get pods -n "$NS" -o wide >&2 || true
  k describe pods -n "$NS" 2>/dev/null | tail -n 40 >&2 || true
  exit 1
}

nmk8s_import "$DIR" "$("$HERE/build-images.sh" hello)" || fail "import of $HELLO"
log "hello image imported in $(since "$t0")"

k delete namespace "$NS" --ignore-not-found --wait=true --timeout=60s >/dev/null
k create namespace "$NS" >/dev/null
# The namespace's default ServiceAccount comes from the controller-manager.
for _ in $(seq 1 120); do k get serviceaccount default -n "$NS" >/dev/null 2>&1 && break; sleep 0.5; done

pod() {  # pod NAME IMAGE HOSTNETWORK
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  hostNetwork: $3
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: $2
    imagePullPolicy: Never
    resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
YAML
}
t1=$(ms)
{ pod pause "$PAUSE_IMAGE" false; echo ---; pod hello "$HELLO" false; echo ---; pod hello-host "$HELLO" true; } \
  > "$DIR/check-pods.yaml"
k create -f "$DIR/check-pods.yaml" >/dev/null
# kubectl wait watches the pods: no fixed sleep.
k wait -n "$NS" --for=condition=Ready pod/pause --timeout=120s >/dev/null || fail "pod pause not Ready"
log "1. pod pause Running in $(since "$t1")"
k wait -n "$NS" --for=condition=Ready pod/hello pod/hello-host --timeout=120s >/dev/null \
  || fail "pods hello, hello-host not Ready"
log "2. pods hello, hello-host Running in $(since "$t1")"

out=$(k logs -n "$NS" hello) || fail "kubectl logs"
grep -q '^hello: hello started$' <<<"$out" || fail "kubectl logs hello said: $out"
log "2. kubectl logs: $out"

out=$(k exec -n "$NS" hello -- /app echo exec works) || fail "kubectl exec"
[ "$out" = "exec works" ] || fail "kubectl exec said: $out"
log "3. kubectl exec: $out"

for p in hello hello-host; do
  out=$(k exec -n "$NS" "$p" -- /app api 2>&1) || fail "$p: in-cluster API call: $out"
  [ "$out" = "system:serviceaccount:$NS:default via $KUBERNETES_SVC:443" ] || fail "$p: API said: $out"
  log "4. $p -> API server: $out"
done

t2=$(ms)
k delete namespace "$NS" --wait=true --timeout=120s >/dev/null || fail "namespace $NS not deleted"
log "5. pods and namespace deleted in $(since "$t2")"
log "all passed in $(since "$t0")"
