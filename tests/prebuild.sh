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
    step bash tests/previous-version.sh deb
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
