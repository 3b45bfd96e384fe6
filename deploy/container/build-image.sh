#!/usr/bin/env bash
# Builds nodemedic's container image from this repository, without a daemon or a registry:
# for each architecture the static musl binary with cargo (arm64 cross-built on this x86-64
# machine, deploy/bootstrap.sh build_static), then `buildah build --platform` of
# deploy/container/Containerfile (scratch and COPY only: nothing runs, so no emulation; vfs
# storage, chroot isolation: works as root in a VM or a CI container), and an OCI image index
# (a buildah manifest list) naming both.
#
#   deploy/container/build-image.sh [--arch amd64|arm64] [--oci-archive FILE]
#
# Tags localhost/nodemedic:<version>-<arch> for each image and localhost/nodemedic:<version>
# (the version in Cargo.toml, which the Helm chart's appVersion matches) for the index, whose
# linux/amd64 and linux/arm64 entries a node's runtime chooses from: the chart needs nothing
# per architecture. Prints the image ID of this machine's architecture. --arch builds that one
# image alone (and an index of it); --oci-archive also writes the index with every image it
# names as an OCI archive, e.g. for `ctr -n k8s.io images import --all-platforms FILE`.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/../..")
cd "$ROOT"
ARCHIVE=
usage() {
    echo "usage: $0 [--arch amd64|arm64] [--oci-archive FILE]" >&2
    exit 2
}
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
arches=$ARCHES
while [ $# -gt 0 ]; do
    case "$1" in
        --oci-archive) [ -n "${2:-}" ] || usage; ARCHIVE=$(readlink -f "$2"); shift 2 ;;
        --arch) musl_target "${2:-}" >/dev/null || usage; arches=$2; shift 2 ;;
        *) usage ;;
    esac
done
ensure_packages buildah >&2
VERSION=$(nodemedic_version)
INDEX=localhost/nodemedic:$VERSION
CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
# The index is made anew: drop the last one (or the single image an older build tagged so).
buildah manifest rm "$INDEX" >/dev/null 2>&1 || buildah rmi "$INDEX" >/dev/null 2>&1 || true
buildah manifest create "$INDEX" >/dev/null
install -m 0644 deploy/nodemedic.toml "$CTX/nodemedic.toml"
for arch in $arches; do
    BIN=$(build_static release "$arch")
    SBOM=$(build_sbom "$arch")
    # The binary as built: stripped by cargo (build_static), the very file the .deb of that
    # architecture ships.
    install -m 0755 "$BIN" "$CTX/nodemedic"
    install -m 0644 "$SBOM" "$CTX/nodemedic.cdx.json"
    # --timestamp: the layer's files and the image's dates are the commit's, so that two
    # builds of one commit give the same layer (deploy/reproducible-build.sh).
    buildah build --quiet --layers=false --platform "linux/$arch" --timestamp "$(source_date_epoch)" \
        --build-arg "VERSION=$VERSION" -f deploy/container/Containerfile -t "$INDEX-$arch" "$CTX" >&2
    buildah manifest add "$INDEX" "containers-storage:$INDEX-$arch" >&2
done
if [ -n "$ARCHIVE" ]; then
    rm -f "$ARCHIVE"
    buildah manifest push --quiet --all "$INDEX" "oci-archive:$ARCHIVE:$INDEX" >&2
    # Its files are the same for two builds of one commit, but the tar's own headers carry the
    # time of the push (deploy/reproducible-build.sh): the archive again, with the commit's
    # time, its members in name order and root as their owner, so that the file is the same.
    layout=$(mktemp -d)
    tar -x -C "$layout" -f "$ARCHIVE"
    (cd "$layout" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$layout.list"
    tar -c -f "$ARCHIVE" -C "$layout" --no-recursion --format=gnu --mtime="@$(source_date_epoch)" \
        --owner=0 --group=0 --numeric-owner -T "$layout.list"
    rm -rf "$layout" "$layout.list"
fi
here=$(dpkg --print-architecture)
case " $arches " in *" $here "*) ;; *) here=${arches%% *} ;; esac
buildah images --noheading --format '{{.ID}}' "$INDEX-$here"
