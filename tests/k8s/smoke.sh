#!/usr/bin/env bash
# End-to-end proof that the local kube-apiserver does what nodemedic needs:
# Node create, status/label patches, events.k8s.io/v1 Events, and RBAC via a
# ServiceAccount token from the TokenRequest API (allowed verb -> 2xx,
# forbidden verb -> 403).  Exits non-zero on any failure.
#
#   tests/k8s/smoke.sh            # builds (cached) + starts + checks + stops
#   KEEP=1 tests/k8s/smoke.sh     # leave the cluster running; prints DIR
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"$HERE/build-apiserver.sh"

DIR="$(mktemp -d "${TMPDIR:-/tmp}/nodemedic-k8s-smoke.XXXXXX")"
cleanup() {
  local rc=$?
  if [ "${KEEP:-0}" = 1 ]; then echo "cluster left running; env in $DIR/env" >&2; return; fi
  "$HERE/stop-apiserver.sh" "$DIR" || true
  if [ "$rc" -ne 0 ]; then
    echo "---- kube-apiserver.log (tail) ----" >&2; tail -n 30 "$DIR/kube-apiserver.log" >&2 2>/dev/null || true
    echo "---- etcd.log (tail) ----" >&2; tail -n 10 "$DIR/etcd.log" >&2 2>/dev/null || true
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT

t0=$(date +%s.%N)
"$HERE/start-apiserver.sh" "$DIR" >/dev/null
t1=$(date +%s.%N)
# shellcheck disable=SC1091
. "$DIR/env"
echo "start-to-ready: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s  ($APISERVER_URL)"

FAILS=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILS=$((FAILS+1)); }

# req TOKEN METHOD PATH [BODY [CONTENT-TYPE]] -> prints body to $OUT, returns code in $CODE
OUT="$DIR/out.json"
req() {
  local tok="$1" m="$2" p="$3" body="${4:-}" ct="${5:-application/json}"
  local args=(-sS --max-time 20 --cacert "$CA_FILE" -H "Authorization: Bearer $tok"
              -H "Accept: application/json" -X "$m" -o "$OUT" -w '%{http_code}')
  [ -n "$body" ] && args+=(-H "Content-Type: $ct" --data-binary "$body")
  CODE="$(curl "${args[@]}" "$APISERVER_URL$p")"
}
# expect WANT_CODE DESCRIPTION TOKEN METHOD PATH [BODY [CT]]
expect() {
  local want="$1" what="$2"; shift 2
  req "$@"
  if [ "$CODE" = "$want" ]; then pass "$what ($CODE)"
  else fail "$what: want $want got $CODE: $(head -c 400 "$OUT")"; fi
}
jqcheck() {  # jqcheck DESCRIPTION JQ-EXPR  (evaluated on $OUT, must print true)
  if [ "$(jq -r "$2" "$OUT" 2>/dev/null)" = true ]; then pass "$1"; else fail "$1: $(head -c 400 "$OUT")"; fi
}

A="$ADMIN_TOKEN"
NODE=smoke-node-1
NOW="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

expect 200 "GET /version" "$A" GET /version
jqcheck "version is v1.33.x" '.gitVersion | startswith("v1.33.")'
expect 200 "namespace default exists" "$A" GET /api/v1/namespaces/default
expect 200 "namespace kube-system exists" "$A" GET /api/v1/namespaces/kube-system

# ---- Node create + patches
expect 201 "create Node" "$A" POST /api/v1/nodes \
  "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\",\"labels\":{\"kubernetes.io/hostname\":\"$NODE\"}}}"
NODE_UID="$(jq -r .metadata.uid "$OUT")"

expect 200 "PATCH nodes/status (strategic merge) adds a condition" "$A" PATCH "/api/v1/nodes/$NODE/status" \
  "{\"status\":{\"conditions\":[{\"type\":\"NetRxQueueCollapse\",\"status\":\"True\",\"reason\":\"SingleQueue\",\"message\":\"95% of softirq on cpu0\",\"lastHeartbeatTime\":\"$NOW\",\"lastTransitionTime\":\"$NOW\"}]}}" \
  application/strategic-merge-patch+json
expect 200 "GET node" "$A" GET "/api/v1/nodes/$NODE"
jqcheck "condition NetRxQueueCollapse=True stored" \
  '[.status.conditions[] | select(.type=="NetRxQueueCollapse" and .status=="True")] | length == 1'

expect 200 "PATCH nodes/status (JSON merge patch)" "$A" PATCH "/api/v1/nodes/$NODE/status" \
  '{"status":{"capacity":{"cpu":"8"}}}' application/merge-patch+json
jqcheck "capacity patched, condition kept" '.status.capacity.cpu == "8" and (.status.conditions | length) >= 1'

expect 200 "PATCH node labels (JSON merge patch)" "$A" PATCH "/api/v1/nodes/$NODE" \
  '{"metadata":{"labels":{"nodemedic.io/rx-queues":"collapsed"}}}' application/merge-patch+json
jqcheck "label stored" '.metadata.labels["nodemedic.io/rx-queues"] == "collapsed"'

expect 200 "watch nodes (timeoutSeconds=1) streams ADDED" "$A" GET "/api/v1/nodes?watch=1&timeoutSeconds=1"
if grep -q '"type":"ADDED"' "$OUT"; then pass "watch stream has ADDED event"; else fail "watch: $(head -c 300 "$OUT")"; fi

