#!/usr/bin/env bash
# Builds one commit twice, in two fresh source trees at different paths (each with its own
# empty target directory), and compares what ships: the static binaries of both architectures,
# the .deb, and the image as users pin it (the index digest, each architecture's manifest and
# config digests, and its layers). Exits 1 if any differs. Records: tests/recorded-runs.toml.
#
#   deploy/reproducible-build.sh [COMMIT]        (default HEAD; as root, like the builds)
#
# Each tree is built by deploy/build-commit.sh (`git archive COMMIT` unpacked, without .git, so
# the revision comes from NODEMEDIC_REVISION and nothing but the commit's files is built; its
# deploy/debian/build-deb.sh and deploy/container/build-image.sh run as they are), with
# SOURCE_DATE_EPOCH the commit's time. Two cold release builds: about 2 x 10 minutes on 2
# cores. Set KEEP=1 to keep the trees.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
COMMIT=$(git -C "$ROOT" rev-parse "${1:-HEAD}^{commit}")
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git -C "$ROOT" show -s --format=%ct "$COMMIT")

WORK=$(mktemp -d /tmp/nodemedic-repro.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
# Different lengths and depths, so that a path left in an artifact shows.
TREES=("$WORK/a" "$WORK/second/build-tree-b")

build() {
    local tree=$1 start
    start=$(date +%s)
    bash "$ROOT/deploy/build-commit.sh" "$COMMIT" "$tree"
    echo "built $tree in $(($(date +%s) - start))s" >&2
}

# What a user pins, from the OCI archive: the index's digest (index.json names the image index,
# build-image.sh's manifest list), and for each platform its manifest's digest, its config's
# and its layers', one "WHAT PLATFORM DIGEST" a line.
digests() {
    local tar=$1 dir
    dir=$(mktemp -d -p "$WORK")
    tar -x -C "$dir" -f "$tar"
    python3 - "$dir" <<'EOF'
import json, os, sys

d = sys.argv[1]


def blob(digest):
    algo, hexdigest = digest.split(":")
    with open(os.path.join(d, "blobs", algo, hexdigest)) as f:
        return json.load(f)


def walk(entry, platform):
    doc = blob(entry["digest"])
    if "manifests" in doc:  # an image index: one entry per platform
        print("index", platform, entry["digest"])
        for m in doc["manifests"]:
            p = m.get("platform", {})
            walk(m, f"{p.get('os', '?')}/{p.get('architecture', '?')}")
    else:
        print("manifest", platform, entry["digest"])
        print("config", platform, doc["config"]["digest"])
        for layer in doc["layers"]:
            print("layer", platform, layer["digest"])


with open(os.path.join(d, "index.json")) as f:
    for m in json.load(f)["manifests"]:
        walk(m, "-")
EOF
}

for tree in "${TREES[@]}"; do
    build "$tree"
done

fail=0
# compare WHAT A B: the two files' sha256; a difference fails the run.
compare() {
    local what=$1 a=$2 b=$3 sa sb
    sa=$(sha256sum <"$a" | cut -d' ' -f1)
    sb=$(sha256sum <"$b" | cut -d' ' -f1)
    if [ "$sa" = "$sb" ]; then
        echo "same      $what  sha256 $sa"
    else
        echo "DIFFERENT $what  $sa != $sb"
        fail=1
    fi
}
deb_of() { cat "$1/deb.path"; }
A=${TREES[0]}
B=${TREES[1]}
echo "commit $COMMIT, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH, trees $A and $B"
compare "static binary, amd64" "$A/target/x86_64-unknown-linux-musl/release/nodemedic" \
    "$B/target/x86_64-unknown-linux-musl/release/nodemedic"
compare "static binary, arm64" "$A/target/aarch64-unknown-linux-musl/release/nodemedic" \
    "$B/target/aarch64-unknown-linux-musl/release/nodemedic"
compare ".deb ($(basename "$(deb_of "$A")"))" "$(deb_of "$A")" "$(deb_of "$B")"
da=$(digests "$A/image.tar")
db=$(digests "$B/image.tar")
[ -n "$da" ] || { echo "no digests read from $A/image.tar"; fail=1; }
# Each digest a user can pin, line by line: the index, then per platform its manifest, config
# and layers.
while read -r what platform digest; do
    if grep -qxF "$what $platform $digest" <<<"$db"; then
        echo "same      image $what $platform  $digest"
    else
        other=$(awk -v w="$what" -v p="$platform" '$1 == w && $2 == p {print $3}' <<<"$db" | paste -sd' ' -)
        echo "DIFFERENT image $what $platform  $digest != ${other:-none}"
        fail=1
    fi
done <<<"$da"
[ "$(wc -l <<<"$da")" = "$(wc -l <<<"$db")" ] || { echo "DIFFERENT image: $(wc -l <<<"$da") digests against $(wc -l <<<"$db")"; fail=1; }
# The archive file itself: build-image.sh writes its tar headers from the commit's time.
compare "image (whole OCI archive)" "$A/image.tar" "$B/image.tar"
exit "$fail"
