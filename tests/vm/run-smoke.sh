#!/usr/bin/env bash
# Host-side wrapper: boots the VM with smoke-test.sh as the guest test and prints its output.
# Keeps the share in ${1:-a fresh temp dir} (console.log, journal.log, irqbalance-debug.log).
set -euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
DIR=${1:-$(mktemp -d /tmp/nodemedic-vm-smoke.XXXXXX)}
mkdir -p "$DIR"
cp "$HERE/smoke-test.sh" "$DIR/test.sh"
start=$(date +%s)
set +e
bash "$HERE/run.sh" "$DIR"
rc=$?
set -e
cat "$DIR/stdout" 2>/dev/null || true
if [ -s "$DIR/stderr" ]; then
    echo "----- guest stderr -----"
    cat "$DIR/stderr"
fi
echo "[vm-smoke] exit $rc, run.sh total $(($(date +%s) - start))s, files in $DIR"
exit "$rc"
