#!/usr/bin/env bash
# Builds the test images of tests/k8s/images/ as OCI archives, cached: nothing can be pulled
# here, so the pod sandbox's pause image and the test workloads are built on this machine
# from a few lines of Go each, as static binaries in images FROM scratch (no shell).
#
#   tests/k8s/build-images.sh NAME...     # prints $CACHE/images/NAME.tar for each NAME
#
#   pause   registry.k8s.io/pause:3.10            every pod's sandbox (containerd's sandbox_image)
#   busy    localhost/nodemedic-test-busy:1       N goroutines spinning (tests/k8s/node_e2e.py)
#   hello   localhost/nodemedic-test-hello:1      logs, exec and the API through the Service
#                                                 address (tests/k8s/cluster-check.sh)
#
# Cached under $NODEMEDIC_K8S_CACHE/images (default /var/cache/nodemedic-k8s/images) with a
# stamp of the sources, this script and the Go version; built under a flock, written to a
# unique name and renamed. buildah runs with STORAGE_DRIVER=vfs and BUILDAH_ISOLATION=chroot
# on a storage of its own in a temporary directory, so it neither needs overlay nor touches
# the machine's /var/lib/containers.
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
OUT="$CACHE/images"
[ $# -ge 1 ] || { echo "usage: $0 pause|busy|hello..." >&2; exit 2; }

log() { printf '[build-images] %s\n' "$*" >&2; }
ref_of() {
  case "$1" in
    pause) echo registry.k8s.io/pause:3.10 ;;
    busy) echo localhost/nodemedic-test-busy:1 ;;
    hello) echo localhost/nodemedic-test-hello:1 ;;
    *) return 1 ;;
  esac
}
for name in "$@"; do ref_of "$name" >/dev/null || { log "unknown image $name"; exit 2; }; done

if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
command -v "$GO" >/dev/null 2>&1 || { log "ERROR: Go is needed (go on PATH or /usr/local/go/bin/go, or GO=)"; exit 1; }
command -v buildah >/dev/null 2>&1 || { log "ERROR: buildah is needed (tests/k8s/build-k8s.sh installs it)"; exit 1; }
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0

mkdir -p "$OUT"
exec 8>"$OUT/.lock"
flock 8

for name in "$@"; do
  ref=$(ref_of "$name")
  archive="$OUT/$name.tar"
  want="$(cat "$HERE/images/go.mod" "$HERE/images/$name"/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1) $ref $GOTOOLCHAIN"
  if [ -f "$archive" ] && [ "$(cat "$OUT/$name.stamp" 2>/dev/null)" = "$want" ]; then
    echo "$archive"
    continue
  fi
  t0=$(date +%s)
  work=$(mktemp -d "${TMPDIR:-/tmp}/nmk8s-image.XXXXXX")
  mkdir "$work/ctx"
  (cd "$HERE/images" && "$GO" build -trimpath -ldflags "-s -w" -o "$work/ctx/app" "./$name")
  bh() {
    STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot \
      buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"
  }
  c=$(bh from --quiet scratch)
  bh copy "$c" "$work/ctx/app" /app >/dev/null
  bh config --entrypoint '["/app"]' --cmd '' --user 65534:65534 "$c"
  bh commit --quiet "$c" "$ref" >/dev/null
  bh push --quiet "$ref" "oci-archive:$work/$name.tar:$ref"
  mv -f "$work/$name.tar" "$archive.tmp.$$"
  mv -f "$archive.tmp.$$" "$archive"
  echo "$want" > "$OUT/$name.stamp.tmp.$$" && mv -f "$OUT/$name.stamp.tmp.$$" "$OUT/$name.stamp"
  rm -rf "$work"
  log "built $ref -> $archive in $(( $(date +%s) - t0 ))s"
  echo "$archive"
done
