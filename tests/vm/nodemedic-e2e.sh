#!/usr/bin/env bash
# Host side of the end-to-end test: a real kernel, systemd, D-Bus and irqbalance in a QEMU VM
# (tests/vm/run.sh), nodemedic installed from its Debian package (deploy/debian/build-deb.sh),
# and its eBPF probes attached to that kernel (tests/vm/probes-guest.sh), after an upgrade from
# the previous release's .deb and a downgrade back (tests/vm/upgrade-guest.sh).
#   tests/vm/nodemedic-e2e.sh [NODEMEDIC_DEB]   (default: package the release build, the binary
#   the image ships; tests/run-all.sh has built it for the image by then)
# The previous release's .deb: NODEMEDIC_PREVIOUS_DEB, or tests/previous-version.sh's (built
# once and cached).
#
# NODEMEDIC_VM_ARCH=arm64: the same test in the arm64 guest (tests/vm/run.sh: Debian 13, kernel
# 6.12, QEMU's virt machine with a GICv3 and its ITS, under TCG), with the arm64 .deb
# (deploy/debian/build-deb.sh --arch arm64, cross-built here) and perfgen cross-compiled. The
# upgrade test is left out, saying why: the previous release has no arm64 package. The
# container image's index (deploy/container/build-image.sh --oci-archive, both platforms; or
# NODEMEDIC_VM_IMAGE=ARCHIVE) goes in the share, and its arm64 binary runs under containerd in
# the guest (image-guest.sh). Not run by tests/run-all.sh (docs/ci.md says why); run it as
# run-all.sh runs the VM test, under the cluster lock:
#   flock -o /tmp/nodemedic-cluster.lock env NODEMEDIC_VM_ARCH=arm64 tests/vm/nodemedic-e2e.sh
#
# NODEMEDIC_VM_CAPTURE=PREFIX (either architecture): the kernel's files are captured as fixture
# trees (capture-guest.sh), healthy and collapsed, and copied to PREFIX and PREFIX-collapsed
# (e.g. tests/fixtures/captured-arm64-virt). A capture takes minutes under emulation.
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(readlink -f "$HERE/../..")
ARCH=${NODEMEDIC_VM_ARCH:-amd64}
export NODEMEDIC_VM_ARCH=$ARCH
DEB=${1:-}
if [ -z "$DEB" ]; then
    if [ "$ARCH" = amd64 ]; then
        DEB=$(bash "$ROOT/deploy/debian/build-deb.sh")
    else
        DEB=$(bash "$ROOT/deploy/debian/build-deb.sh" --arch "$ARCH")
    fi
fi
[ -f "$DEB" ] || { echo "no nodemedic package at $DEB" >&2; exit 2; }
[ "$(dpkg-deb -f "$DEB" Architecture)" = "$ARCH" ] ||
    { echo "$DEB is not an $ARCH package" >&2; exit 2; }
PREV_DEB=
[ "$ARCH" != amd64 ] || PREV_DEB=${NODEMEDIC_PREVIOUS_DEB:-$(bash "$ROOT/tests/previous-version.sh" deb)}
bash "$HERE/build-image.sh"
DIR=$(mktemp -d "/tmp/nodemedic-vm-e2e-$ARCH.XXXXXX")
cp "$DEB" "$DIR/nodemedic.deb"
if [ -n "$PREV_DEB" ]; then
    cp "$PREV_DEB" "$DIR/nodemedic-previous.deb"
else
    echo "nodemedic $(bash "$ROOT/tests/previous-version.sh" version), the previous release, has no $ARCH package to upgrade from" >"$DIR/skip-upgrade"
fi
cp "$HERE/nodemedic.toml" "$DIR/"
cp "$HERE/nodemedic-guest.sh" "$DIR/test.sh"
cp "$HERE/guest-lib.sh" "$DIR/"
cp "$HERE/upgrade-guest.sh" "$HERE/probes-guest.sh" "$HERE/tuning-guest.sh" "$HERE/apparmor-guest.sh" "$DIR/"
[ -z "${NODEMEDIC_VM_CAPTURE:-}" ] || cp "$HERE/capture-guest.sh" "$DIR/"
if [ "$ARCH" != amd64 ]; then
    if [ -n "${NODEMEDIC_VM_IMAGE:-}" ]; then
        cp "$NODEMEDIC_VM_IMAGE" "$DIR/nodemedic-image.tar"
    else
        bash "$ROOT/deploy/container/build-image.sh" --oci-archive "$DIR/nodemedic-image.tar" >/dev/null
    fi
    cp "$HERE/image-guest.sh" "$DIR/"
fi
# The probe test's traffic generator, static: the minbase guest has no compiler.
if [ "$ARCH" = amd64 ]; then
    cc -O2 -static -Wall -Werror -o "$DIR/perfgen" "$HERE/perfgen.c"
else
    # shellcheck source=deploy/bootstrap.sh
    . "$ROOT/deploy/bootstrap.sh"
    ensure_packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross >&2
    aarch64-linux-gnu-gcc -O2 -static -Wall -Werror -o "$DIR/perfgen" "$HERE/perfgen.c"
fi
start=$(date +%s)
set +e
bash "$HERE/run.sh" "$DIR"
rc=$?
set -e
cat "$DIR/stdout" 2>/dev/null || true
[ -s "$DIR/stderr" ] && { echo "----- guest stderr -----"; tail -n 50 "$DIR/stderr"; }
if [ -d "$DIR/capture" ]; then
    for tree in healthy collapsed; do
        [ -d "$DIR/capture/$tree" ] || continue
        echo "[vm-e2e] captured the $tree tree: $DIR/capture/$tree ($DIR/capture/$tree.facts)"
        dest=$NODEMEDIC_VM_CAPTURE
        [ "$tree" = healthy ] || dest=$dest-$tree
        rm -rf "$dest"
        mkdir -p "$(dirname "$dest")"
        cp -a "$DIR/capture/$tree" "$dest"
        echo "[vm-e2e] copied to $dest"
    done
fi
echo "[vm-e2e] $ARCH: exit $rc after $(($(date +%s) - start))s; files in $DIR"
[ "$rc" -eq 0 ] && rm -f "$DIR/nodemedic.deb" "$DIR/nodemedic-previous.deb" "$DIR/nodemedic-image.tar"
exit "$rc"
