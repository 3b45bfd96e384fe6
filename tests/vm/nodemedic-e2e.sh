#!/usr/bin/env bash
# Host side of the end-to-end remediation test: a real kernel, systemd, D-Bus and irqbalance
# in a QEMU VM (tests/vm/run.sh), nodemedic installed with deploy/nodemedic.service.
#   tests/vm/nodemedic-e2e.sh [NODEMEDIC_BINARY]   (default: target/debug/nodemedic)
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(readlink -f "$HERE/../..")
BIN=${1:-$ROOT/target/debug/nodemedic}
[ -x "$BIN" ] || { echo "no nodemedic binary at $BIN (cargo build first)" >&2; exit 2; }
bash "$HERE/build-image.sh"
DIR=$(mktemp -d /tmp/nodemedic-vm-e2e.XXXXXX)
cp "$BIN" "$DIR/nodemedic"
cp "$ROOT/deploy/nodemedic.service" "$HERE/nodemedic.toml" "$DIR/"
cp "$HERE/nodemedic-guest.sh" "$DIR/test.sh"
start=$(date +%s)
set +e
bash "$HERE/run.sh" "$DIR"
rc=$?
set -e
cat "$DIR/stdout" 2>/dev/null || true
[ -s "$DIR/stderr" ] && { echo "----- guest stderr -----"; tail -n 50 "$DIR/stderr"; }
echo "[vm-e2e] exit $rc after $(($(date +%s) - start))s; files in $DIR"
[ "$rc" -eq 0 ] && rm -f "$DIR/nodemedic"
exit "$rc"
