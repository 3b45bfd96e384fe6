#!/usr/bin/env bash
# run.sh DIR — boots the cached Debian 12 guest (QEMU, TCG) with DIR shared over 9p at
# /mnt/host; the guest runs DIR/test.sh as root at boot, writes DIR/stdout, DIR/stderr,
# DIR/exit-code (plus DIR/journal.log, guest uptimes), and powers off.
# Exit code: the guest test's exit code; 124 on timeout; 125 if the guest never reported.
#
# The VM has a multi-queue virtio-net NIC backed by a multi_queue tap that lives in a
# network namespace created (and deleted) here: no addresses, no routes, no traffic.
#
# Env:
#   NODEMEDIC_VM_CACHE    image cache (default /var/cache/nodemedic-vm), built on demand
#   NODEMEDIC_VM_TIMEOUT  seconds before qemu is killed (default 600)
#   NODEMEDIC_VM_SMP      vCPUs (default 4)      NODEMEDIC_VM_MEM  MiB (default 1024)
#   NODEMEDIC_VM_QUEUES   NIC queue pairs (default 4)
#   NODEMEDIC_VM_APPEND   extra kernel command line
#   NODEMEDIC_VM_CONSOLE=1  stream the guest console to stderr while it runs
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 DIR   (DIR must contain test.sh)" >&2
    exit 2
fi
DIR=$(readlink -f "$1")
[ -f "$DIR/test.sh" ] || {
    echo "$DIR/test.sh not found" >&2
    exit 2
}
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm}
TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-600}
SMP=${NODEMEDIC_VM_SMP:-4}
MEM=${NODEMEDIC_VM_MEM:-1024}
QUEUES=${NODEMEDIC_VM_QUEUES:-4}
VECTORS=$((2 * QUEUES + 2))

log() { echo "[vm-run] $*" >&2; }

# Build or validate the cached image (fast no-op when up to date).
NODEMEDIC_VM_CACHE=$CACHE bash "$HERE/build-image.sh"

rm -f "$DIR"/{stdout,stderr,exit-code,exit-code.tmp,console.log,journal.log} \
    "$DIR"/guest-uptime-at-test-{start,end}
touch "$DIR/console.log"

NS=nm-vm-$$
qemu_pid=
tail_pid=
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    [ -z "$tail_pid" ] || kill "$tail_pid" 2>/dev/null || true
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        sleep 1
        kill -9 "$qemu_pid" 2>/dev/null || true
    fi
    ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
# Only a down loopback and an address-less tap exist in this namespace; qemu attaches QUEUES
# fds to the tap. It stays down: nothing is sent or routed anywhere.
ip netns exec "$NS" ip tuntap add dev tap0 mode tap multi_queue

APPEND="console=ttyS0 root=/dev/vda rw panic=1 loglevel=4 systemd.show_status=auto"
APPEND+=" ${NODEMEDIC_VM_APPEND:-}"

if [ "${NODEMEDIC_VM_CONSOLE:-0}" = 1 ]; then
    tail -n +1 -F "$DIR/console.log" >&2 2>/dev/null &
    tail_pid=$!
fi

log "booting (TCG, smp $SMP, ${MEM} MiB, $QUEUES queue pairs, timeout ${TIMEOUT}s), share $DIR"
t0=$(date +%s.%N)
# -snapshot: the cached image is never written. -no-reboot: a guest panic/reboot ends qemu.
ip netns exec "$NS" timeout --kill-after=10 "$TIMEOUT" \
    qemu-system-x86_64 -accel tcg -smp "$SMP" -m "$MEM" \
    -nodefaults -display none -monitor none -serial "file:$DIR/console.log" \
    -no-reboot -snapshot \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" -append "$APPEND" \
    -drive "file=$CACHE/rootfs.img,if=virtio,format=raw" \
    -virtfs "local,path=$DIR,mount_tag=host,security_model=none,id=host" \
    -netdev "tap,id=n0,ifname=tap0,script=no,downscript=no,queues=$QUEUES" \
    -device "virtio-net-pci,netdev=n0,mq=on,vectors=$VECTORS" \
    </dev/null >"$DIR/qemu.log" 2>&1 &
qemu_pid=$!
set +e
wait "$qemu_pid"
qrc=$?
set -e
qemu_pid=
t1=$(date +%s.%N)
total=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')

dump_console() {
    echo "----- guest console ($DIR/console.log, last 150 lines) -----" >&2
    tail -n 150 "$DIR/console.log" >&2 || true
    if [ -s "$DIR/stderr" ]; then
        echo "----- guest test stderr ($DIR/stderr, last 50 lines) -----" >&2
        tail -n 50 "$DIR/stderr" >&2
    fi
    if [ -s "$DIR/qemu.log" ]; then
        echo "----- qemu ($DIR/qemu.log) -----" >&2
        cat "$DIR/qemu.log" >&2
    fi
    echo "-----" >&2
}

if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    log "TIMEOUT after ${TIMEOUT}s (qemu exit $qrc)"
    dump_console
    exit 124
fi
if [ ! -f "$DIR/exit-code" ]; then
    log "guest never reported an exit code (qemu exit $qrc, ${total}s)"
    dump_console
    exit 125
fi
rc=$(cat "$DIR/exit-code")
boot=$(cat "$DIR/guest-uptime-at-test-start" 2>/dev/null || echo '?')
tend=$(cat "$DIR/guest-uptime-at-test-end" 2>/dev/null || echo '?')
log "guest test exit $rc; guest uptime at test start ${boot}s, at test end ${tend}s; qemu wall ${total}s"
[ "$rc" -eq 0 ] || dump_console
exit "$rc"
