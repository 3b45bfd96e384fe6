#!/usr/bin/env bash
# selinux-e2e.sh [BINARY] — issue 52 point 4: nodemedic on a Debian 13 node with SELinux
# enforcing (Debian's selinux-policy-default), in each domain it would get there (the .deb's
# service, container_t, spc_t), each feature measured with its AVC denials
# (tests/vm/selinux-guest.sh; docs/selinux.md has the results). A recorded run, not part of
# tests/run-all.sh. Needs root and Debian's packages only.
#
#   BINARY  a static nodemedic (default: target/x86_64-unknown-linux-musl/release/nodemedic)
#
# 1. The image: build-image.sh's Debian 13 guest (its own cache, NODEMEDIC_VM_CACHE, default
#    /var/cache/nodemedic-vm-selinux) with selinux-policy-default, selinux-utils,
#    policycoreutils, auditd, containerd, runc and busybox-static.
# 2. SELinux turned on as Debian's selinux-activate would, without its GRUB edit and its
#    relabelling reboot (the guest boots with -kernel and -snapshot: a relabel in the guest
#    would be lost with each run): /etc/selinux/config says enforcing, the kernel command line
#    `security=selinux selinux=1`, and the root filesystem is labelled here, once per image,
#    by the guest's own setfiles from the policy's file_contexts (the image loop-mounted, the
#    guest's setfiles run in a chroot). `semodule -DB` turns the policy's dontaudit rules off,
#    so that every denial is logged: what is allowed does not change.
# 3. The binary policy's rules for the domains, with sesearch (setools) on this host.
# 4. The guest test, booted under the cluster lock (/tmp/nodemedic-cluster.lock): its PASS and
#    FAIL lines and the table; exit code = the guest's.
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(readlink -f "$HERE/../..")
BIN=$(readlink -f "${1:-$REPO/target/x86_64-unknown-linux-musl/release/nodemedic}")
[ -x "$BIN" ] || {
    echo "selinux-e2e.sh: no nodemedic binary at $BIN" >&2
    exit 2
}
export NODEMEDIC_VM_CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm-selinux}
export NODEMEDIC_VM_SUITE=trixie
export NODEMEDIC_VM_PACKAGES="selinux-policy-default selinux-utils policycoreutils auditd containerd runc busybox-static"
export NODEMEDIC_VM_APPEND="security=selinux selinux=1 ${NODEMEDIC_VM_APPEND:-}"
export NODEMEDIC_VM_TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-1800}
CACHE=$NODEMEDIC_VM_CACHE
log() { echo "[selinux-e2e $(date +%T)] $*" >&2; }
t0=$(date +%s)

# --- 1. the image ---------------------------------------------------------------------------
bash "$HERE/build-image.sh"
t_image=$(($(date +%s) - t0))

# --- 2. labelled once per image --------------------------------------------------------------
# The marker holds the image's stamp and this labelling's own hash: a rebuilt image, or a
# change here, labels again.
LABEL_ID="$(cat "$CACHE/stamp") $(sed -n '/^# --- 2\./,/^# --- 3\./p' "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$CACHE/labelled" 2>/dev/null)" != "$LABEL_ID" ]; then
    t1=$(date +%s)
    MNT=$(mktemp -d /var/tmp/nodemedic-selinux-root.XXXXXX)
    exec 8>"$CACHE/.lock"
    flock 8 # build-image.sh's lock: no build replaces the image meanwhile
    rm -f "$CACHE/labelled"
    mount -o loop "$CACHE/rootfs.img" "$MNT"
    unlabel() { umount "$MNT" 2>/dev/null || umount -l "$MNT"; rmdir "$MNT"; }
    trap unlabel EXIT
    printf 'SELINUX=enforcing\nSELINUXTYPE=default\n' >"$MNT/etc/selinux/config"
    log "semodule -DB (dontaudit rules off) in the image"
    chroot "$MNT" semodule -DB
    log "setfiles from the policy's file_contexts"
    chroot "$MNT" setfiles -F -e /proc -e /sys -e /dev -e /mnt/host \
        /etc/selinux/default/contexts/files/file_contexts /
    chroot "$MNT" ls -Z /usr/bin/containerd /usr/sbin/runc /usr/lib/systemd/systemd /usr/sbin/irqbalance >&2
    sync
    cp "$MNT/etc/selinux/default/policy/policy."* "$CACHE/"
    trap - EXIT
    unlabel
    echo "$LABEL_ID" >"$CACHE/labelled"
    log "labelled in $(($(date +%s) - t1))s"
fi

# --- 3. the policy's rules for the domains, from the binary policy -----------------------------
# shellcheck source=deploy/apt.sh
. "$REPO/deploy/apt.sh"
ensure_packages setools >&2
POLICY=$(find "$CACHE" -maxdepth 1 -name 'policy.[0-9]*' | sort -V | tail -n1)
echo "== Debian's binary policy ($(basename "$POLICY")): what each domain may do for nodemedic's features"
for t in container_t spc_t initrc_t; do
    echo "-- $t: attributes $(seinfo -t "$t" -x "$POLICY" 2>/dev/null | sed -n '3,$p' | tr -d ' ' | paste -sd' ' -)"
    for q in "-t sysctl_irq_t -c file" "-t proc_t -c file" "-t sysfs_t -c file" "-t cgroup_t -c file" \
        "-t system_dbusd_runtime_t -c sock_file" "-t system_dbusd_t -c unix_stream_socket" \
        "-t system_dbusd_t -c dbus" "-t init_t -c dbus" "-t irqbalance_unit_t -c service" \
        "-t $t -c bpf" "-t $t -c perf_event" "-t $t -c capability2"; do
        # shellcheck disable=SC2086
        r=$(sesearch -A -s "$t" $q "$POLICY" 2>/dev/null | grep -v '^$' || true)
        printf '   %-45s %s\n' "$q" "$(echo "${r:-(none)}" | head -n 3 | paste -sd'|' -)"
    done
done

# --- 4. the guest test ------------------------------------------------------------------------
SHARE=$(mktemp -d /var/tmp/nodemedic-selinux.XXXXXX)
install -m 0644 "$HERE/selinux-guest.sh" "$SHARE/test.sh"
install -m 0755 "$BIN" "$SHARE/nodemedic"
install -m 0644 "$REPO/deploy/systemd/nodemedic.service" "$REPO/deploy/systemd/native-rebalance.conf" \
    "$HERE/nodemedic.toml" "$SHARE/"
log "binary: $("$BIN" --version 2>&1 | head -n1)"
log "booting under $NODEMEDIC_VM_APPEND (waiting for /tmp/nodemedic-cluster.lock)"
t2=$(date +%s)
rc=0
flock -o /tmp/nodemedic-cluster.lock bash "$HERE/run.sh" "$SHARE" || rc=$?
t_boot=$(($(date +%s) - t2))
echo "-- guest stdout"
cat "$SHARE/stdout" 2>/dev/null || true
echo "-- guest stderr"
cat "$SHARE/stderr" 2>/dev/null || true
start=$(cat "$SHARE/guest-uptime-at-test-start" 2>/dev/null || echo '?')
end=$(cat "$SHARE/guest-uptime-at-test-end" 2>/dev/null || echo '?')
log "image ${t_image}s; qemu ${t_boot}s (test from guest uptime ${start}s to ${end}s); exit $rc; share $SHARE"
exit "$rc"
