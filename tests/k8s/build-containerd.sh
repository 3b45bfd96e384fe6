#!/usr/bin/env bash
# Builds (once, cached) the container runtime both test nodes run, from the Go module proxy:
# containerd 2 (containerd, ctr, containerd-shim-runc-v2) and the runc that containerd release
# is tested with (its script/setup/runc-version). Prints the bin directory on stdout.
#
#   tests/k8s/build-containerd.sh      # < 1 s when cached
#
# Debian 12 ships containerd 1.6 and Debian 13 containerd 1.7: neither has the CRI
# RuntimeConfig call the kubelet takes its cgroup driver from (KEP-4033), and Kubernetes 1.36+
# no longer supports containerd 1.x. Both nodes (this machine and the QEMU guest) run these
# binaries: containerd is pure Go and static; runc is built with libseccomp (RuntimeDefault
# and Localhost profiles need it) and linked statically, so the Debian 13 guest runs the same
# file as this Debian 12 host.
#
# Env: NODEMEDIC_CONTAINERD_CACHE (default /var/cache/nodemedic-containerd), GO, GOTOOLCHAIN.
set -euo pipefail
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2          # containerd v2.4.2's script/setup/runc-version
CACHE="${NODEMEDIC_CONTAINERD_CACHE:-/var/cache/nodemedic-containerd}"
BIN="$CACHE/bin"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}"
log() { printf '[build-containerd] %s\n' "$*" >&2; }

mkdir -p "$BIN"
exec 9>"$CACHE/.lock"
flock 9
want="$CONTAINERD_VERSION $RUNC_VERSION $GOTOOLCHAIN $(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
if [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$want" ] \
    && [ -x "$BIN/containerd" ] && [ -x "$BIN/ctr" ] && [ -x "$BIN/containerd-shim-runc-v2" ] && [ -x "$BIN/runc" ]; then
    echo "$BIN"
    exit 0
fi
[ -x "$GO" ] || command -v "$GO" >/dev/null || { log "Go is needed (deploy/bootstrap.sh ensure_go)"; exit 1; }
# runc's seccomp support is cgo over libseccomp; its static archive is in libseccomp-dev.
# shellcheck source=deploy/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/apt.sh"
ensure_packages libseccomp-dev pkg-config gcc >&2
start=$(date +%s)
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
# The release's version and revision reach `containerd --version` and the node's
# containerRuntimeVersion through these variables, as containerd's Makefile sets them.
ver="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION -X github.com/containerd/containerd/v2/version.Revision=module"
for c in containerd ctr containerd-shim-runc-v2; do
    t0=$(date +%s)
    CGO_ENABLED=0 GOBIN="$BIN.tmp" "$GO" install -trimpath -tags "no_btrfs no_devmapper" \
        -ldflags "-s -w $ver" "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION" >&2
    log "built $c in $(( $(date +%s) - t0 ))s"
done
t0=$(date +%s)
CGO_ENABLED=1 GOBIN="$BIN.tmp" "$GO" install -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static" \
    "github.com/opencontainers/runc@$RUNC_VERSION" >&2
log "built runc in $(( $(date +%s) - t0 ))s"
if readelf -l "$BIN.tmp/runc" | grep -q INTERP; then
    log "runc is dynamically linked: the guest could not run it"; exit 1
fi
"$BIN.tmp/runc" --version | grep -q 'seccomp' || { log "runc was built without seccomp"; exit 1; }
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$want" > "$CACHE/stamp"
log "done in $(( $(date +%s) - start ))s: $("$BIN/containerd" --version), runc $("$BIN/runc" --version | head -1)"
echo "$BIN"
