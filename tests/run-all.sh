#!/usr/bin/env bash
# Installs what the test suite needs (Debian/Ubuntu, as root) and runs all of it:
# fixture regeneration check; the cargo test suite (unit, fixture trees, golden exposition
# with promtool, a real Prometheus, this machine's real IRQs, remediation on a paused clock
# and on real IRQs, a real kube-apiserver built from Go modules with etcd); the end-to-end
# remediation test in a QEMU VM with systemd and irqbalance, after a .deb upgrade from the
# previous release and a downgrade back; the shipped chart on a real single-node Kubernetes
# cluster (kubelet, containerd, runc: tests/k8s/node_e2e.py, with a `helm upgrade` from the
# previous release's chart), then with the QEMU guest as its second node
# (tests/k8s/guest_e2e.py); and a bounded fuzz run at the lowest priority, beside the
# single-node test. The
# Kubernetes binaries, helm, the VM images and the previous release's .deb and image are
# cached under /var/cache (first build: about 7, 2, 3-6 and 6 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
ensure_test_deps
# Debian's interpreter, the one python3-yaml and python3-seccomp install into: a python3 found
# first on PATH (a pyenv, a virtualenv) would import whatever it happens to have.
PY=/usr/bin/python3

tmp=$(mktemp -d)
# The Go and debootstrap builds the later steps need, in the background (tests/prebuild.sh:
# each step still builds or waits for what it needs itself). Its session is a scheduling group
# of its own (autogroups: see the fuzz run below), so it shares the CPU evenly with the
# foreground (its nice 10 weighs only against its own processes). Stopped with
# everything it started if this script ends first, as is the fuzz run (below). (`|| true`:
# under set -e a failing command in an EXIT trap becomes the script's exit status, and the
# kill fails whenever the builds have already ended, which is the normal case.)
setsid nice -n 10 bash tests/prebuild.sh >"$tmp/prebuild.log" 2>&1 &
prebuild=$!
fuzz=
trap 'kill -TERM -- "-$prebuild" 2>/dev/null || true
      [ -z "$fuzz" ] || { kill -TERM -- "-$fuzz"; kill -CONT -- "-$fuzz"; } 2>/dev/null || true
      rm -rf "$tmp"' EXIT

