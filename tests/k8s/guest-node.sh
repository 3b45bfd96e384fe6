#!/usr/bin/env bash
# A QEMU guest of tests/vm, on Debian 13 (kernel 6.12, systemd 257, cgroup v2 only, D-Bus,
# irqbalance, a 4-queue virtio-net NIC), as the second node of the cluster of
# tests/k8s/cluster-up.sh DIR: containerd 2 with SystemdCgroup = true and runc (the cluster's,
# tests/k8s/build-containerd.sh), the CNI plugins from Debian, the cluster's kubelet (which
# takes the systemd driver from containerd) and kube-proxy, a node client certificate signed
# by the cluster's CA, a tap with addresses in the cluster's namespace.
#
#   tests/k8s/guest-node.sh up DIR [ARCHIVE...]   # boots it, imports the pause and busy
#                                                 # images and ARCHIVEs, waits for Node Ready;
#                                                 # writes DIR/guest/env
#   tests/k8s/guest-node.sh exec DIR SCRIPT       # bash SCRIPT as root in the guest
#   tests/k8s/guest-node.sh down DIR              # qemu and the tap gone: before cluster-down.sh
#   tests/k8s/guest-node.sh image                 # only builds (or finds cached) the guest's
#                                                 # image: tests/prebuild.sh warms it early
#
# A boot that hangs (RCU stalls or soft lockups on the console, seen once in 19 boots under
# TCG) is detected and booted again once; each retry is reported on stderr and counted in
# DIR/guest/env (GUEST_RETRIES).
#
# Env: NODEMEDIC_GUEST_NODE (nodemedic-guest), NODEMEDIC_GUEST_SMP (2), NODEMEDIC_GUEST_MEM
#      (3072 MiB), NODEMEDIC_GUEST_READY_TIMEOUT (240 s from qemu start to Node Ready),
#      NODEMEDIC_GUEST_RUNTIME=debian (Debian 13's own containerd 1.7 and runc instead of
#      containerd 2; with a Kubernetes 1.35 cluster: tests/k8s/README.md, "containerd 1.7"),
#      NODEMEDIC_GUEST_DBUS_MEDIATION=1 (trixie-backports' kernel with sid's AppArmor 5 and
#      dbus, whose dbus-daemon mediates D-Bus by AppArmor label as Ubuntu's does; guest_e2e's
#      G18, tests/k8s/README.md, "D-Bus mediated"),
#      NODEMEDIC_GUEST_SIMULATE_HANG=1 (the first boot "hangs" after node-up.sh: a stall line
#      on the console and an agent that stops answering; exercises the retry).
# The guest image is tests/vm/build-image.sh's for Debian 13 with the node's packages and
# files, cached in /var/cache/nodemedic-vm-node.
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VM="$HERE/../vm"
cmd=${1:?usage: guest-node.sh up|exec|down DIR ... | image}
CACHE=${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}
# containerd: "built" (tests/k8s/build-containerd.sh's containerd 2, the default) or "debian"
# (Debian 13's own package, 1.7: the kubelet must be 1.35, NODEMEDIC_K8S_VERSION).
RUNTIME=${NODEMEDIC_GUEST_RUNTIME:-built}
case "$RUNTIME" in
built) export NODEMEDIC_VM_CACHE=${NODEMEDIC_GUEST_VM_CACHE:-/var/cache/nodemedic-vm-node} ;;
debian) export NODEMEDIC_VM_CACHE=${NODEMEDIC_GUEST_VM_CACHE:-/var/cache/nodemedic-vm-node-debian-containerd} ;;
*) echo "NODEMEDIC_GUEST_RUNTIME: built or debian, not $RUNTIME" >&2; exit 2 ;;
esac
# D-Bus mediated by AppArmor, as on Ubuntu: trixie-backports' kernel with sid's AppArmor 5
# and dbus (docs/dbus-mediation.md), in an image and cache of its own.
DBUS_MEDIATION=${NODEMEDIC_GUEST_DBUS_MEDIATION:-0}
if [ "$DBUS_MEDIATION" = 1 ]; then
    export NODEMEDIC_VM_CACHE=${NODEMEDIC_GUEST_VM_CACHE:-$NODEMEDIC_VM_CACHE-dbus-mediation}
