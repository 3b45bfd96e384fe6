#!/usr/bin/env bash
# run.sh DIR — boots the cached Debian guest (QEMU, TCG: Debian 12 x86-64 by default, Debian 13
# arm64 with NODEMEDIC_VM_ARCH=arm64) with DIR shared over 9p at /mnt/host; the guest runs
# DIR/test.sh as root at boot, writes DIR/stdout, DIR/stderr, DIR/exit-code (plus
# DIR/journal.log, guest uptimes), and powers off.
# Exit code: the guest test's exit code; 124 on timeout; 125 if the guest never reported.
#
# The VM has a multi-queue virtio-net NIC backed by a multi_queue tap that lives in a
# network namespace created (and deleted) here: no addresses, no routes, no traffic.
#
# Node mode: a guest that stays up, on a network, and takes commands (tests/k8s/guest-node.sh
# makes it a Kubernetes node):
#   run.sh --node DIR        the tap goes into an existing namespace (NODEMEDIC_VM_NETNS) with
#                            an address (NODEMEDIC_VM_HOST_ADDR, e.g. 10.213.1.1/24) and routes
#                            to the guest (NODEMEDIC_VM_ROUTES, e.g. 10.244.1.0/24); the guest
#                            gets NODEMEDIC_VM_GUEST_ADDR (e.g. 10.213.1.2/24) with the host's
#                            address as its default gateway. DIR/test.sh is the command agent
#                            (tests/vm/node-agent.sh). Returns once the agent answers (exit 0),
#                            75 if the boot hung (RCU stall or soft lockup on the console: the
#                            VM is stopped, the caller may boot again), 124 on timeout
#                            (NODEMEDIC_VM_BOOT_TIMEOUT, default 300 s).
#   run.sh --exec DIR [--timeout S] SCRIPT
#                            SCRIPT (bash) run as root in the guest, cwd /mnt/host; prints its
#                            stdout and stderr, exits with its code (124 timeout, 125 no VM)
#   run.sh --stalled DIR     exit 0 if the guest console shows an RCU stall or a soft lockup
#   run.sh --stop DIR        qemu killed and the tap deleted (before the namespace goes: a
#                            qemu left running keeps a deleted namespace alive); idempotent
#
# Env:
#   NODEMEDIC_VM_ARCH     amd64 (default: qemu-system-x86_64, its default pc machine) or arm64
#                         (qemu-system-aarch64 -M virt with a GICv3 and its ITS, Cortex-A57
#                         vCPUs, one socket each; the NIC's MSI-X vectors go through the ITS)
#   NODEMEDIC_VM_CACHE    image cache (default /var/cache/nodemedic-vm, for arm64
#                         /var/cache/nodemedic-vm-arm64), built on demand
#   NODEMEDIC_VM_TIMEOUT  seconds before qemu is killed (default 600, arm64 1800; node mode 3600)
#   NODEMEDIC_VM_SMP      vCPUs (default 4)      NODEMEDIC_VM_MEM  MiB (default 1024)
#   NODEMEDIC_VM_QUEUES   NIC queue pairs (default 4)
#   NODEMEDIC_VM_APPEND   extra kernel command line
#   NODEMEDIC_VM_TCG_THREAD  single or multi: TCG's threads for the x86 guest (default single
#                         before QEMU 8.1, multi from it; see below)
#   NODEMEDIC_VM_CONSOLE=1  stream the guest console to stderr while it runs
#   NODEMEDIC_VM_TAP      the tap's name in node mode (default nmvm0, arm64 nmarm0)
set -euo pipefail

MODE='test'
case "${1:-}" in
--node | --exec | --stalled | --stop)
    MODE=${1#--}
    shift
    ;;
esac
EXEC_TIMEOUT=600
if [ "$MODE" = exec ] && [ "${2:-}" = --timeout ]; then
    EXEC_TIMEOUT=$3
    set -- "$1" "${@:4}"
fi
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 [--node|--stalled|--stop] DIR | --exec DIR [--timeout S] SCRIPT   (DIR must contain test.sh)" >&2
    exit 2
fi
DIR=$(readlink -f "$1")
shift
ARCH=${NODEMEDIC_VM_ARCH:-amd64}
case "$ARCH" in
amd64 | arm64) ;;
*)
    echo "NODEMEDIC_VM_ARCH=$ARCH: amd64 or arm64" >&2
    exit 2
    ;;
