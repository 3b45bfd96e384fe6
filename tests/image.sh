#!/usr/bin/env bash
# The container image builds from this repository (deploy/container/build-image.sh: static
# musl binaries for amd64 and arm64, buildah, no daemon, no registry) as one OCI image index
# naming linux/amd64 and linux/arm64, and its archive carries both. The amd64 image's binary is
# static and is the one that runs, it reports the repository's version, its default
# configuration validates, and it runs as uid 65534 unless told otherwise. The arm64 image
# holds the same files, its binary is a static AArch64 one, and it runs here under Debian's
# qemu-user: `nodemedic check` on the Graviton-style fixture trees finds the collapse of eth0
# and nothing on the healthy tree, and on those and the trees a real arm64 kernel wrote it gives
# the amd64 binary's verdicts. Each image carries the SBOM of its binary's crates. The
# .deb of each architecture ships the very binary its image does, under the crate's version,
# and the dependency list cargo-auditable embedded is read back against Cargo.lock. Prints the
# image sizes.
#
# NODEMEDIC_ARCHES=amd64 (a quick local run; CI builds both) leaves out the arm64 release
# build, its image, its qemu-user run and its .deb; `cargo check` for the arm64 target stands
# in for them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
VERSION=$(nodemedic_version)
INDEX=localhost/nodemedic:$VERSION
tmp=$(mktemp -d)
ctrs=()
cleanup() {
    local c
    for c in "${ctrs[@]}"; do
        STORAGE_DRIVER=vfs buildah umount "$c" >/dev/null 2>&1
        STORAGE_DRIVER=vfs buildah rm "$c" >/dev/null 2>&1
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
case " $ARCHES " in *" amd64 "*) ;; *) echo "image test: NODEMEDIC_ARCHES='$ARCHES' has no amd64, the image that runs here" >&2; exit 1 ;; esac
arm64=false
case " $ARCHES " in *" arm64 "*) arm64=true ;; esac
ensure_packages qemu-user-static python3
id=$(bash deploy/container/build-image.sh --oci-archive "$tmp/nodemedic.tar")
echo "image index $INDEX, this machine's image id $id"
fail() { echo "image test: $*" >&2; exit 1; }
[ -s "$tmp/nodemedic.tar" ] || fail "no OCI archive written"

# The archive's index names both platforms, and holds each one's manifest.
mkdir "$tmp/oci"
tar -xf "$tmp/nodemedic.tar" -C "$tmp/oci"
platforms=$(/usr/bin/python3 - "$tmp/oci" <<'EOF'
import json, os, sys
root = sys.argv[1]
def blob(digest):
    algo, hexd = digest.split(":")
    with open(os.path.join(root, "blobs", algo, hexd)) as f:
        return json.load(f)
top = json.load(open(os.path.join(root, "index.json")))
entries = top["manifests"]
if len(entries) == 1 and entries[0]["mediaType"].endswith("image.index.v1+json"):
    entries = blob(entries[0]["digest"])["manifests"]
out = []
for m in entries:
    p = m.get("platform", {})
    blob(m["digest"])  # the image's manifest is in the archive
    out.append("%s/%s" % (p.get("os"), p.get("architecture")))
print(" ".join(sorted(out)))
EOF
)
want=$(for a in $ARCHES; do echo "linux/$a"; done | sort | tr '\n' ' ')
[ "$platforms " = "$want" ] || fail "the archive's index names '$platforms'"
echo "archive's index: $platforms"

amd=$(buildah from --pull=never "$INDEX-amd64")
ctrs+=("$amd")
for arch in $ARCHES; do
    c=$(buildah from --pull=never "$INDEX-$arch")
    ctrs+=("$c")
    mnt=$(buildah mount "$c")
    files=$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')
    [ "$files" = "./etc/nodemedic/nodemedic.toml ./usr/bin/nodemedic ./usr/share/doc/nodemedic/nodemedic.cdx.json " ] ||
        fail "unexpected files in the $arch image: $files"
    readelf -l "$mnt/usr/bin/nodemedic" | grep -q INTERP && fail "the $arch image's binary is not static"
    machine=$(readelf -h "$mnt/usr/bin/nodemedic" | sed -n 's/^ *Machine: *//p')
    case "$arch:$machine" in
        amd64:*X86-64* | arm64:AArch64) ;;
        *) fail "the $arch image's binary is for '$machine'" ;;
    esac
    got=$(buildah inspect --format '{{.OCIv1.OS}}/{{.OCIv1.Architecture}}' "$INDEX-$arch")
    [ "$got" = "linux/$arch" ] || fail "the $arch image says it is $got"
    user=$(buildah inspect --format '{{.OCIv1.Config.User}}' "$INDEX-$arch")
    [ "$user" = "65534:65534" ] || fail "the $arch image's user is '$user'"
    label=$(buildah inspect --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$INDEX-$arch")
    [ "$label" = "$VERSION" ] || fail "the $arch image's version label is '$label', its tag $VERSION"
    bytes=$(stat -c %s "$mnt/usr/bin/nodemedic")
    size=$(buildah images --noheading --format '{{.Size}}' "$INDEX-$arch")
    echo "$arch image size: $size (the static binary: $bytes bytes, stripped)"
    cp "$mnt/usr/bin/nodemedic" "$tmp/nodemedic-$arch"
    cp "$mnt/usr/share/doc/nodemedic/nodemedic.cdx.json" "$tmp/sbom-$arch.json"
done

out=$(buildah run "$amd" -- /usr/bin/nodemedic --version)
case "$out" in
    "nodemedic $VERSION (revision "*", target x86_64-unknown-linux-musl)") ;;
    *) fail "--version from the image printed '$out', want 'nodemedic $VERSION (revision …, rustc …, target x86_64-unknown-linux-musl)'" ;;
