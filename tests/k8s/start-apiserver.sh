#!/usr/bin/env bash
# Start a throw-away etcd + kube-apiserver bound to 127.0.0.1 only.
#
#   tests/k8s/start-apiserver.sh DIR      # DIR is created; holds all state
#   . DIR/env                             # APISERVER_URL, ADMIN_TOKEN, CA_FILE, KUBECONFIG, ...
#   tests/k8s/stop-apiserver.sh DIR
#
# Env:
#   NODEMEDIC_K8S_CACHE          cache root holding bin/kube-apiserver (default /var/cache/nodemedic-k8s)
#   KUBE_APISERVER               explicit kube-apiserver binary (overrides the cache)
#   NODEMEDIC_K8S_READY_TIMEOUT  seconds to wait for /readyz (default 120)
#   NODEMEDIC_K8S_BUILD          1 = run build-apiserver.sh first if the binary is missing (default 1)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
APISERVER="${KUBE_APISERVER:-$CACHE/bin/kube-apiserver}"
TIMEOUT="${NODEMEDIC_K8S_READY_TIMEOUT:-120}"

log() { printf '[start-apiserver] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; "$HERE/stop-apiserver.sh" "$DIR" >/dev/null 2>&1 || true; exit 1; }

exec </dev/null

if [ ! -x "$APISERVER" ] && [ "${NODEMEDIC_K8S_BUILD:-1}" = 1 ] && [ -z "${KUBE_APISERVER:-}" ]; then
  "$HERE/build-apiserver.sh"
fi
[ -x "$APISERVER" ] || { log "no kube-apiserver at $APISERVER (run tests/k8s/build-apiserver.sh)"; exit 1; }
ETCD="$(command -v etcd || echo /usr/bin/etcd)"
[ -x "$ETCD" ] || { log "etcd not found (run tests/k8s/build-apiserver.sh)"; exit 1; }
for t in openssl curl; do command -v "$t" >/dev/null || { log "$t is required"; exit 1; }; done

if [ -f "$DIR/kube-apiserver.pid" ] || [ -f "$DIR/etcd.pid" ]; then
  log "$DIR already has pid files; stopping the previous instance first"
  "$HERE/stop-apiserver.sh" "$DIR" || true
fi

# --------------------------------------------------------------- free ports
# Ports in LISTEN state (any address), read from /proc so no extra tools are needed.
listening_ports() {
  local _sl local_addr _rem st _rest
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | while read -r _sl local_addr _rem st _rest; do
    [ "$st" = 0A ] && echo $(( 16#${local_addr##*:} ))
  done || true
}
pick_port() {  # pick_port EXCLUDE... -> a port nothing listens on
  local used p i
  used=" $(listening_ports | tr '\n' ' ') $* "
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    case "$used" in *" $p "*) continue ;; esac
    echo "$p"; return 0
  done
  return 1
}

# --------------------------------------------------------------- credentials
mkdir -p "$DIR/pki"
PKI="$DIR/pki"
if [ ! -f "$PKI/ca.crt" ]; then
  log "generating certificates in $PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=nodemedic-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -sha256 \
    -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" -subj "/CN=kube-apiserver" >/dev/null 2>&1
  printf '%s\n' \
    "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1" \
    > "$PKI/apiserver.ext"
  openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -sha256 -days 3650 -extfile "$PKI/apiserver.ext" \
    -out "$PKI/apiserver.crt" >/dev/null 2>&1
  # Service-account token signing key.
  openssl genrsa -out "$PKI/sa.key" 2048 >/dev/null 2>&1
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" >/dev/null 2>&1
  chmod 600 "$PKI"/*.key
fi
if [ ! -f "$DIR/tokens.csv" ]; then
  # token,user,uid,"group1,group2"
  printf '%s,admin,admin-uid,"system:masters"\n' "$(openssl rand -hex 24)" > "$DIR/tokens.csv"
  chmod 600 "$DIR/tokens.csv"
fi
ADMIN_TOKEN="$(cut -d, -f1 "$DIR/tokens.csv" | head -n1)"

# ----------------------------------------------------------------- helpers
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
api() { curl -sS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "$@"; }

# -------------------------------------------------------------------- etcd
start_etcd() {
  local cp pp
  cp=$(pick_port); pp=$(pick_port "$cp")
  rm -rf "$DIR/etcd"
  # etcd reads ETCD_* variables from the environment: start it with a clean slate.
  env $(env | sed -n 's/^\(ETCD_[A-Za-z0-9_]*\)=.*/-u \1/p') \
  setsid "$ETCD" --name nodemedic-test --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$cp" --advertise-client-urls "http://127.0.0.1:$cp" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "nodemedic-test=http://127.0.0.1:$pp" --initial-cluster-state new \
    --snapshot-count 10000 --quota-backend-bytes 1073741824 \
    --logger zap --log-outputs stderr \
    >"$DIR/etcd.log" 2>&1 &
  ETCD_PID=$!
  echo "$ETCD_PID" > "$DIR/etcd.pid"
  ETCD_PORT=$cp
  local i
  for i in $(seq 1 100); do   # ~20 s
    alive "$ETCD_PID" || return 1
    if curl -s --max-time 2 "http://127.0.0.1:$cp/health" 2>/dev/null | grep -q '"health":"true"'; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}
ok=0
for attempt in 1 2 3 4 5; do
  if start_etcd; then ok=1; break; fi
  log "etcd attempt $attempt failed; last log lines:"; tail -n 5 "$DIR/etcd.log" >&2 || true
  kill "$ETCD_PID" 2>/dev/null || true; wait "$ETCD_PID" 2>/dev/null || true
  rm -f "$DIR/etcd.pid"
done
[ "$ok" = 1 ] || die "etcd did not become healthy"
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
log "etcd up at $ETCD_URL (pid $ETCD_PID)"

# ---------------------------------------------------------- kube-apiserver
start_apiserver() {
  local p
  p=$(pick_port "$ETCD_PORT")
  setsid "$APISERVER" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --secure-port="$p" \
    --cert-dir="$PKI" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --token-auth-file="$DIR/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --etcd-servers="$ETCD_URL" \
    --allow-privileged=true \
    --profiling=false \
    --v=1 \
    >"$DIR/kube-apiserver.log" 2>&1 &
  APISERVER_PID=$!
  echo "$APISERVER_PID" > "$DIR/kube-apiserver.pid"
  APISERVER_PORT=$p
  local deadline=$(( $(date +%s) + TIMEOUT )) out=""
  while [ "$(date +%s)" -lt "$deadline" ]; do
    alive "$APISERVER_PID" || return 1
    out="$(api "https://127.0.0.1:$p/readyz" 2>/dev/null || true)"
    [ "$out" = ok ] && return 0
    sleep 0.5
  done
  log "/readyz not ok after ${TIMEOUT}s; verbose:"; api "https://127.0.0.1:$p/readyz?verbose" >&2 || true
  return 2
}
t0=$(date +%s)
ok=0
for attempt in 1 2 3; do
  rc=0; start_apiserver || rc=$?
  [ "$rc" = 0 ] && { ok=1; break; }
  log "kube-apiserver attempt $attempt failed (rc=$rc); last log lines:"
  tail -n 15 "$DIR/kube-apiserver.log" >&2 || true
  kill "$APISERVER_PID" 2>/dev/null || true; wait "$APISERVER_PID" 2>/dev/null || true
  rm -f "$DIR/kube-apiserver.pid"
  # Only a port clash is worth retrying.
  grep -q 'address already in use' "$DIR/kube-apiserver.log" || break
done
[ "$ok" = 1 ] || die "kube-apiserver did not become ready"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

# The apiserver creates default/kube-system/kube-public/kube-node-lease itself,
# shortly after /readyz; wait for "default" so tests can rely on it.
for i in $(seq 1 100); do
  api -o /dev/null -w '%{http_code}' "$APISERVER_URL/api/v1/namespaces/default" 2>/dev/null | grep -q 200 && break
  sleep 0.2
done
log "kube-apiserver ready at $APISERVER_URL (pid $APISERVER_PID) in $(( $(date +%s) - t0 ))s"

# ------------------------------------------------------------ env/kubeconfig
cat > "$DIR/admin.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: nodemedic-test
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: nodemedic-test
  context:
    cluster: nodemedic-test
    user: admin
    namespace: default
current-context: nodemedic-test
KCFG
chmod 600 "$DIR/admin.kubeconfig"

cat > "$DIR/env" <<ENV
APISERVER_URL=$APISERVER_URL
ADMIN_TOKEN=$ADMIN_TOKEN
CA_FILE=$PKI/ca.crt
KUBECONFIG=$DIR/admin.kubeconfig
ETCD_URL=$ETCD_URL
APISERVER_PID=$APISERVER_PID
ETCD_PID=$ETCD_PID
ENV
echo "$DIR/env"