esac
log() { echo "[vm-run $(date +%T)] $*" >&2; }

# What a hung boot leaves on the console (seen once in 19 boots under TCG, with the kubelet
# starting: both vCPUs stalled, no progress after).
STALL_RE='rcu: INFO: rcu_[a-z]+ (self-)?detected stall|rcu_[a-z]+ detected stalls on CPUs|BUG: soft lockup'
stalled() { grep -Eq "$STALL_RE" "$DIR/console.log" 2>/dev/null; }

stop_vm() { # qemu (its process group) and the node-mode tap
    local pid
    pid=$(cat "$DIR/qemu.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DIR"; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$DIR/qemu.pid"
    if [ -f "$DIR/tap" ]; then
        local ns tap
        read -r ns tap <"$DIR/tap"
        [ ! -e "/run/netns/$ns" ] || nsenter --net="/run/netns/$ns" ip link del "$tap" 2>/dev/null || true
        rm -f "$DIR/tap"
    fi
}

case "$MODE" in
stalled)
    stalled
    exit
    ;;
stop)
    stop_vm
    exit 0
    ;;
exec)
    [ $# -eq 1 ] || {
        echo "usage: $0 --exec DIR [--timeout S] SCRIPT" >&2
        exit 2
    }
    id=$(date +%s%N).$$
    mkdir -p "$DIR/cmd"
    printf '%s\n' "$1" >"$DIR/cmd/.$id.tmp"
    mv "$DIR/cmd/.$id.tmp" "$DIR/cmd/$id.sh"
    deadline=$(($(date +%s) + EXEC_TIMEOUT))
    pid=$(cat "$DIR/qemu.pid" 2>/dev/null || echo 0)
    until [ -f "$DIR/cmd/$id.rc" ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "--exec: no VM runs for $DIR"
            # Say why, once, where the guest's kernel said it (panic=1 ends QEMU with it).
            if grep -q "Kernel panic" "$DIR/console.log" 2>/dev/null; then
                log "--exec: the guest's kernel panicked: $(grep -Em1 'Oops|BUG:|Kernel panic' "$DIR/console.log")" \
                    "($(grep -m1 -o 'RIP: [^ ]*' "$DIR/console.log"); $DIR/console.log)"
            fi
            exit 125
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "--exec: no answer within ${EXEC_TIMEOUT}s"
            cat "$DIR/cmd/$id.out" 2>/dev/null || true
            exit 124
        fi
        sleep 0.1
    done
    cat "$DIR/cmd/$id.out" 2>/dev/null || true
    rc=$(cat "$DIR/cmd/$id.rc")
    rm -f "$DIR/cmd/$id".*
    exit "$rc"
    ;;
esac

if [ "$MODE" = node ]; then
    # The agent is the guest's test: it brings the NIC up and runs what --exec sends.
    install -m 0644 "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/node-agent.sh" "$DIR/test.sh"
fi
[ -f "$DIR/test.sh" ] || {
    echo "$DIR/test.sh not found" >&2
    exit 2
}
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
if [ "$ARCH" = arm64 ]; then
    CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm-arm64}
    TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-1800}
else
    CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm}
    TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-600}
fi
[ "$MODE" = test ] || TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-3600}
SMP=${NODEMEDIC_VM_SMP:-4}
MEM=${NODEMEDIC_VM_MEM:-1024}
QUEUES=${NODEMEDIC_VM_QUEUES:-4}
VECTORS=$((2 * QUEUES + 2))

# Build or validate the cached image (fast no-op when up to date).
NODEMEDIC_VM_ARCH=$ARCH NODEMEDIC_VM_CACHE=$CACHE bash "$HERE/build-image.sh"