# ---- events.k8s.io/v1 Event about the Node
EVT_TIME="$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)"
# NB: metadata.generateName "NODE." is rejected (422, trailing '.'); like client-go,
# use an explicit name "<object>.<unique hex>".
event() {
  printf '{"apiVersion":"events.k8s.io/v1","kind":"Event",
  "metadata":{"name":"%s.%x%04x","namespace":"default"},' "$NODE" "$(date +%s%N)" "$RANDOM"
  echo "$EVENT_BODY"
}
EVENT_BODY="
  \"eventTime\":\"$EVT_TIME\",\"type\":\"Warning\",\"reason\":\"RxQueueCollapse\",\"action\":\"Detect\",
  \"note\":\"all RX interrupts land on cpu0\",
  \"reportingController\":\"nodemedic.io/nodemedic\",\"reportingInstance\":\"nodemedic-$NODE\",
  \"regarding\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"$NODE\",\"uid\":\"$NODE_UID\"}}"
expect 201 "create events.k8s.io/v1 Event" "$A" POST /apis/events.k8s.io/v1/namespaces/default/events "$(event)"
expect 200 "list core/v1 events for the node" "$A" GET \
  "/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D$NODE"
jqcheck "event visible via core/v1 as reason RxQueueCollapse" '[.items[] | select(.reason=="RxQueueCollapse")] | length == 1'

# ---- ServiceAccount + RBAC + TokenRequest
NS=nodemedic-system SA=nodemedic
expect 201 "create namespace $NS" "$A" POST /api/v1/namespaces \
  "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$NS\"}}"
expect 201 "create ServiceAccount" "$A" POST "/api/v1/namespaces/$NS/serviceaccounts" \
  "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"$SA\"}}"
expect 201 "create ClusterRole" "$A" POST /apis/rbac.authorization.k8s.io/v1/clusterroles \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"nodemedic"},
    "rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","list","watch","patch"]},
             {"apiGroups":[""],"resources":["nodes/status"],"verbs":["get","patch","update"]},
             {"apiGroups":["events.k8s.io"],"resources":["events"],"verbs":["create","patch","update"]}]}'
expect 201 "create ClusterRoleBinding" "$A" POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
  "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"nodemedic\"},
    \"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"nodemedic\"},
    \"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$SA\",\"namespace\":\"$NS\"}]}"
expect 201 "TokenRequest for the ServiceAccount" "$A" POST "/api/v1/namespaces/$NS/serviceaccounts/$SA/token" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}'
T="$(jq -r .status.token "$OUT")"
[ -n "$T" ] && [ "$T" != null ] && pass "got SA token (${#T} chars)" || fail "no token in TokenRequest response"

expect 201 "SA: SelfSubjectReview" "$T" POST /apis/authentication.k8s.io/v1/selfsubjectreviews \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'
jqcheck "SA authenticates as system:serviceaccount:$NS:$SA" \
  ".status.userInfo.username == \"system:serviceaccount:$NS:$SA\""
# RBAC is eventually consistent (informer cache); give the binding a moment.
for i in $(seq 1 50); do req "$T" GET "/api/v1/nodes/$NODE"; [ "$CODE" = 200 ] && break; sleep 0.1; done
expect 200 "SA: get node (allowed)" "$T" GET "/api/v1/nodes/$NODE"
expect 200 "SA: list nodes (allowed)" "$T" GET /api/v1/nodes
expect 200 "SA: patch nodes/status (allowed)" "$T" PATCH "/api/v1/nodes/$NODE/status" \
  "{\"status\":{\"conditions\":[{\"type\":\"NetRxQueueCollapse\",\"status\":\"False\",\"reason\":\"Balanced\",\"message\":\"ok\",\"lastHeartbeatTime\":\"$NOW\",\"lastTransitionTime\":\"$NOW\"}]}}" \
  application/strategic-merge-patch+json
jqcheck "SA's condition update stored" '[.status.conditions[] | select(.type=="NetRxQueueCollapse")][0].status == "False"'
expect 201 "SA: create events.k8s.io Event (allowed)" "$T" POST /apis/events.k8s.io/v1/namespaces/default/events "$(event)"
expect 403 "SA: delete node (forbidden)" "$T" DELETE "/api/v1/nodes/$NODE"
jqcheck "403 is a Forbidden Status" '.kind == "Status" and .reason == "Forbidden"'
expect 403 "SA: create node (forbidden)" "$T" POST /api/v1/nodes \
  '{"apiVersion":"v1","kind":"Node","metadata":{"name":"evil"}}'
expect 403 "SA: list secrets in kube-system (forbidden)" "$T" GET /api/v1/namespaces/kube-system/secrets
expect 401 "bogus token is rejected" "not-a-token" GET /api/v1/nodes

# ---- kubeconfig works for a real client, if kubectl was built
KUBECTL="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}/bin/kubectl"
if [ -x "$KUBECTL" ]; then
  if out="$("$KUBECTL" --kubeconfig "$KUBECONFIG" get node "$NODE" -o jsonpath='{.metadata.name}' 2>&1)" \
     && [ "$out" = "$NODE" ]; then pass "kubectl via admin.kubeconfig"; else fail "kubectl: $out"; fi
fi

if [ "$FAILS" -ne 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all checks passed"
