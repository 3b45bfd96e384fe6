#!/usr/bin/env bash
# The previous release's .deb and image, for the upgrade tests (tests/vm/upgrade-guest.sh,
# check 11 of tests/k8s/node_e2e.py): built once by that commit's own scripts and cached.
#
#   tests/previous-version.sh deb        path of the previous release's amd64 .deb
#   tests/previous-version.sh image      its image as an OCI archive (localhost/nodemedic:VERSION)
#   tests/previous-version.sh chart DIR  its Helm chart unpacked as DIR/deploy/helm/nodemedic, with
#                                        the rules its files/ link to, and its dashboard
#   tests/previous-version.sh version    its version; `commit`: its commit
#
# The previous release is the version after the first heading of CHANGELOG.md, at the commit
# its heading records, "(commit …)" (as crates/nodemedic/tests/series_upgrade.rs reads it).
# deploy/build-commit.sh unpacks that commit with `git archive` into a temporary tree (no .git:
# NODEMEDIC_REVISION names it, for a version whose build asks), where its
# deploy/debian/build-deb.sh and then its deploy/container/build-image.sh --oci-archive run as
# they are: one release build of the static binary (at opt-level 0, below), which the .deb and
# the image share. The two artifacts, the build's log and a stamp go to
# ${NODEMEDIC_PREVIOUS_CACHE:-/var/cache/nodemedic-previous}/COMMIT/; the tree is removed.
# Later runs, from any checkout, take the cache: the build is paid once per machine (about 10
# minutes on 2 cores). Needs the commit in this checkout's history (a shallow clone does not
# have it: the script says so and fails).
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
cd "$ROOT"
usage() {
    echo "usage: $0 deb|image|version|commit | chart DIR" >&2
    exit 2
}
what=${1:-}
case "$what" in
deb | image | version | commit) [ $# -eq 1 ] || usage ;;
chart) [ $# -eq 2 ] || usage ;;
*) usage ;;
esac

heading=$(grep -m2 '^## \[' CHANGELOG.md | sed -n 2p)
VERSION=$(sed -n 's/^## \[\([^]]*\)\].*/\1/p' <<<"$heading")
short=$(sed -n 's/.*(commit \([0-9a-f]\{7,40\}\)).*/\1/p' <<<"$heading")
if [ -z "$VERSION" ] || [ -z "$short" ]; then
    echo "CHANGELOG.md's second version heading records no (commit …): '$heading'" >&2
    exit 1
fi
COMMIT=$(git rev-parse --verify --quiet "$short^{commit}") || {
    echo "commit $short (nodemedic $VERSION, CHANGELOG.md) is not in this checkout's history" \
        "(a shallow clone? git fetch --unshallow): the upgrade tests need it" >&2
    exit 1
}
case "$what" in
version) echo "$VERSION"; exit 0 ;;
commit) echo "$COMMIT"; exit 0 ;;
chart)
    mkdir -p "$2"
    # The chart's files/ are links to deploy/prometheus's rule files.
    git archive "$COMMIT" deploy/helm deploy/prometheus deploy/grafana | tar -x -C "$2"
    echo "$2/deploy/helm/nodemedic"
    exit 0
    ;;
esac

CACHE=${NODEMEDIC_PREVIOUS_CACHE:-/var/cache/nodemedic-previous}/$COMMIT
DEB=$CACHE/nodemedic_${VERSION}-1_amd64.deb
IMAGE=$CACHE/nodemedic-image.tar
# The profile the previous release is built in, recorded in the stamp: a cache built in another
# is built again. Unoptimized, without LTO: 300 CPU-s for its .deb and image (171 s alone on
# the 2-core CI machine), against 550 at opt-level 1 (294 s), measured one after the other with
# an empty NODEMEDIC_PREVIOUS_CACHE and `/usr/bin/time -v`. The binary starts and answers in about 0.27 s against 0.10 s, with 2 MB of
# anonymous memory against 1.3 (docs/ci.md).
PROFILE="release, opt-level 0, no LTO, 16 codegen units"
mkdir -p "$CACHE"
# Exclusive while it is checked and built, as the other caches (deploy/bootstrap.sh): two
# runs finding it missing build it once; the stamp is written last, so a build that failed
# halfway is built again.
(
    flock 9
    if [ -f "$CACHE/stamp" ] && [ -f "$DEB" ] && [ -f "$IMAGE" ] &&
        grep -qxF "profile $PROFILE" "$CACHE/stamp"; then
        exit 0
    fi
    start=$(date +%s)
    src=$(mktemp -d "${TMPDIR:-/var/tmp}/nodemedic-previous.XXXXXX")
    trap 'rm -rf "$src"' EXIT
    echo "[previous] building nodemedic $VERSION ($COMMIT) with its own scripts in $src" >&2
    # cargo-deb as this checkout installs it (deploy/bootstrap.sh: unoptimized, a fraction of
    # the CPU): the old build-deb.sh finds the same version in the shared cache and uses it, where
    # it would otherwise install it itself in cargo-deb's release profile.
    (. deploy/bootstrap.sh && ensure_rust >&2 && ensure_cargo_deb) || exit 1
    # Unoptimized (PROFILE, above): the same code and package, for a test of the upgrade path,
    # not of the old binary's speed.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 bash deploy/build-commit.sh "$COMMIT" "$src" || {
        cp "$src/build.log" "$CACHE/build.log" 2>/dev/null || true
        echo "[previous] the build of $VERSION ($COMMIT) failed" >&2
        exit 1
    }
    cp "$src/build.log" "$CACHE/build.log"
    built=$(cat "$src/deb.path")
    # cargo-deb's Debian revision: VERSION-1.
    [ "$(dpkg-deb -f "$built" Version)" = "$VERSION-1" ] || {
        echo "[previous] $built is version $(dpkg-deb -f "$built" Version), not $VERSION-1" >&2
        exit 1
    }
    install -m 0644 "$built" "$DEB"
    install -m 0644 "$src/image.tar" "$IMAGE"
    printf 'commit %s\nversion %s\nprofile %s\nbuilt %s in %ss\n' "$COMMIT" "$VERSION" "$PROFILE" \
        "$(date -u +%FT%TZ)" "$(($(date +%s) - start))" >"$CACHE/stamp"
    echo "[previous] nodemedic $VERSION built and cached in $(($(date +%s) - start))s ($CACHE)" >&2
) 9>"$CACHE/.lock"
case "$what" in
deb) echo "$DEB" ;;
image) echo "$IMAGE" ;;
esac