rm -f "$DIR"/{stdout,stderr,exit-code,exit-code.tmp,console.log,journal.log,agent-ready} \
    "$DIR"/guest-uptime-at-test-{start,end}
touch "$DIR/console.log"

if [ "$ARCH" = arm64 ]; then
    # virt with a GICv3 and its ITS (an arm64 server's interrupt controllers: SPIs and PPIs
    # from the GIC, PCI MSI-X through the ITS). One socket per vCPU: QEMU's device tree then
    # gives each CPU its own package, as the x86 guest's private L2s give it its own cache
    # domain (virt's tree describes no caches); with one domain irqbalance would run once and
    # exit. Cortex-A57: no pointer authentication or SVE to emulate, which cost TCG time.
    CONSOLE=ttyAMA0
    tcg_thread=${NODEMEDIC_VM_TCG_THREAD:-multi}
    QEMU=(qemu-system-aarch64 -M "virt,gic-version=3,its=on" -cpu cortex-a57 -accel "tcg,thread=$tcg_thread"
        -smp "$SMP,sockets=$SMP,cores=1,threads=1")
else
    CONSOLE=ttyS0
    # One TCG thread for every vCPU where QEMU predates 8.1 (Debian 12 ships 7.2; build-image.sh
    # installs bookworm-backports' 10.0 there, deploy/apt.sh ensure_qemu_system). Multi-threaded
    # TCG before 8.1 translated a page without holding its lock ("accel/tcg: Always lock pages
    # before translation", 8.1), so a vCPU could keep running a translation of code another
    # vCPU had since rewritten. On x86 the kernel rewrites a static key, a tracepoint or a BPF
    # trampoline's site through an int3 (text_poke_bp); the stale int3 left there killed the
    # Debian 13 guest four times ("Oops: int3", tests/vm/README.md). An arm64 kernel patches
    # one instruction under stop_machine, with no int3 state between, so its guest keeps a
    # thread per vCPU. NODEMEDIC_VM_TCG_THREAD=single|multi overrides.
    tcg_thread=${NODEMEDIC_VM_TCG_THREAD:-}
    if [ -z "$tcg_thread" ]; then
        qemu_version=$(qemu-system-x86_64 --version | sed -nE '1s/.*version ([0-9]+)\.([0-9]+).*/\1 \2/p')
        read -r major minor <<<"${qemu_version:-0 0}"
        if [ "$major" -gt 8 ] || { [ "$major" -eq 8 ] && [ "$minor" -ge 1 ]; }; then
            tcg_thread=multi
        else
            tcg_thread=single
        fi
    fi
    QEMU=(qemu-system-x86_64 -accel "tcg,thread=$tcg_thread" -smp "$SMP")
fi
APPEND="console=$CONSOLE root=/dev/vda rw panic=1 loglevel=4 systemd.show_status=auto ${NODEMEDIC_VM_APPEND:-}"
QEMU+=(-m "$MEM"
    -nodefaults -display none -monitor none -serial "file:$DIR/console.log"
    -no-reboot -snapshot
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" -append "$APPEND"
    -drive "file=$CACHE/rootfs.img,if=virtio,format=raw"
    -virtfs "local,path=$DIR,mount_tag=host,security_model=none,id=host")

