#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the test suite: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy (iptables) and a kubelet
# with containerd 2 and runc (built from the Go module proxy) and Debian's CNI bridge plugin. Everything listens inside a network
# namespace made here (its own loopback, the node's address, the pods' bridge), so no packet
# leaves it; mounts, cgroups and /proc stay the host's, as on a real node.
#
#   tests/k8s/cluster-up.sh DIR      # DIR holds all state; prints DIR/env when the node is Ready
#   set -a; . DIR/env; set +a        # KUBECONFIG, NETNS, NODE_NAME, NODE_IP, CONTAINERD_SOCK, …
#   tests/k8s/cluster-down.sh DIR    # stops everything and leaves nothing behind
#
# Helpers for the tests: tests/k8s/lib.sh (kubectl, ctr, import an image, run in the netns).
# Binaries: tests/k8s/build-k8s.sh, images: build-images.sh (cached under
# /var/cache/nodemedic-k8s). Its own check: tests/k8s/cluster-check.sh DIR.
#
# Env: NODEMEDIC_K8S_CACHE, NODEMEDIC_K8S_NETNS (nmk8s), NODEMEDIC_K8S_NODE (nodemedic-node),
#      NODEMEDIC_K8S_READY_TIMEOUT (180 s for the node), NODEMEDIC_K8S_WAIT (0 s: how long to
#      wait for another cluster on this machine to go; one runs at a time).
set -euo pipefail
exec </dev/null

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
BIN="$CACHE/bin"
TIMEOUT="${NODEMEDIC_K8S_READY_TIMEOUT:-180}"

NETNS="${NODEMEDIC_K8S_NETNS:-nmk8s}"
NODE_NAME="${NODEMEDIC_K8S_NODE:-nodemedic-node}"
# Addresses inside the namespace only. NODE_IP sits on the namespace's loopback.
NODE_IP=10.213.0.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
KUBERNETES_SVC=10.96.0.1
# The sandbox image: containerd's pinned sandbox image (the kubelet no longer names one)
# name the same image, built here (build-images.sh pause) since nothing can be pulled.
PAUSE_IMAGE=registry.k8s.io/pause:3.10
CONTAINERD_SOCK="$DIR/containerd/containerd.sock"

log() { printf '[cluster-up %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
  log "ERROR: $*"
  for f in "$DIR"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f") (last 15 lines)" >&2
    tail -n 15 "$f" >&2
  done
  "$HERE/cluster-down.sh" "$DIR" >&2 || true
  exit 1
}

