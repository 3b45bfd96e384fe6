#!/usr/bin/env bash
# Host side of the D-Bus mediation test (issue 52 point 2): a Debian 13 guest with
# trixie-backports' kernel and sid's apparmor and dbus, in which dbus-daemon mediates D-Bus by
# AppArmor label as Ubuntu's does; tests/vm/dbus-mediation-guest.sh runs the checks there (a
# profile without dbus rules refused, nodemedic's profile allowed its calls and refused others).
#   tests/vm/dbus-mediation.sh [NODEMEDIC_BINARY]
# With a nodemedic binary (x86-64; e.g. the release build of target/x86_64-unknown-linux-musl),
# the daemon also runs under its profile through the incident. Builds the image once into
# NODEMEDIC_VM_CACHE (default /var/cache/nodemedic-vm-dbus; a cache of its own: the image has
# extras). Boots the guest under the cluster lock (/tmp/nodemedic-cluster.lock), as run-all.sh's
# guests do. Prints the guest's PASS/FAIL lines and "N passed, N failed"; exit code the guest's.
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(readlink -f "$HERE/../..")
BIN=${1:-}
export NODEMEDIC_VM_ARCH=amd64
export NODEMEDIC_VM_CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm-dbus}
export NODEMEDIC_VM_SUITE=trixie
export NODEMEDIC_VM_IMG_SIZE=4G
export NODEMEDIC_VM_PACKAGES=containerd
# Two kernels and sid's packages: 2 GiB is not enough.
export NODEMEDIC_VM_APT_SOURCES='deb @MIRROR@ trixie-backports main; deb [check-valid-until=no] @MIRROR@ sid main'
export NODEMEDIC_VM_APT_INSTALL='linux-image-amd64/trixie-backports apparmor/sid libapparmor1/sid dbus/sid dbus-bin/sid dbus-daemon/sid dbus-system-bus-common/sid dbus-session-bus-common/sid libdbus-1-3/sid'
# sid's Release file can be older than its Valid-Until when the mirror is a snapshot: hence
# check-valid-until=no above.
start=$(date +%s)
nice -n 19 bash "$HERE/build-image.sh"
built=$(date +%s)
DIR=$(mktemp -d /tmp/nodemedic-vm-dbus.XXXXXX)
cp "$HERE/dbus-mediation-guest.sh" "$DIR/test.sh"
cp "$HERE/guest-lib.sh" "$HERE/nodbus-profile.template" "$DIR/"
mkdir -p "$DIR/apparmor/abstractions"
cp "$ROOT/deploy/apparmor/nodemedic" "$DIR/apparmor/"
cp "$ROOT/deploy/apparmor/abstractions/nodemedic" "$DIR/apparmor/abstractions/"
if [ -n "$BIN" ]; then
    [ -x "$BIN" ] || { echo "no nodemedic binary at $BIN" >&2; exit 2; }
    cp "$BIN" "$DIR/nodemedic"
    cp "$HERE/nodemedic.toml" "$DIR/"
fi
set +e
flock -o /tmp/nodemedic-cluster.lock bash "$HERE/run.sh" "$DIR"
rc=$?
set -e
cat "$DIR/stdout" 2>/dev/null || true
[ -s "$DIR/stderr" ] && { echo "----- guest stderr -----"; tail -n 30 "$DIR/stderr"; }
echo "[dbus-mediation] kernel $(cat "$NODEMEDIC_VM_CACHE/kernel-release"); image $((built - start))s, guest $(($(date +%s) - built))s; exit $rc; files in $DIR"
exit "$rc"