if [ "$MODE" = node ]; then
    NS=${NODEMEDIC_VM_NETNS:?node mode needs NODEMEDIC_VM_NETNS (an existing network namespace)}
    HOST_ADDR=${NODEMEDIC_VM_HOST_ADDR:?node mode needs NODEMEDIC_VM_HOST_ADDR, e.g. 10.213.1.1/24}
    GUEST_ADDR=${NODEMEDIC_VM_GUEST_ADDR:?node mode needs NODEMEDIC_VM_GUEST_ADDR, e.g. 10.213.1.2/24}
    TAP=${NODEMEDIC_VM_TAP:-nmvm0}
    [ "$ARCH" = amd64 ] || TAP=${NODEMEDIC_VM_TAP:-nmarm0}
    [ -e "/run/netns/$NS" ] || {
        log "no network namespace $NS"
        exit 2
    }
    stop_vm # a previous VM of this DIR
    in_ns() { nsenter --net="/run/netns/$NS" "$@"; }
    in_ns ip link del "$TAP" 2>/dev/null || true
    # A multi-queue tap with the host side's address, up, and routes to what the guest
    # holds (its pods): the guest is a machine on the namespace's network.
    in_ns ip tuntap add dev "$TAP" mode tap multi_queue
    echo "$NS $TAP" >"$DIR/tap"
    in_ns ip addr add "$HOST_ADDR" dev "$TAP"
    in_ns ip link set "$TAP" up
    for r in ${NODEMEDIC_VM_ROUTES:-}; do
        in_ns ip route add "$r" via "${GUEST_ADDR%/*}" dev "$TAP" onlink
    done
    in_ns sysctl -qw net.ipv4.ip_forward=1
    printf 'GUEST_ADDR=%s\nGATEWAY=%s\n' "$GUEST_ADDR" "${HOST_ADDR%/*}" >"$DIR/net.env"
    rm -rf "$DIR/cmd"
    mkdir -p "$DIR/cmd"
    log "booting an $ARCH node (TCG $tcg_thread-threaded, smp $SMP, ${MEM} MiB, $QUEUES queue pairs), tap $TAP in $NS ($HOST_ADDR, guest $GUEST_ADDR), share $DIR"
    t0=$(date +%s.%N)
    # Its own session, so that --stop kills qemu and timeout together.
    setsid nsenter --net="/run/netns/$NS" timeout --kill-after=10 "$TIMEOUT" "${QEMU[@]}" \
        -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no,queues=$QUEUES" \
        -device "virtio-net-pci,netdev=n0,mq=on,vectors=$VECTORS" \
        </dev/null >"$DIR/qemu.log" 2>&1 &
    echo $! >"$DIR/qemu.pid"
    pid=$!
    deadline=$(($(date +%s) + ${NODEMEDIC_VM_BOOT_TIMEOUT:-300}))
    until [ -f "$DIR/agent-ready" ]; do
        if stalled; then
            log "the boot hung: $(grep -Em1 "$STALL_RE" "$DIR/console.log")"
            tail -n 40 "$DIR/console.log" >&2
            stop_vm
            exit 75
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "qemu exited during the boot"
            tail -n 60 "$DIR/console.log" "$DIR/qemu.log" >&2
            stop_vm
            exit 125
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "no agent within ${NODEMEDIC_VM_BOOT_TIMEOUT:-300}s"
            tail -n 60 "$DIR/console.log" >&2
            stop_vm
            exit 124
        fi
        sleep 0.2
    done
    log "agent up after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s (guest uptime $(cat "$DIR/agent-ready")s)"
    exit 0
fi

# The namespace and tap of the arm64 guest have their own names: an x86 test may run beside it.
NS=nm-vm-$$
TAP=tap0
if [ "$ARCH" = arm64 ]; then
    NS=nm-vm-arm64-$$
    TAP=nmarm0
fi
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
ip netns exec "$NS" ip tuntap add dev "$TAP" mode tap multi_queue

if [ "${NODEMEDIC_VM_CONSOLE:-0}" = 1 ]; then
    tail -n +1 -F "$DIR/console.log" >&2 2>/dev/null &
    tail_pid=$!
fi

log "booting $ARCH (TCG $tcg_thread-threaded, smp $SMP, ${MEM} MiB, $QUEUES queue pairs, timeout ${TIMEOUT}s), share $DIR"
t0=$(date +%s.%N)
# -snapshot: the cached image is never written. -no-reboot: a guest panic/reboot ends qemu.
ip netns exec "$NS" timeout --kill-after=10 "$TIMEOUT" "${QEMU[@]}" \
    -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no,queues=$QUEUES" \
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
