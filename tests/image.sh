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
[ "$files" = "./etc/nodemedic/nodemedic.toml ./usr/bin/nodemedic ./usr/share/doc/nodemedic/nodemedic.cdx.json " ] ||
    fail "unexpected files in the image: $files"
readelf -l "$mnt/usr/bin/nodemedic" | grep -q INTERP && fail "the image's binary is not static"
bin_bytes=$(stat -c %s "$mnt/usr/bin/nodemedic")
cp "$mnt/usr/bin/nodemedic" "$tmp/image-nodemedic"
cp "$mnt/usr/share/doc/nodemedic/nodemedic.cdx.json" "$tmp/image-sbom.json"
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
label=$(buildah inspect --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "localhost/nodemedic:$VERSION")
[ "$label" = "$VERSION" ] || fail "the image's version label is '$label', its tag $VERSION"
size=$(buildah images --noheading --format '{{.Size}}' "localhost/nodemedic:$VERSION")
echo "image size: $size (the static binary: $bin_bytes bytes, stripped)"

# The .deb (issue 36): built from the same build, it ships the very binary and SBOM the image
# does (reproducible builds' cheaper half: deploy/reproducible-build.sh does the whole), under
# the crate's version.
deb=$(bash deploy/debian/build-deb.sh)
deb_version=$(dpkg-deb -f "$deb" Version)
[ "$deb_version" = "$VERSION-1" ] || fail "$deb is version $deb_version, the crate $VERSION"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/nodemedic >"$tmp/deb-nodemedic"
cmp -s "$tmp/deb-nodemedic" "$tmp/image-nodemedic" ||
    fail "the .deb's /usr/bin/nodemedic ($(sha256sum <"$tmp/deb-nodemedic" | cut -c1-16)) is not the image's ($(sha256sum <"$tmp/image-nodemedic" | cut -c1-16))"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/nodemedic/nodemedic.cdx.json >"$tmp/deb-sbom.json"
cmp -s "$tmp/deb-sbom.json" "$tmp/image-sbom.json" || fail "the .deb's SBOM is not the image's"
echo "$(basename "$deb"): version $deb_version, /usr/bin/nodemedic identical to the image's (sha256 $(sha256sum <"$tmp/deb-nodemedic" | cut -d' ' -f1))"

# What cargo-auditable embedded in the binary, read back by rust-audit-info (the reader of the
# cargo-auditable project; trivy, syft and `cargo audit bin` read the same section), against
# Cargo.lock and the SBOM.
audit_info=$(ensure_cargo_tool rust-audit-info 0.5.4)
/usr/bin/python3 tests/sbom_check.py --audit-info "$audit_info" --binary "$tmp/image-nodemedic" \
    --sbom "$tmp/image-sbom.json" --lock Cargo.lock --version "$VERSION"
