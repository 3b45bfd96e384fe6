#!/usr/bin/env bash
# The container image builds from this repository (deploy/container/build-image.sh: static
# musl binary, buildah, no daemon, no registry), its binary is static and is the one that
# runs, it reports the repository's version, its default configuration validates, and it runs
# as uid 65534 unless told otherwise. Prints the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
VERSION=$(nodemedic_version)
tmp=$(mktemp -d)
ctr=
cleanup() {
    [ -n "$ctr" ] && STORAGE_DRIVER=vfs buildah rm "$ctr" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
id=$(bash deploy/container/build-image.sh --oci-archive "$tmp/nodemedic.tar")
echo "image localhost/nodemedic:$VERSION id $id"
fail() { echo "image test: $*" >&2; exit 1; }
[ -s "$tmp/nodemedic.tar" ] || fail "no OCI archive written"
ctr=$(buildah from --pull=never "localhost/nodemedic:$VERSION")
mnt=$(buildah mount "$ctr")
files=$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')
[ "$files" = "./etc/nodemedic/nodemedic.toml ./usr/bin/nodemedic " ] || fail "unexpected files in the image: $files"
readelf -l "$mnt/usr/bin/nodemedic" | grep -q INTERP && fail "the image's binary is not static"
bin_bytes=$(stat -c %s "$mnt/usr/bin/nodemedic")
buildah umount "$ctr" >/dev/null
out=$(buildah run "$ctr" -- /usr/bin/nodemedic --version)
case "$out" in
    "nodemedic $VERSION (revision "*", target x86_64-unknown-linux-musl)") ;;
    *) fail "--version from the image printed '$out', want 'nodemedic $VERSION (revision …, rustc …, target x86_64-unknown-linux-musl)'" ;;
esac
echo "from the image: $out"
buildah run "$ctr" -- /usr/bin/nodemedic --config /etc/nodemedic/nodemedic.toml config >/dev/null ||
    fail "the image's default configuration does not validate"
user=$(buildah inspect --format '{{.OCIv1.Config.User}}' "localhost/nodemedic:$VERSION")
[ "$user" = "65534:65534" ] || fail "image user is '$user'"
size=$(buildah images --noheading --format '{{.Size}}' "localhost/nodemedic:$VERSION")
echo "image size: $size (the static binary: $bin_bytes bytes, stripped)"
