#!/usr/bin/env bash
# Builds one commit's .deb and image the way a release is built: the commit unpacked with
# `git archive` into TREE (no .git, so NODEMEDIC_REVISION names the commit, as for any source
# tarball), where that commit's own deploy/debian/build-deb.sh and then its
# deploy/container/build-image.sh --oci-archive run as they are, with an empty target directory.
#
#   deploy/build-commit.sh COMMIT TREE
#
# Leaves TREE/deb.path (the .deb's path, absolute), TREE/image.tar and TREE/build.log; on a
# failed build prints the log's last 40 lines and exits 1. Used by deploy/reproducible-build.sh
# (twice, at two paths) and tests/previous-version.sh (the previous release, once per machine).
# SOURCE_DATE_EPOCH, when set, is passed on.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 COMMIT TREE" >&2
    exit 2
fi
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
COMMIT=$(git -C "$ROOT" rev-parse --verify "$1^{commit}")
TREE=$2
mkdir -p "$TREE"
TREE=$(readlink -f "$TREE")
git -C "$ROOT" archive "$COMMIT" | tar -x -C "$TREE"
(
    cd "$TREE"
    unset CARGO_TARGET_DIR
    export NODEMEDIC_REVISION=$COMMIT
    bash deploy/debian/build-deb.sh >"$TREE/deb.out"
    bash deploy/container/build-image.sh --oci-archive "$TREE/image.tar" >/dev/null
) >"$TREE/build.log" 2>&1 || {
    tail -n 40 "$TREE/build.log" >&2
    echo "build-commit.sh: the build of $COMMIT in $TREE failed (log: $TREE/build.log)" >&2
    exit 1
}
# build-deb.sh prints the .deb's path last, relative to the tree or absolute.
deb=$(tail -n 1 "$TREE/deb.out")
case "$deb" in /*) ;; *) deb=$TREE/$deb ;; esac
[ -f "$deb" ] || {
    echo "build-commit.sh: build-deb.sh named $deb, which does not exist" >&2
    exit 1
}
echo "$deb" >"$TREE/deb.path"
