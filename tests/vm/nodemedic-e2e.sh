#!/usr/bin/env bash
# Host side of the end-to-end test: a real kernel, systemd, D-Bus and irqbalance in a QEMU VM
# (tests/vm/run.sh), nodemedic installed from its Debian package (deploy/debian/build-deb.sh),
# and its eBPF probes attached to that kernel (tests/vm/probes-guest.sh), after an upgrade from
# the previous release's .deb and a downgrade back (tests/vm/upgrade-guest.sh).
#   tests/vm/nodemedic-e2e.sh [NODEMEDIC_DEB]   (default: package the release build, the binary
#   the image ships; tests/run-all.sh has built it for the image by then)
# The previous release's .deb: NODEMEDIC_PREVIOUS_DEB, or tests/previous-version.sh's (built
# once and cached).
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(readlink -f "$HERE/../..")
DEB=${1:-}
if [ -z "$DEB" ]; then
    DEB=$(bash "$ROOT/deploy/debian/build-deb.sh")
fi
[ -f "$DEB" ] || { echo "no nodemedic package at $DEB" >&2; exit 2; }
PREV_DEB=${NODEMEDIC_PREVIOUS_DEB:-$(bash "$ROOT/tests/previous-version.sh" deb)}
bash "$HERE/build-image.sh"
DIR=$(mktemp -d /tmp/nodemedic-vm-e2e.XXXXXX)
cp "$DEB" "$DIR/nodemedic.deb"
cp "$PREV_DEB" "$DIR/nodemedic-previous.deb"
cp "$HERE/nodemedic.toml" "$DIR/"
cp "$HERE/nodemedic-guest.sh" "$DIR/test.sh"
cp "$HERE/upgrade-guest.sh" "$HERE/probes-guest.sh" "$HERE/tuning-guest.sh" "$DIR/"
# The probe test's traffic generator, static: the minbase guest has no compiler.
cc -O2 -static -Wall -Werror -o "$DIR/perfgen" "$HERE/perfgen.c"
start=$(date +%s)
set +e
bash "$HERE/run.sh" "$DIR"
rc=$?
set -e
cat "$DIR/stdout" 2>/dev/null || true
[ -s "$DIR/stderr" ] && { echo "----- guest stderr -----"; tail -n 50 "$DIR/stderr"; }
echo "[vm-e2e] exit $rc after $(($(date +%s) - start))s; files in $DIR"
[ "$rc" -eq 0 ] && rm -f "$DIR/nodemedic.deb" "$DIR/nodemedic-previous.deb"
exit "$rc"
