#!/usr/bin/env bash
# Warms, in the background of tests/run-all.sh, the caches of what the later steps build from
# the Go module proxy and Debian's registry: the Kubernetes binaries, Helm 4 and 3, containerd
# and runc, the Prometheus with Kubernetes discovery, both QEMU guests' images, and the
# previous release's .deb and image (tests/previous-version.sh). tests/run-all.sh waits for it
# before the cluster and VM tests, which must run on an idle machine. On a cold machine that
# is about 35 minutes of building (the previous release's build alone 14), which then overlaps
# the cargo tests and the image builds; on a warm one each step finds its cache in < 1 s.
#
#   nice -n 10 tests/prebuild.sh     # tests/run-all.sh starts it so, and prints its log when
#                                    # it waits for it, before the cluster tests
#
# Nothing depends on it having run or succeeded: every step that needs a build calls the same
# script, which takes the same cache's lock, so it waits for the build under way here, or finds
# it done, or (if it failed here) builds it again and fails there with its own message. Two
# lanes side by side: what the cargo tests need first (Kubernetes, Helm 4), then containerd and
# the guest node's image; and the previous release's .deb and image (one release build of it,
# by its own scripts), then Prometheus and Helm 3. The two guest images (debootstrap: mostly
# downloads and unpacking) are built beside them: Debian 12's from the start, Debian 13's node
# image once the kubelet and containerd it holds are built.
set -uo pipefail
cd "$(dirname "$0")/.."

# A cold build's scratch in RAM: Go's module and build caches, and the tree the previous
# release is built in. Only the binaries, images and .debs are kept (each script's cache under
# /var/cache), so on a warm machine nothing here is read. Why RAM: this machine's kernel pages
# out page cache left unread for a minute (DAMON's `pageout` scheme, kdamond), and a link reads
# back everything compiled before it: the cold run of 3e6a3be read 16.7 GB from disk, 1.2 GB
# for kube-apiserver's link alone, and its Kubernetes lane took 2,147 s (899 s in the cold run of
# 372af75 on 2026-12-01). tmpfs is not page cache: without swap it is never paged out. Its
# size is a limit, not a reservation; it is gone when this script ends.
previous_tmp=${TMPDIR:-/var/tmp}
if [ "$(id -u)" = 0 ] && [ -z "${GOCACHE:-}${GOMODCACHE:-}" ] &&
    scratch=$(mktemp -d /run/nodemedic-prebuild.XXXXXX) &&
    mount -t tmpfs -o size=16g,mode=0700 nodemedic-prebuild "$scratch"; then
    export GOCACHE=$scratch/go-build GOMODCACHE=$scratch/go-mod GOTMPDIR=$scratch/go-tmp
    previous_tmp=$scratch/previous
    mkdir -p "$GOTMPDIR" "$previous_tmp"
    # Lazily: a build killed with this script may still hold a file open for a moment.
    trap 'umount -l "$scratch" 2>/dev/null; rmdir "$scratch" 2>/dev/null' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    echo "[prebuild $(date +%T)] Go's caches and the previous release's build tree in RAM: $scratch (tmpfs)"
elif [ -n "${scratch:-}" ]; then
    rmdir "$scratch"
fi

step() {
    local start rc
    start=$(date +%s)
    echo "[prebuild $(date +%T)] $*"
    "$@" >/dev/null
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "[prebuild $(date +%T)] done in $(($(date +%s) - start))s: $*"
    else
        echo "[prebuild $(date +%T)] FAILED (exit $rc) after $(($(date +%s) - start))s: $*; the step that needs it builds it again"
    fi
    return "$rc"
}

step bash tests/vm/build-image.sh &
vm=$!
# Two lanes. Run one after the other, the builds outlasted the foreground by ten minutes in
# the cold run of 962e336 (the foreground done at 34 min, Prometheus and Helm 3 still to
# build, on one core: a single Go build keeps about 1.2 of the two busy). Side by side, the
# second lane fills what the first leaves idle; each keeps the order its consumers need.
(
    TMPDIR=$previous_tmp step bash tests/previous-version.sh deb
    step bash tests/k8s/build-prometheus.sh
    step bash tests/k8s/build-helm.sh 3
) &
lane=$!
k8s=0 containerd=0
step bash tests/k8s/build-k8s.sh || k8s=$?
step bash tests/k8s/build-helm.sh 4
step bash tests/k8s/build-containerd.sh || containerd=$?
# The guest node's image (debootstrap: downloads and dpkg, little CPU), once the kubelet and
# containerd it holds are built; not tried without them (it would only fail on a missing file).
if [ "$k8s$containerd" = 00 ]; then
    step bash tests/k8s/guest-node.sh image
else
    echo "[prebuild $(date +%T)] FAILED: tests/k8s/guest-node.sh image not tried, the kubelet or containerd build failed"
fi
wait "$vm" "$lane"
