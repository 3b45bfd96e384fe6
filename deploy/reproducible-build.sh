#!/usr/bin/env bash
# Builds one commit twice, in two fresh source trees at different paths (each with its own
# empty target directory), and compares what ships: the static binary, the .deb and the image's
# layer. Exits 1 if any differs. docs/release.md records a run.
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

# The image's layers, by digest, each with its platform, from the OCI archive: index.json names
# the image index (build-image.sh's manifest list), which names one manifest per architecture.
layers() {
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
        for m in doc["manifests"]:
            p = m.get("platform", {})
            walk(m, f"{p.get('os', '?')}/{p.get('architecture', '?')}")
    else:
        for layer in doc["layers"]:
            print(platform, layer["digest"])


with open(os.path.join(d, "index.json")) as f:
    for m in json.load(f)["manifests"]:
        walk(m, "?")
EOF
}

for tree in "${TREES[@]}"; do
    build "$tree"
done

fail=0
# compare WHAT A B [info]: the two files' sha256; a difference fails the run unless "info".
compare() {
    local what=$1 a=$2 b=$3 sa sb
    sa=$(sha256sum <"$a" | cut -d' ' -f1)
    sb=$(sha256sum <"$b" | cut -d' ' -f1)
    if [ "$sa" = "$sb" ]; then
        echo "same      $what  sha256 $sa"
    else
        echo "DIFFERENT $what  $sa != $sb"
        [ "${4:-}" = info ] || fail=1
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
la=$(layers "$A/image.tar")
lb=$(layers "$B/image.tar")
if [ -n "$la" ] && [ "$la" = "$lb" ]; then
    echo "same      image layer  $la"
else
    echo "DIFFERENT image layers  $la != $lb"
    fail=1
fi
# The whole archive (manifest, config, the tar's own headers) is reported, not required.
compare "image (whole OCI archive)" "$A/image.tar" "$B/image.tar" info
exit "$fail"