section "fixtures match their generator"
"$PY" tests/fixtures/generate.py "$tmp"
for tree in "$tmp"/*/; do
    name=$(basename "$tree")
    diff -r --no-dereference "$tree" "tests/fixtures/$name" >/dev/null || {
        echo "tests/fixtures/$name differs from generate.py output; rerun: python3 tests/fixtures/generate.py" >&2
        exit 1
    }
done

section "tests/k8s/node_e2e.py's judgements on made-up records (no cluster)"
"$PY" tests/k8s/test_node_e2e.py

section "cargo test"
# One test thread per binary keeps the real-IRQ and real-Prometheus tests from sharing a
# 2-core machine with everything else at once.
cargo test --workspace --locked -- --test-threads="${TEST_THREADS:-2}"

# Both architectures' shipped artifacts: the release builds, the image index, the .debs, and
# the arm64 binary under qemu-user on arm64 nodes' trees beside the amd64 one
# (NODEMEDIC_ARCHES=amd64 leaves arm64 to a `cargo check`, for a quick local run only).
# The arm64 guest (a real arm64 kernel) stays a recorded run (docs/ci.md, "arm64").
section "the container image (${NODEMEDIC_ARCHES:-amd64 arm64}): built from this repository with buildah, run"
bash tests/image.sh

section "the image for the Kubernetes tests (deploy/container/build-image.sh), built once"
bash deploy/container/build-image.sh --oci-archive "$tmp/nodemedic-image.tar" >/dev/null
export NODEMEDIC_IMAGE_ARCHIVE="$tmp/nodemedic-image.tar"

section "the previous release's .deb and image for the upgrade tests (tests/previous-version.sh: its own scripts, built once per machine)"
start=$(date +%s)
NODEMEDIC_PREVIOUS_DEB=$(bash tests/previous-version.sh deb)
NODEMEDIC_PREVIOUS_IMAGE_ARCHIVE=$(bash tests/previous-version.sh image)
export NODEMEDIC_PREVIOUS_DEB NODEMEDIC_PREVIOUS_IMAGE_ARCHIVE
echo "nodemedic $(bash tests/previous-version.sh version): ready in $(($(date +%s) - start))s"

# The background builds end here (on a warm machine they ended long ago): node_e2e.py's check
# 3 refuses to judge a busy node. Only the fuzz run below goes beside it, stopped for that
# check.
section "the background builds (tests/prebuild.sh)"
wait "$prebuild" || true
cat "$tmp/prebuild.log"
# A build that failed there is built again by the step that needs it, which then fails with
# its own message; the summary says so here, where the foreground's log is read.
if failed=$(grep 'FAILED' "$tmp/prebuild.log"); then
    echo "== background builds: $(echo "$failed" | wc -l) FAILED (each is tried again by the step that needs it):"
    echo "$failed"
else
    echo "== background builds: none failed"
fi

# The cluster and the VM use fixed network namespaces, addresses and ports: one user at a time
# on this machine (another checkout's test run, a benchmark), under this lock; -o keeps the
# daemons they start from inheriting it.
lock=(flock -o /tmp/nodemedic-cluster.lock)

# The bounded fuzz run (tests/fuzz.sh), in the background at the lowest priority, beside
# node_e2e.py, which leaves more than a core idle, and never beside the QEMU guests:
# - Its build (the nightly toolchain and cargo-fuzz where missing, the one fuzz binary) starts with
#   node_e2e.py; node_e2e.py stops its process group (NODEMEDIC_PAUSE_PGID, SIGSTOP) for check
#   3, which needs the node otherwise idle.
# - Its targets start once check 3 is done (node_e2e.py creates NODEMEDIC_IDLE_DONE_FILE, the
#   file fuzz.sh waits for): 16 targets x 10 s (FUZZ_SECONDS here; fuzz.sh's own default is
#   20), two at a time, about 75 s, beside node_e2e.py's later checks. The guests' tests wait
#   for the end. At 20 s a target the run outlasted node_e2e.py by 66 s in the cold CI of
#   adeda8b (2026-11-29), on the path to the 65-minute budget; at 10 s the targets still ran
#   76 k to 1.8 M inputs each (warm CI of 7c26531; docs/ci.md).
# Not beside the guests: preempted vCPU threads made the x86 guest's stale-int3 panic under
# QEMU 7.2's multi-threaded TCG more frequent (tests/vm/README.md), and the guests' checks
# wait on timers that a busy host stretches.
# Each target's log says how many inputs it ran.
# The lowest priority has to be the session's: setsid starts a new session, and with the
# kernel's autogroups (sched_autogroup_enabled, on in Debian's and this machine's kernels) a
# session is a scheduling group of its own, which gets an equal share against every other
# session whatever its processes' nice values. Writing 19 to /proc/self/autogroup gives the
# session the lowest weight (where autogroups are off the file is absent and nice does the
# same job).
section "bounded fuzzing (tests/fuzz.sh): built beside node_e2e.py at the lowest priority, run after its check 3"
go="$tmp/fuzz-go"
FUZZ_SECONDS=${FUZZ_SECONDS:-10} FUZZ_START_FILE=$go setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
    exec nice -n 19 bash tests/fuzz.sh' >"$tmp/fuzz.log" 2>&1 &
fuzz=$!

section "a real Kubernetes node: the chart's DaemonSet on kubelet + containerd + runc (tests/k8s)"
"${lock[@]}" env NODEMEDIC_PAUSE_PGID="$fuzz" NODEMEDIC_IDLE_DONE_FILE="$go" "$PY" tests/k8s/node_e2e.py
touch "$go"  # node_e2e.py made it after check 3; made here too, so that the wait below ends

section "bounded fuzzing (tests/fuzz.sh): waiting for it (nothing runs beside the QEMU guests)"
fuzz_rc=0
wait "$fuzz" || fuzz_rc=$?
fuzz=
cat "$tmp/fuzz.log"
[ "$fuzz_rc" -eq 0 ] || exit "$fuzz_rc"

section "two nodes: this one and the QEMU guest (systemd, cgroup v2, the systemd driver, D-Bus, irqbalance)"
"${lock[@]}" "$PY" tests/k8s/guest_e2e.py

section "real kernel, systemd, D-Bus and irqbalance in a QEMU VM (nodemedic from its .deb)"
"${lock[@]}" bash tests/vm/nodemedic-e2e.sh

# The same test in the arm64 guest (Debian 13, kernel 6.12, GICv3 and ITS, under TCG): a
# recorded run, not a CI step, since its image alone takes half an hour of both cores on a fresh
# machine (docs/ci.md, "arm64"). NODEMEDIC_ARM64_GUEST=1 runs it here, after the x86 one.
if [ "${NODEMEDIC_ARM64_GUEST:-0}" = 1 ]; then
    section "the arm64 guest: the same test on a real arm64 kernel, and the image's arm64 binary under containerd"
    "${lock[@]}" env NODEMEDIC_VM_ARCH=arm64 bash tests/vm/nodemedic-e2e.sh
else
    section "the arm64 guest test is a recorded run (docs/ci.md, \"arm64\"): NODEMEDIC_ARM64_GUEST=1 runs it here"
fi