fi

log() { printf '[guest-node %s] %s\n' "$(date +%T)" "$*" >&2; }

# The image: the VM's on Debian 13, plus the node's packages, the cluster's kubelet and
# kube-proxy, and its containerd 2 and runc.
build_image() {
    export NODEMEDIC_VM_SUITE=trixie
    export NODEMEDIC_VM_PACKAGES="containernetworking-plugins iptables conntrack"
    NODEMEDIC_VM_FILES="$CACHE/bin/kubelet=/usr/local/bin/kubelet $CACHE/bin/kube-proxy=/usr/local/bin/kube-proxy"
    NODEMEDIC_VM_FILES+=" $HERE/guest/10-nmk8s.conflist=/etc/cni/net.d/10-nmk8s.conflist"
    if [ "$RUNTIME" = debian ]; then
        # Debian 13's own containerd (1.7) and runc, with the package's unit.
        NODEMEDIC_VM_PACKAGES+=" containerd runc"
        NODEMEDIC_VM_FILES+=" $HERE/guest/containerd-1.7.toml=/etc/containerd/config.toml"
    else
        CTD=$("$HERE/build-containerd.sh")
        for b in containerd ctr containerd-shim-runc-v2 runc; do NODEMEDIC_VM_FILES+=" $CTD/$b=/usr/local/bin/$b"; done
        NODEMEDIC_VM_FILES+=" $HERE/guest/containerd.service=/etc/systemd/system/containerd.service"
        NODEMEDIC_VM_FILES+=" $HERE/guest/containerd.toml=/etc/containerd/config.toml"
    fi
    export NODEMEDIC_VM_FILES
    export NODEMEDIC_VM_ENABLE=containerd.service
    export NODEMEDIC_VM_IMG_SIZE=3G
    if [ "$DBUS_MEDIATION" = 1 ]; then
        # As tests/vm/dbus-mediation.sh: two kernels and sid's packages need the room.
        export NODEMEDIC_VM_IMG_SIZE=4G
        export NODEMEDIC_VM_APT_SOURCES='deb @MIRROR@ trixie-backports main; deb [check-valid-until=no] @MIRROR@ sid main'
        export NODEMEDIC_VM_APT_INSTALL='linux-image-amd64/trixie-backports apparmor/sid libapparmor1/sid dbus/sid dbus-bin/sid dbus-daemon/sid dbus-system-bus-common/sid dbus-session-bus-common/sid libdbus-1-3/sid'
    fi
    t=$(date +%s)
    bash "$VM/build-image.sh"
    log "guest image ready in $(($(date +%s) - t))s ($NODEMEDIC_VM_CACHE)"
}

if [ "$cmd" = image ]; then
    build_image
    exit 0
fi
DIR=$(cd "${2:?usage: guest-node.sh $cmd DIR ...}" && pwd)
shift 2
G="$DIR/guest"
NODE=${NODEMEDIC_GUEST_NODE:-nodemedic-guest}
HOST_ADDR=10.213.1.1/24
GUEST_IP=10.213.1.2
GUEST_POD_CIDR=10.244.1.0/24

case "$cmd" in
down)
    [ -d "$G" ] || exit 0
    bash "$VM/run.sh" --stop "$G"
    rm -f "$G/env"
    exit 0
    ;;
exec)
    exec bash "$VM/run.sh" --exec "$G" --timeout "${NODEMEDIC_GUEST_EXEC_TIMEOUT:-600}" "${1:?SCRIPT}"
    ;;
up) ;;
*)
    echo "usage: guest-node.sh up|exec|down DIR ..." >&2
    exit 2
    ;;
esac

