#!/usr/bin/env bash
# Builds nodemedic's container image from this repository, without a daemon or a registry:
# the static musl binary with cargo, then `buildah build` of deploy/container/Containerfile
# (vfs storage, chroot isolation: works as root in a VM or a CI container).
#
#   deploy/container/build-image.sh [--oci-archive FILE]
#
# Tags localhost/nodemedic:<version> (the version in Cargo.toml, which the Helm chart's appVersion
# matches) in buildah's local storage and prints the image ID. --oci-archive also writes the
# image as an OCI archive, e.g. for `ctr -n k8s.io images import FILE` on a node.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/../..")
cd "$ROOT"
ARCHIVE=
if [ "${1:-}" = "--oci-archive" ] && [ -n "${2:-}" ]; then
    ARCHIVE=$(readlink -f "$2")
elif [ $# -gt 0 ]; then
    echo "usage: $0 [--oci-archive FILE]" >&2
    exit 2
fi
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
ensure_packages buildah >&2
VERSION=$(nodemedic_version)
BIN=$(build_static release)
SBOM=$(build_sbom)
CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
# The binary as built: stripped by cargo (build_static), the very file the .deb ships.
install -m 0755 "$BIN" "$CTX/nodemedic"
install -m 0644 deploy/nodemedic.toml "$CTX/nodemedic.toml"
install -m 0644 "$SBOM" "$CTX/nodemedic.cdx.json"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
# --timestamp: the layer's files and the image's dates are the commit's, so that two builds of
# one commit give the same layer (deploy/reproducible-build.sh).
buildah build --quiet --layers=false --timestamp "$(source_date_epoch)" --build-arg "VERSION=$VERSION" \
    -f deploy/container/Containerfile -t "localhost/nodemedic:$VERSION" "$CTX" >&2
if [ -n "$ARCHIVE" ]; then
    rm -f "$ARCHIVE"
    buildah push --quiet "localhost/nodemedic:$VERSION" "oci-archive:$ARCHIVE:localhost/nodemedic:$VERSION" >&2
fi
buildah images --noheading --format '{{.ID}}' "localhost/nodemedic:$VERSION"