esac
echo "from the amd64 image: $out"
buildah run "$amd" -- /usr/bin/nodemedic --config /etc/nodemedic/nodemedic.toml config >/dev/null ||
    fail "the image's default configuration does not validate"

deb_amd=$(bash deploy/debian/build-deb.sh)
if ! $arm64; then
    # The arm64 build still compiles (the cross toolchain, ring's C, every crate for the
    # target): what the recorded run would find first.
    prepare_target arm64
    cargo check --locked --target "$TARGET" -p nodemedic
    echo "arm64: cargo check for $TARGET passed; NODEMEDIC_ARCHES=amd64 left out its release build, image, qemu-user run and .deb"
else
# The arm64 binary runs (qemu-user, one process emulated) and reads the tree an arm64 node
# would: the ENA's queues are one group, eth0; its collapse is found; event lines are not.
arm=(qemu-aarch64-static "$tmp/nodemedic-arm64")
out=$("${arm[@]}" --version)
case "$out" in
    "nodemedic $VERSION (revision "*", target aarch64-unknown-linux-musl)") ;;
    *) fail "--version of the arm64 binary printed '$out'" ;;
esac
printf '[probes]\nenabled = false\n' >"$tmp/check.toml"
arm_check() {
    local rc=0
    "${arm[@]}" check --config "$tmp/check.toml" --host-root "tests/fixtures/$1" \
        --interval 50ms --format json >"$tmp/$1.json" || rc=$?
    echo "$rc"
}
collapsed() {
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
print(" ".join(g["name"] for g in r["irq"]["groups"] if g["collapsed"]))
eth0 = [g for g in r["irq"]["groups"] if g["name"] == "eth0"]
assert eth0 and len(eth0[0]["irqs"]) == 8, eth0' "$1"
}
echo "the arm64 binary under qemu-user: $out"
# The same verdicts from both architectures' binaries, on the trees of arm64 nodes: Graviton's
# and those a real arm64 kernel wrote (Debian 13's 6.12 on QEMU's virt, GICv3 and its ITS).
# Each group's name, IRQs, CPUs and verdict, the tuning findings and the exit code must agree;
# a collapsed tree has a collapsed group, a healthy one none.
verdict() {
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
for g in sorted(r["irq"]["groups"], key=lambda g: g["name"]):
    print("group", g["name"], sorted(g["irqs"]), g.get("effective_cpus"), g["collapsed"])
for f in r.get("tuning", {}).get("findings", []):
    print("finding", f.get("rule"), f.get("subject"), f.get("severity"))' "$1"
}
for tree in aarch64-graviton aarch64-graviton-collapsed captured-arm64-virt captured-arm64-virt-collapsed; do
    rc_arm=$(arm_check "$tree")
    # Graviton's: the ENA's queues are eth0, collapsed on the collapsed tree only.
    case "$tree" in
        aarch64-graviton)
            [ "$rc_arm" = 0 ] || fail "arm64 check on $tree exited $rc_arm: $(head -c 2000 "$tmp/$tree.json")"
            [ -z "$(collapsed "$tmp/$tree.json")" ] || fail "arm64 check calls a healthy tree collapsed" ;;
        aarch64-graviton-collapsed)
            got=$(collapsed "$tmp/$tree.json")
            [ "$rc_arm" = 1 ] && [ "$got" = eth0 ] || fail "arm64 check on $tree: exit $rc_arm, collapsed '$got'" ;;
    esac
    rc_amd=0
    "$tmp/nodemedic-amd64" check --config "$tmp/check.toml" --host-root "tests/fixtures/$tree" \
        --interval 50ms --format json >"$tmp/$tree.amd64.json" || rc_amd=$?
    v_arm=$(verdict "$tmp/$tree.json") || fail "arm64 check on $tree: no verdict"
    v_amd=$(verdict "$tmp/$tree.amd64.json") || fail "amd64 check on $tree: no verdict"
    [ "$rc_arm" = "$rc_amd" ] && [ "$v_arm" = "$v_amd" ] ||
        fail "$tree: arm64 (exit $rc_arm) and amd64 (exit $rc_amd) disagree:$(diff <(echo "$v_amd") <(echo "$v_arm") | head -20)"
    n=$(grep -c ' True$' <<<"$v_arm" || true)
    case "$tree" in
        *-collapsed) [ "$n" -ge 1 ] || fail "$tree: no collapsed group" ;;
        *) [ "$n" = 0 ] || fail "$tree: $n collapsed groups on a healthy tree" ;;
    esac
    echo "$tree: both binaries exit $rc_arm, $(grep -c '^group' <<<"$v_arm") groups ($n collapsed), $(grep -c '^finding' <<<"$v_arm" || true) findings, the same"