[ -f "$DIR/env" ] || {
    log "no $DIR/env: tests/k8s/cluster-up.sh $DIR first"
    exit 1
}
# shellcheck disable=SC1091
set -a && . "$DIR/env" && set +a
k() { nsenter --net="/run/netns/$NETNS" "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

build_image

bash "$VM/run.sh" --stop "$G" 2>/dev/null || true
rm -rf "$G"
mkdir -p "$G"/{pki,etc,images}
echo "$NODE" >"$G/node-name"
echo "$GUEST_IP" >"$G/node-ip"

# Certificates signed by the cluster's CA: the kubelet's client (system:node:NAME in
# system:nodes, which the Node authorizer and NodeRestriction know) and serving (the
# apiserver checks its address for logs and exec) certificates; kube-proxy's is the cluster's.
PKI="$(dirname "$CA_FILE")"
sign() { # NAME SUBJECT EXTENSIONS
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$G/pki/$1.key" -out "$G/pki/$1.csr" \
        -subj "$2" >/dev/null 2>&1
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "$3" >"$G/pki/$1.ext"
    openssl x509 -req -in "$G/pki/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -sha256 -days 365 -extfile "$G/pki/$1.ext" -out "$G/pki/$1.crt" >/dev/null 2>&1
}
sign kubelet "/O=system:nodes/CN=system:node:$NODE" "extendedKeyUsage=clientAuth"
sign kubelet-serving "/O=system:nodes/CN=system:node:$NODE" "extendedKeyUsage=serverAuth
subjectAltName=IP:$GUEST_IP,DNS:$NODE"
cp "$PKI/ca.crt" "$PKI/kube-proxy.crt" "$PKI/kube-proxy.key" "$G/pki/"
P=/mnt/host/pki
for who in kubelet kube-proxy; do
    cat >"$G/etc/$who.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: nodemedic-test
  cluster:
    server: $APISERVER_URL
    certificate-authority: $P/ca.crt
users:
- name: $who
  user:
    client-certificate: $P/$who.crt
    client-key: $P/$who.key
contexts:
- name: nodemedic-test
  context: {cluster: nodemedic-test, user: $who}
current-context: nodemedic-test
KCFG
done
cat >"$G/etc/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No cgroupDriver with containerd 2: systemd is PID 1 and cgroups are v2 only, and the kubelet
# takes the systemd driver from containerd's SystemdCgroup = true (RuntimeConfig, KEP-4033);
# containerd 1.7 does not answer that call, so it is named.
$([ "$RUNTIME" = debian ] && echo "cgroupDriver: systemd")
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $GUEST_IP
port: 10250
readOnlyPort: 0
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
cat >"$G/etc/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: /mnt/host/etc/kube-proxy.kubeconfig
hostnameOverride: $NODE
clusterCIDR: 10.244.0.0/16
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
YAML
cp "$HERE/guest/node-up.sh" "$G/"
cp "$("$HERE/build-images.sh" pause)" "$G/images/pause.tar"
cp "$("$HERE/build-images.sh" busy)" "$G/images/busy.tar"
for a in "$@"; do cp "$a" "$G/images/"; done

node_ready() {
    [ "$(k get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
export NODEMEDIC_VM_NETNS=$NETNS NODEMEDIC_VM_HOST_ADDR=$HOST_ADDR \
    NODEMEDIC_VM_GUEST_ADDR=$GUEST_IP/24 NODEMEDIC_VM_ROUTES=$GUEST_POD_CIDR \
    NODEMEDIC_VM_SMP=${NODEMEDIC_GUEST_SMP:-2} NODEMEDIC_VM_MEM=${NODEMEDIC_GUEST_MEM:-3072} \
    NODEMEDIC_VM_QUEUES=4
retries=0
attempt() { # 0: Node Ready; 75: the boot hung (the VM is stopped); else a failure
    local t0 rc deadline
    t0=$(date +%s.%N)
    rc=0
    bash "$VM/run.sh" --node "$G" || rc=$?
    # The guest's kernel dying during the boot (an "Oops: int3" or a panic: the stale-int3
    # race of QEMU's multi-threaded TCG, tests/vm/README.md; once in the cold CI of 0987bc8,
    # in getrandom at 12 s) is retried as a hang is.
    if [ "$rc" -eq 125 ] && grep -Eq 'Kernel panic|Oops: ' "$G/console.log" 2>/dev/null; then
        log "the guest's kernel died during the boot: $(grep -Em1 'Kernel panic|Oops: ' "$G/console.log")"
        return 75
    fi
    [ "$rc" -eq 0 ] || return "$rc"
    rc=0
    bash "$VM/run.sh" --exec "$G" --timeout 180 "bash /mnt/host/node-up.sh" >"$G/node-up.log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        if bash "$VM/run.sh" --stalled "$G"; then
            log "the guest hung during node-up.sh: $(grep -Em1 'stall|soft lockup' "$G/console.log")"
            bash "$VM/run.sh" --stop "$G"
            return 75
        fi
        log "node-up.sh failed ($rc):"
        cat "$G/node-up.log" >&2
        return "$rc"
    fi
    if [ "${NODEMEDIC_GUEST_SIMULATE_HANG:-0}" = 1 ] && [ "$retries" = 0 ]; then
        # The retry path, on demand: a stall line on the console and an agent that no longer
        # answers (qemu itself keeps running, as in the hang seen in the trial).
        bash "$VM/run.sh" --exec "$G" "echo '<3>rcu: INFO: rcu_preempt detected stalls on CPUs/tasks: (simulated by guest-node.sh)' >/dev/kmsg; kill -STOP \$(cat /mnt/host/agent.pid)" >/dev/null 2>&1 || true
    fi
    deadline=$(($(date +%s) + ${NODEMEDIC_GUEST_READY_TIMEOUT:-240}))
    local warned=0
    while :; do
        if [ "$warned" = 0 ] && bash "$VM/run.sh" --stalled "$G"; then
            # A stall warning is printed after 21 s without progress; a guest that still
            # answers within 15 s was only slow (a loaded host), one that does not is hung.
            if bash "$VM/run.sh" --exec "$G" --timeout 15 true >/dev/null 2>&1; then
                log "a stall warning on the console, but the guest answers: going on"
                warned=1
            else
                log "the guest hung: $(grep -Em1 'stall|soft lockup' "$G/console.log")"
                bash "$VM/run.sh" --stop "$G"
                return 75
            fi
        fi
        node_ready && break
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "node $NODE not Ready within ${NODEMEDIC_GUEST_READY_TIMEOUT:-240}s"
            bash "$VM/run.sh" --exec "$G" --timeout 30 "journalctl -u kubelet --no-pager | tail -n 40; journalctl -u containerd --no-pager | tail -n 10" >&2 || true
            return 1
        fi
        sleep 0.5
    done
    READY_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    log "node $NODE Ready ${READY_S}s after qemu start (agent up at $(cat "$G/agent-ready")s of guest uptime)"
    # The images node-up.sh imports in the background (pods with imagePullPolicy Never fail
    # without them).
    until [ -f "$G/images.done" ]; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "images not imported within ${NODEMEDIC_GUEST_READY_TIMEOUT:-240}s:"
            cat "$G/images.log" >&2
            return 1
        fi
        sleep 0.5
    done
    IMAGES_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    log "images imported ${IMAGES_S}s after qemu start: $(tr '\n' ';' <"$G/images.log")"
}
while :; do
    rc=0
    attempt || rc=$?
    [ "$rc" -eq 0 ] && break
    if [ "$rc" -eq 75 ] && [ "$retries" -lt 1 ]; then
        retries=$((retries + 1))
        log "RETRY $retries: the guest's boot hung or its kernel died (its console); booting it again"
        cp "$G/console.log" "$G/console-hung-$retries.log" 2>/dev/null || true
        k delete node "$NODE" --wait=false >/dev/null 2>&1 || true
        continue
    fi
    bash "$VM/run.sh" --stop "$G" || true
    log "the guest node did not come up (rc $rc)"
    exit 1
done
cat >"$G/env" <<ENV
GUEST_NODE=$NODE
GUEST_IP=$GUEST_IP
GUEST_DIR=$G
GUEST_POD_CIDR=$GUEST_POD_CIDR
GUEST_READY_SECONDS=$READY_S
GUEST_IMAGES_SECONDS=$IMAGES_S
GUEST_RETRIES=$retries
ENV
echo "$G/env"
