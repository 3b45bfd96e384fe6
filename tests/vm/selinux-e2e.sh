#!/usr/bin/env bash
# selinux-e2e.sh [BINARY] — issue 52 point 4: nodemedic on a Debian 13 node with SELinux
# enforcing (Debian's selinux-policy-default), in each domain it would get there (the .deb's
# service, container_t, spc_t), each feature measured with its AVC denials
# (tests/vm/selinux-guest.sh; docs/selinux.md has the results). A recorded run, not part of
# tests/run-all.sh. Needs root and Debian's packages only.
#
#   BINARY  a static nodemedic (default: target/x86_64-unknown-linux-musl/release/nodemedic)
#   NODEMEDIC_SELINUX_PREPARE_ONLY=1   steps 1 to 3 only (no binary needed, no boot)
#   NODEMEDIC_SELINUX_BOOT=enforcing   boot enforcing (the default boots with enforcing=0 and the
#                                      test enforces from its start to its end: step 4)
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
# 3. The policy's rules for the domains, from the container module's CIL in the image's store.
# 4. The guest test, booted under the cluster lock (/tmp/nodemedic-cluster.lock): its PASS and
#    FAIL lines and the table; exit code = the guest's.
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(readlink -f "$HERE/../..")
BIN=$(readlink -m "${1:-$REPO/target/x86_64-unknown-linux-musl/release/nodemedic}")
[ -x "$BIN" ] || [ "${NODEMEDIC_SELINUX_PREPARE_ONLY:-0}" = 1 ] || {
    echo "selinux-e2e.sh: no nodemedic binary at $BIN" >&2
    exit 2
}
export NODEMEDIC_VM_CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm-selinux}
export NODEMEDIC_VM_SUITE=trixie
export NODEMEDIC_VM_PACKAGES="selinux-policy-default selinux-utils policycoreutils auditd containerd runc busybox-static"
# The guest boots with enforcing=0 and the guest test turns enforcing on before its first check
# and off after its last: Debian's policy refuses the harness's 9p share (mount_t may not mount
# an unlabeled_t filesystem; the first boot, enforcing, could not mount it and reported nothing).
# NODEMEDIC_SELINUX_BOOT=enforcing boots enforcing, for a harness that can.
BOOT=${NODEMEDIC_SELINUX_BOOT:-permissive}
APPEND="security=selinux selinux=1"
[ "$BOOT" != permissive ] || APPEND+=" enforcing=0"
export NODEMEDIC_VM_APPEND="$APPEND ${NODEMEDIC_VM_APPEND:-}"
export NODEMEDIC_VM_TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-1800}
CACHE=$NODEMEDIC_VM_CACHE
log() { echo "[selinux-e2e $(date +%T)] $*" >&2; }
t0=$(date +%s)

# --- 1. the image ---------------------------------------------------------------------------
bash "$HERE/build-image.sh"
t_image=$(($(date +%s) - t0))

policy_rules() { # image root -> the rules of Debian's modules for the features, by domain
    local store=$1/var/lib/selinux/default/active/modules/100 d
    local c=container_domain,container_net_domain,container_system_domain
    bzcat "$store/container/cil" |
        python3 "$HERE/selinux-cil-rules.py" "container_t:$c" "spc_t:$c,privileged_container_domain"
    for d in container_t spc_t initrc_t; do
        echo "   $d's attributes (every module): $(bzcat "$store"/*/cil |
            grep -E "^ *\(typeattributeset [a-z_]+ \((.* )?$d( .*)?\)\)" |
            sed -E 's/^ *\(typeattributeset ([a-z_]+) .*/\1/' | sort -u | paste -sd' ' -)"
    done
    echo "-- who may write /proc/irq (sysctl_irq_t files, or every sysctl_type), in every module"
    bzcat "$store"/*/cil | grep -E "^ *\(allow [a-z_]+ (sysctl_irq_t|sysctl_type) \(file \([^)]*write" |
        sed 's/^ */   /' | sort -u
}

# --- 2. labelled once per image --------------------------------------------------------------
# The marker holds the image's stamp and this labelling's own hash: a rebuilt image, or a
# change here, labels again.
LABEL_ID="$(cat "$CACHE/stamp") $( (sed -n '/^policy_rules()/,/^# --- 3\./p' "${BASH_SOURCE[0]}"
    cat "$HERE/selinux-cil-rules.py") | sha256sum | cut -d' ' -f1)"
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
    # Debian's policy modules as the package installed them (CIL, in the module store): the rules
    # of the container module for nodemedic's features, for step 3.
    policy_rules "$MNT" >"$CACHE/policy-rules.txt"
    log "semodule -DB (dontaudit rules off) in the image"
    chroot "$MNT" semodule -DB
    log "setfiles from the policy's file_contexts"
    chroot "$MNT" setfiles -F -e /proc -e /sys -e /dev -e /mnt/host \
        /etc/selinux/default/contexts/files/file_contexts /
    chroot "$MNT" ls -Z /usr/bin/containerd /usr/sbin/runc /usr/lib/systemd/systemd /usr/sbin/irqbalance >&2
    sync
    trap - EXIT
    unlabel
    echo "$LABEL_ID" >"$CACHE/labelled"
    log "labelled in $(($(date +%s) - t1))s"
fi

# --- 3. the policy's rules for the domains, from Debian's modules ---------------------------------
echo "== Debian's selinux-policy-default, module container: the rules for nodemedic's features"
cat "$CACHE/policy-rules.txt"

# --- 4. the guest test ------------------------------------------------------------------------
if [ "${NODEMEDIC_SELINUX_PREPARE_ONLY:-0}" = 1 ]; then
    log "image ready in ${t_image}s (NODEMEDIC_SELINUX_PREPARE_ONLY=1: no boot)"
    exit 0
fi
SHARE=$(mktemp -d /var/tmp/nodemedic-selinux.XXXXXX)
install -m 0644 "$HERE/selinux-guest.sh" "$SHARE/test.sh"
install -m 0644 "$HERE/guest-lib.sh" "$SHARE/"
install -m 0755 "$BIN" "$SHARE/nodemedic"
[ "$BOOT" != permissive ] || touch "$SHARE/enforce-at-test"
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
