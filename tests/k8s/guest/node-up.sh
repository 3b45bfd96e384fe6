#!/usr/bin/env bash
# Guest side of tests/k8s/guest-node.sh up, run as root in the VM from the share (/mnt/host):
# the kernel settings a node needs, the images into containerd (started at boot, SystemdCgroup),
# then kubelet and kube-proxy as transient systemd services (in system.slice, as on a node
# whose kubelet is a unit), with the configuration and certificates guest-node.sh wrote here.
set -euo pipefail
H=/mnt/host
t0=$(date +%s.%N)
rm -f "$H/images.done" "$H/images.log"
say() { echo "[node-up +$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s] $*"; }
modprobe br_netfilter
modprobe overlay
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
# The kubelet passes the node's resolv.conf to pods; the minbase image has none.
[ -e /etc/resolv.conf ] || : >/etc/resolv.conf
for _ in $(seq 1 300); do
    ctr version >/dev/null 2>&1 && break
    sleep 0.1
done
ctr -n k8s.io images import --all-platforms "$H/images/pause.tar" >/dev/null
say "containerd up, pause imported"
mkdir -p /var/lib/kubelet /etc/kubernetes
systemd-run --unit=kubelet --description="kubelet (tests/k8s/guest-node.sh)" \
    -p Restart=on-failure -p After=containerd.service \
    /usr/local/bin/kubelet --config="$H/etc/kubelet.yaml" --kubeconfig="$H/etc/kubelet.kubeconfig" \
    --hostname-override="$(cat "$H/node-name")" --node-ip="$(cat "$H/node-ip")" --v=1
systemd-run --unit=kube-proxy --description="kube-proxy (tests/k8s/guest-node.sh)" \
    -p Restart=on-failure \
    /usr/local/bin/kube-proxy --config="$H/etc/kube-proxy.yaml" --v=1
say "kubelet and kube-proxy started"
# The other images while the node registers: guest-node.sh waits for DIR/images.done too.
(
    for a in "$H"/images/*.tar; do
        [ "$(basename "$a")" = pause.tar ] && continue
        ctr -n k8s.io images import --all-platforms "$a" >/dev/null || exit 1
        say "imported $(basename "$a")"
    done
    touch "$H/images.done"
) >>"$H/images.log" 2>&1 </dev/null &
