#!/usr/bin/env bash
# Stops the cluster of tests/k8s/cluster-up.sh DIR and leaves nothing behind: no process, no
# mount, no pod cgroup, no network namespace or veth, no shim socket, no CNI cache entry, and
# the kernel settings the kubelet changed put back. Safe after a half-failed bring-up, and
# twice. Logs and certificates in DIR stay for reading.
#
#   tests/k8s/cluster-down.sh DIR
set -uo pipefail
exec </dev/null
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$(cd "$1" 2>/dev/null && pwd)" || exit 0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/k8s/lib.sh
. "$HERE/lib.sh"
# The namespace is this cluster's only if cluster-up.sh recorded it in DIR.
NETNS="$(cat "$DIR/netns" 2>/dev/null || true)"
SOCK="$DIR/containerd/containerd.sock"

log() { printf '[cluster-down] %s\n' "$*" >&2; }

# stop NAME: SIGTERM to the recorded daemon and its session, SIGKILL after 10 s. Only a pid
# whose command line still names DIR is ours.
stop() {
  local f="$DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' '\n' < "/proc/$pid/cmdline" | grep -qF "$DIR/"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$f"
}

# The kubelet first, so that it restarts nothing.
stop kubelet

# Then every container, through containerd while it runs: a task deleted by containerd takes
# its shim with it (and the shim its socket in /run/containerd/s and the rootfs mount).
sandboxes=""
if [ -S "$SOCK" ] && timeout 5 ctr --address "$SOCK" version >/dev/null 2>&1; then
  sandboxes=$(timeout 10 ctr --address "$SOCK" -n k8s.io containers ls -q 2>/dev/null)
  for t in $(timeout 10 ctr --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    timeout 20 ctr --address "$SOCK" -n k8s.io tasks rm -f "$t" >/dev/null 2>&1
  done
fi
# Shims that outlived that (containerd dead, or a task that would not go): killed with their
# children, and their sockets removed (containerd 1.6 names them by
# sha256(address/namespace/id) in /run/containerd/s, whatever its state dir).
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK( |\$)" 2>/dev/null); do
  args=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null) || continue
  ns=$(sed -n 's/.*-namespace \([^ ]*\).*/\1/p' <<<"$args")
  id=$(sed -n 's/.* -id \([^ ]*\).*/\1/p' <<<"$args")
  pkill -KILL -P "$p" 2>/dev/null
  kill -KILL "$p" 2>/dev/null
  sandboxes+=$'\n'"$id"
  [ -n "$ns" ] && [ -n "$id" ] \
    && rm -f "/run/containerd/s/$(printf '%s' "$SOCK/$ns/$id" | sha256sum | cut -d' ' -f1)"
done
for d in containerd kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do
  stop "$d"
done

# What is the host's, not DIR's: cleaned only when no other cluster runs on this machine.
alone=1
other=$(nmk8s_other_cluster "$DIR") && alone=0

# Processes left in the pods' cgroups (those of hostPID pods, children that left their
# container's pid namespace), then the cgroups themselves (kubepods under every v1 hierarchy
# and under the unified one), deepest first.
if [ "$alone" = 1 ]; then
  for _ in 1 2 3 4 5; do
    pids=$(cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs \
               /sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs \
               /sys/fs/cgroup/kubepods/cgroup.procs 2>/dev/null | sort -u)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086  # one pid a word
    kill -KILL $pids 2>/dev/null
    sleep 0.2
  done
fi

# Mounts under DIR (container rootfs, kubelet volumes, shm), deepest first.
findmnt -rn -o TARGET | grep -F "$DIR/" | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done

if [ "$alone" = 1 ]; then
  # The pods' network namespaces (containerd's CRI makes them as /run/netns/cni-*) that no
  # process holds any more.
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    if [ -z "$(ip netns pids "$(basename "$ns")" 2>/dev/null)" ]; then
      umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null
      rm -f "$ns"
    fi
  done
  for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$root" ] || continue
    find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$root" ] && log "WARNING: $root could not be removed (processes left in it?)"
  done
  # libcni's cache (/var/lib/cni/results, not configurable in containerd 1.6): this network's
  # entries and the loopback entries of the same sandboxes.
  for f in /var/lib/cni/results/nmk8s-*; do
    [ -e "$f" ] || continue
    id=${f#/var/lib/cni/results/nmk8s-}; id=${id%-*}
    sandboxes+=$'\n'"$id"
    rm -f "$f"
  done
  for id in $sandboxes; do rm -f /var/lib/cni/results/cni-loopback-"$id"-*; done
  # The kernel settings the kubelet changed, as they were before the first cluster.
  if [ -f "$NMK8S_RUN/host-sysctls" ]; then
    while IFS= read -r kv; do sysctl -qw "$kv" >/dev/null 2>&1 || log "WARNING: sysctl $kv failed"; done \
      < "$NMK8S_RUN/host-sysctls"
    rm -f "$NMK8S_RUN/host-sysctls"
  fi
  # The kubelet's socket for device plugins (in /var/lib/kubelet whatever --root-dir says).
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
else
  log "the cluster of $other still runs: the host's pod cgroups, pod namespaces and kernel settings stay"
fi
# The kubelet's links to this cluster's container logs.
find /var/log/containers -maxdepth 1 -type l -lname "$DIR/*" -delete 2>/dev/null
# Host directories that did not exist before cluster-up.sh, if they are empty now.
if [ -f "$DIR/host-dirs" ]; then
  while read -r d; do
    case "$d" in
      /var/lib/kubelet) rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null ;;
      /var/log/containers) rmdir /var/log/containers 2>/dev/null ;;
    esac
  done < "$DIR/host-dirs"
  rm -f "$DIR/host-dirs"
fi

# The cluster's network namespace: its bridge, the pods' host-side veths, kube-proxy's rules.
if [ -n "$NETNS" ]; then
  if [ -e "/run/netns/$NETNS" ]; then
    left=$(ip netns pids "$NETNS" 2>/dev/null | tr '\n' ' ')
    [ -z "$left" ] || log "WARNING: processes still in $NETNS: $left"
    ip netns del "$NETNS" 2>/dev/null || log "WARNING: ip netns del $NETNS failed"
  fi
  [ "$(cat "$NMK8S_RUN/$NETNS.dir" 2>/dev/null)" = "$DIR" ] && rm -f "$NMK8S_RUN/$NETNS.dir"
  rm -f "$DIR/netns"
fi
rm -f "$DIR/env"
exit 0