done

# The arm64 package: nodemedic_VERSION_arm64.deb, from the binary the arm64 image carries (the
# same GNU build ID), with the amd64 package's files: unit, configuration, man page.
deb_arm=$(bash deploy/debian/build-deb.sh --arch arm64)
case "$(basename "$deb_arm")" in
    "nodemedic_${VERSION}"*_arm64.deb) ;;
    *) fail "the arm64 package is named $(basename "$deb_arm")" ;;
esac
[ "$(dpkg-deb -f "$deb_arm" Architecture)" = arm64 ] || fail "$deb_arm is not an arm64 package"
listing() { dpkg-deb -c "$1" | awk '{print $6}' | sort; }
[ "$(listing "$deb_arm")" = "$(listing "$deb_amd")" ] ||
    fail "the packages' files differ: $(diff <(listing "$deb_amd") <(listing "$deb_arm") | tr '\n' ' ')"
mkdir "$tmp/deb-arm" "$tmp/deb-amd"
dpkg-deb -x "$deb_arm" "$tmp/deb-arm"
dpkg-deb -x "$deb_amd" "$tmp/deb-amd"
# Every file but the binary is the same: the unit, the conffile, the man page, the docs.
same=0
while read -r f; do
    # The binary, and the SBOM of its crates, are each architecture's own.
    case "$f" in ./usr/bin/nodemedic | ./usr/share/doc/nodemedic/nodemedic.cdx.json) continue ;; esac
    [ -f "$tmp/deb-amd/$f" ] || continue
    cmp -s "$tmp/deb-arm/$f" "$tmp/deb-amd/$f" || fail "the packages' $f differ"
    same=$((same + 1))
done < <(listing "$deb_amd")
for f in nodemedic.service nodemedic.toml nodemedic.1.gz; do
    listing "$deb_arm" | grep -q "/$f\$" || fail "the arm64 package has no $f"
done
build_id() { readelf -n "$1" | sed -n 's/^ *Build ID: *//p'; }
id_deb=$(build_id "$tmp/deb-arm/usr/bin/nodemedic")
id_img=$(build_id "$tmp/nodemedic-arm64")
[ -n "$id_img" ] && [ "$id_deb" = "$id_img" ] ||
    fail "the arm64 package's binary (build ID '$id_deb') is not the image's ('$id_img')"
echo "arm64 package: $(basename "$deb_arm"), $(stat -c %s "$deb_arm") bytes, $same files as the amd64 package's, binary build ID $id_deb as the image's"
fi # arm64

# Each .deb (issue 36) ships the same files as its image, under the crate's version: the same
# /usr/bin/nodemedic and the same SBOM, byte for byte. Both are packed from one cargo output,
# so this checks the packaging (no second strip, no rebuild between the two), not that the
# build is reproducible: deploy/reproducible-build.sh builds twice and compares.
for arch in $ARCHES; do
    if [ "$arch" = arm64 ]; then deb=$deb_arm; else deb=$deb_amd; fi
    deb_version=$(dpkg-deb -f "$deb" Version)
    [ "$deb_version" = "$VERSION-1" ] || fail "$deb is version $deb_version, the crate $VERSION"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/nodemedic >"$tmp/deb-nodemedic-$arch"
    cmp -s "$tmp/deb-nodemedic-$arch" "$tmp/nodemedic-$arch" ||
        fail "the $arch .deb's /usr/bin/nodemedic ($(sha256sum <"$tmp/deb-nodemedic-$arch" | cut -c1-16)) is not the image's ($(sha256sum <"$tmp/nodemedic-$arch" | cut -c1-16))"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/nodemedic/nodemedic.cdx.json >"$tmp/deb-sbom-$arch.json"
    cmp -s "$tmp/deb-sbom-$arch.json" "$tmp/sbom-$arch.json" || fail "the $arch .deb's SBOM is not its image's"
    echo "$(basename "$deb"): version $deb_version, the same /usr/bin/nodemedic (sha256 $(sha256sum <"$tmp/deb-nodemedic-$arch" | cut -d' ' -f1)) and SBOM as the $arch image ships"
done

# What cargo-auditable embedded in the binary, read back by rust-audit-info (the reader of the
# cargo-auditable project; trivy, syft and `cargo audit bin` read the same section), against
# Cargo.lock and the SBOM.
audit_info=$(ensure_cargo_tool rust-audit-info 0.5.4)
/usr/bin/python3 tests/sbom_check.py --audit-info "$audit_info" --binary "$tmp/nodemedic-amd64" \
    --sbom "$tmp/sbom-amd64.json" --lock Cargo.lock --version "$VERSION"
