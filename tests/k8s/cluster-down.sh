#!/usr/bin/env bash
# Stops the cluster of tests/k8s/cluster-up.sh DIR and leaves nothing behind: no process, no
# mount, no pod cgroup, no network namespace. Safe after a half-failed bring-up, and twice.
# Logs and certificates in DIR stay for reading.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$(cd "$1" 2>/dev/null && pwd)" || exit 0
NETNS="$(cat "$DIR/netns" 2>/dev/null || echo "${NODEMEDIC_K8S_NETNS:-nmk8s}")"

# stop NAME: SIGTERM to the recorded daemon and its session, SIGKILL after 10 s.
stop() {
  local f="$DIR/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

# The kubelet first, so that it restarts nothing; then every container of this containerd
# (their shims run in sessions of their own), then the rest.
stop kubelet
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $DIR/containerd/containerd.sock" 2>/dev/null); do
  pkill -KILL -P "$p" 2>/dev/null
  kill -KILL "$p" 2>/dev/null
done
for d in containerd kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do
  stop "$d"
done

# Mounts under DIR (container rootfs, kubelet volumes, shm) and the pods' network namespaces.
findmnt -rn -o TARGET | grep -F "$DIR/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
for ns in /run/netns/cni-*; do
  [ -e "$ns" ] || continue
  if [ -z "$(ip netns pids "$(basename "$ns")" 2>/dev/null)" ]; then
    umount -l "$ns" 2>/dev/null; rm -f "$ns"
  fi
done

# The pod cgroups the kubelet made (kubepods under every v1 hierarchy and the unified one),
# deepest first; only empty ones can go, and all are empty once the containers are gone.
for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$root" ] || continue
  find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
done

ip netns del "$NETNS" 2>/dev/null
exit 0