[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
# A unix socket's path has at most 107 bytes ("$CONTAINERD_SOCK.ttrpc" is the longest).
[ ${#CONTAINERD_SOCK} -le 100 ] || { log "DIR is too long for containerd's socket path ($CONTAINERD_SOCK); use a shorter one"; exit 1; }
# shellcheck source=tests/k8s/lib.sh
. "$HERE/lib.sh"
# shellcheck source=deploy/bootstrap.sh
. "$HERE/../../deploy/bootstrap.sh"
ensure_go >&2
# sysctl here and in cluster-down.sh, pgrep and pkill there: procps is priority "important",
# not in a minimal Debian (a container image, debootstrap's minbase).
ensure_packages procps >&2
# The Kubernetes binaries, and the Debian packages (CNI plugins, buildah, etcd, iptables,
# conntrack, ...) with no service started by their installation; containerd 2 and runc.
"$HERE/build-k8s.sh"
"$HERE/build-containerd.sh" >/dev/null
# Nothing can be pulled: the pause image and the tests' CPU burner are built here.
PAUSE_TAR=$("$HERE/build-images.sh" pause)
BUSY_TAR=$("$HERE/build-images.sh" busy)

# A previous run of this DIR, or a crashed one.
"$HERE/cluster-down.sh" "$DIR" >/dev/null 2>&1 || true
# One cluster per machine (pod cgroups, pod network namespaces and kernel settings are the
# host's): wait NODEMEDIC_K8S_WAIT seconds (default 0) for another one to go.
wait_until=$(( $(date +%s) + ${NODEMEDIC_K8S_WAIT:-0} ))
while other=$(nmk8s_other_cluster "$DIR"); do
  if [ "$(date +%s)" -ge "$wait_until" ]; then
    log "ERROR: the cluster of $other runs on this machine (one at a time: tests/k8s/cluster-down.sh $other, or NODEMEDIC_K8S_WAIT=SECONDS)"
    exit 1
  fi
  sleep 2
done
# A namespace of this name left by a crashed cluster of another DIR (nothing of it runs).
if [ -e "/run/netns/$NETNS" ]; then
  owner=$(cat "$NMK8S_RUN/$NETNS.dir" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$DIR" ]; then
    log "removing what the crashed cluster of $owner left"
    "$HERE/cluster-down.sh" "$owner" >/dev/null 2>&1 || true
  fi
  if [ -e "/run/netns/$NETNS" ]; then
    [ -z "$(ip netns pids "$NETNS" 2>/dev/null)" ] \
      || { log "ERROR: network namespace $NETNS is in use by processes not of this cluster: $(ip netns pids "$NETNS" | tr '\n' ' ')"; exit 1; }
    ip netns del "$NETNS"
  fi
fi
# Start from empty state (etcd, kubelet, containerd, IPAM): the certificates are new each time.
if findmnt -rn -o TARGET | grep -qF "$DIR/"; then
  log "ERROR: mounts remain under $DIR after cluster-down.sh:"; findmnt -rn -o TARGET | grep -F "$DIR/" >&2; exit 1
fi
rm -rf --one-file-system "${DIR:?}"/{etcd,kubelet,containerd,cni,pod-logs,logs,pki,etc,env,netns,kube-apiserver.args} "${DIR:?}"/*.pid
mkdir -p "$DIR"/{logs,pki,etc,containerd,kubelet,pod-logs,cni/net.d}
start=$(date +%s)

# The kubelet sets host-wide kernel settings at start (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1, ...; protectKernelDefaults only makes it refuse to run instead):
# the values from before the first cluster since boot are kept, and cluster-down.sh puts
# them back when no cluster is left.
mkdir -p "$NMK8S_RUN"
if [ ! -f "$NMK8S_RUN/host-sysctls" ]; then
  for s in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
           kernel.keys.root_maxkeys kernel.keys.root_maxbytes; do
    echo "$s=$(sysctl -n "$s")"
  done > "$NMK8S_RUN/host-sysctls.tmp.$$"
  mv -f "$NMK8S_RUN/host-sysctls.tmp.$$" "$NMK8S_RUN/host-sysctls"
fi
# Host directories the kubelet makes whatever its --root-dir (cluster-down.sh removes them
# when it made them): /var/lib/kubelet/device-plugins and /var/log/containers.
for d in /var/lib/kubelet /var/log/containers; do
  [ -e "$d" ] || echo "$d" >> "$DIR/host-dirs"
done

in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }

# ------------------------------------------------------------------ network
# The namespace holds the cluster's network: its loopback carries the node's address, and the
# CNI bridge the pods'. Daemons enter it with nsenter --net only (`ip netns exec` would also
# remount /sys, hiding /sys/fs/cgroup from the kubelet).
echo "$DIR" > "$NMK8S_RUN/$NETNS.dir"
ip netns add "$NETNS"
echo "$NETNS" > "$DIR/netns"
in_ns ip link set lo up
in_ns ip addr add "$NODE_IP/32" dev lo
# The namespace has no default route, as a real node would: Service addresses need one for
# the kernel to route a hostNetwork pod's packet to the nat table, where kube-proxy's DNAT
# turns it into the apiserver's address.
in_ns ip route add "$SERVICE_CIDR" dev lo
in_ns sysctl -qw net.ipv4.ip_forward=1
# Pods reach Services across the bridge only if bridged packets go through iptables.
in_ns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true

# ---------------------------------------------------------------- certificates
PKI="$DIR/pki"
ca_sign() {  # ca_sign NAME SUBJECT EXTENSIONS
  local name=$1 subj=$2 ext=$3
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$PKI/$name.key" -out "$PKI/$name.csr" \
    -subj "$subj" >/dev/null 2>&1
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "$ext" > "$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -sha256 -days 365 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" >/dev/null 2>&1
}
# A CA that signs every certificate below: a self-signed serving certificate (CA:TRUE) was
# refused by the pod's client, and pods get this CA from kube-root-ca.crt.
openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 365 -keyout "$PKI/ca.key" \
  -out "$PKI/ca.crt" -subj "/CN=nodemedic-test-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" >/dev/null 2>&1
ca_sign apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:$KUBERNETES_SVC,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
# The apiserver's identity toward the kubelet (logs, exec).
ca_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
ca_sign admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
ca_sign controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
ca_sign scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
ca_sign kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
ca_sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=clientAuth"
ca_sign kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
openssl genrsa -out "$PKI/sa.key" 2048 >/dev/null 2>&1
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" >/dev/null 2>&1
chmod 600 "$PKI"/*.key

APISERVER_URL="https://$NODE_IP:6443"
kubeconfig() {  # kubeconfig NAME CERT
  cat > "$DIR/etc/$1.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: nodemedic-test
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: nodemedic-test
  context:
    cluster: nodemedic-test
    user: $1
current-context: nodemedic-test
KCFG
}
for k in admin controller-manager scheduler kube-proxy kubelet; do kubeconfig "$k" "$k"; done

# ------------------------------------------------------------------ daemons
# spawn NAME CMD...: starts a daemon in the namespace, in its own session, logging to logs/.
spawn() {
  local name=$1; shift
  setsid nsenter --net="/run/netns/$NETNS" "$@" >"$DIR/logs/$name.log" 2>&1 &
  echo $! > "$DIR/$name.pid"
}
alive() { kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }
wait_for() {  # wait_for WHAT SECONDS CMD...: polls CMD every 0.5 s
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what not within ${secs}s"
    sleep 0.5
  done
}
KUBECTL=("$BIN/kubectl" --kubeconfig "$DIR/etc/admin.kubeconfig")
k() { in_ns "${KUBECTL[@]}" "$@"; }

spawn etcd env -u ETCD_NAME etcd --name nodemedic-test --data-dir "$DIR/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster nodemedic-test=http://127.0.0.1:2380 --logger zap --log-outputs stderr
wait_for "etcd" 30 in_ns curl -sf http://127.0.0.1:2379/health

# shellcheck disable=SC2054  # the commas are in flag values
APISERVER_ARGS=(
  --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$NODE_IP" \
  --etcd-servers=http://127.0.0.1:2379 \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true --profiling=false --v=1
)
# For lib.sh restart-apiserver (the tests' API outage).
declare -p APISERVER_ARGS > "$DIR/kube-apiserver.args"
spawn kube-apiserver "$BIN/kube-apiserver" "${APISERVER_ARGS[@]}"
wait_for "kube-apiserver /readyz" 120 k get --raw /readyz

# The controller-manager's own identity per controller (ServiceAccount tokens, the root CA
# ConfigMap kube-root-ca.crt in every namespace, garbage collection of uninstalled objects).
spawn kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$DIR/etc/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$DIR/etc/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$DIR/etc/controller-manager.kubeconfig" \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --leader-elect=false --bind-address=127.0.0.1 --v=1
spawn kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$DIR/etc/scheduler.kubeconfig" \
  --authentication-kubeconfig="$DIR/etc/scheduler.kubeconfig" \
  --authorization-kubeconfig="$DIR/etc/scheduler.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1 --v=1

cat > "$DIR/etc/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $DIR/etc/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# nf_conntrack_max is a host-wide sysctl: leave it to the host.
conntrack:
  maxPerCore: 0
YAML
spawn kube-proxy "$BIN/kube-proxy" --config="$DIR/etc/kube-proxy.yaml" --v=1

# ---------------------------------------------------------------- containerd
cat > "$DIR/cni/net.d/10-nmk8s.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "nmk8s",
  "plugins": [
    {"type": "bridge", "bridge": "nmk8s0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$DIR/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
cat > "$DIR/etc/containerd.toml" <<TOML
# containerd of its own: config, state, root and socket under DIR, never the system's.
# (Only the shims' sockets are always in /run/containerd/s: cluster-down.sh removes them.)
# containerd 2's configuration (version 3): the CRI's images and runtime are plugins of their own.
version = 3
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.cri.v1.images".pinned_images]
  # Nothing can be pulled here: the pause image is built and imported below.
  sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  # The capability bounding set lacks CAP_SYS_RESOURCE: without this runc fails on the
  # sandbox's oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # PID 1 is not systemd: the cgroupfs driver. The kubelet takes it from here (the CRI's
        # RuntimeConfig call), not from its own configuration.
        SystemdCgroup = false
        # The runc built beside containerd, not whatever runc is on PATH.
        BinaryName = "$NMK8S_CONTAINERD_BIN/runc"
        # runc's state under DIR too, not in the system's /run/containerd/runc.
        Root = "$DIR/containerd/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$DIR/cni/net.d"
TOML
spawn containerd "$NMK8S_CONTAINERD_BIN/containerd" --config "$DIR/etc/containerd.toml"
wait_for "containerd" 30 ctr --address "$CONTAINERD_SOCK" version
for a in "$PAUSE_TAR" "$BUSY_TAR"; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import --all-platforms "$a" >/dev/null || die "importing $a"
done
ctr --address "$CONTAINERD_SOCK" -n k8s.io images check "name==$PAUSE_IMAGE" | grep -q complete \
  || die "$PAUSE_IMAGE is not in containerd after the import"

# ------------------------------------------------------------------ kubelet
cat > "$DIR/etc/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No cgroupDriver: the kubelet takes it from containerd (RuntimeConfig, KEP-4033), which
# says cgroupfs (SystemdCgroup = false: PID 1 is not systemd here).
# cgroups are hybrid (the cpu controller on v1, PSI in /sys/fs/cgroup/unified); kubelet 1.35+
# refuses v1 unless told.
failCgroupV1: false
# There is no swap; were there any, the kubelet should not refuse to start over it.
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
# kubectl logs and exec: the apiserver's client certificate, and RBAC through the API.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
clusterDomain: cluster.local
podLogsDir: $DIR/pod-logs
# This disk is shared with builds: do not evict test pods over it.
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
spawn kubelet "$BIN/kubelet" \
  --config="$DIR/etc/kubelet.yaml" --kubeconfig="$DIR/etc/kubelet.kubeconfig" \
  --root-dir="$DIR/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1

node_ready() {
  [ "$(k get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "node $NODE_NAME Ready" "$TIMEOUT" node_ready
ready=$(( $(date +%s) - start ))
# What pods need before the tests make any: a ServiceAccount, the CA (kube-root-ca.crt, from
# the controller-manager's --root-ca-file) and kube-proxy's rules for the kubernetes Service.
wait_for "the default ServiceAccount" 60 k get serviceaccount default -n default
wait_for "ConfigMap kube-root-ca.crt" 60 k get configmap kube-root-ca.crt -n default
wait_for "kube-proxy synced" 60 in_ns curl -sf http://127.0.0.1:10256/healthz
for d in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy containerd kubelet; do
  alive "$d" || die "$d exited"
done

cat > "$DIR/env.tmp" <<ENV
KUBECONFIG=$DIR/etc/admin.kubeconfig
KUBECTL=$BIN/kubectl
NETNS=$NETNS
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
APISERVER_URL=$APISERVER_URL
CA_FILE=$PKI/ca.crt
CONTAINERD_SOCK=$CONTAINERD_SOCK
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
KUBERNETES_SVC=$KUBERNETES_SVC
PAUSE_IMAGE=$PAUSE_IMAGE
ETCD_PID=$(cat "$DIR/etcd.pid")
APISERVER_PID=$(cat "$DIR/kube-apiserver.pid")
CONTROLLER_MANAGER_PID=$(cat "$DIR/kube-controller-manager.pid")
SCHEDULER_PID=$(cat "$DIR/kube-scheduler.pid")
KUBE_PROXY_PID=$(cat "$DIR/kube-proxy.pid")
CONTAINERD_PID=$(cat "$DIR/containerd.pid")
KUBELET_PID=$(cat "$DIR/kubelet.pid")
ENV
mv -f "$DIR/env.tmp" "$DIR/env"
log "node $NODE_NAME Ready in ${ready}s, ready for pods in $(( $(date +%s) - start ))s"
echo "$DIR/env"
