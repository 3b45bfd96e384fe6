#!/usr/bin/env bash
# nodemedic against node_exporter on a real arm64 kernel: one boot of the arm64 QEMU guest
# (tests/vm/run.sh with NODEMEDIC_VM_ARCH=arm64: Debian 13, kernel 6.12, virt with a GICv3 and
# its ITS, 4 vCPUs, all emulated by TCG), where bench/memory.py runs side by side, on the
# guest's real /proc and /sys:
# - the arm64 .deb's binary (the image's arm64 binary), the shipped configuration, the eBPF
#   probes enabled (they attach here, with fentry) and disabled;
# - node_exporter (the version bench/memory.py builds) built for arm64 from the Go module proxy (GOARCH=arm64), with the
#   collectors that read what nodemedic reads (interrupts, softirqs, stat, softnet).
# Every process takes one sample and one scrape per interval. Printed: memory.py's table (RSS,
# VmHWM, CPU per sample). The guest is emulated: only the ratios between the processes count.
#   bench/arm64-cost.sh [--seconds S] [NODEMEDIC_ARM64_DEB]
# (default: deploy/debian/build-deb.sh --arch arm64). Needs root; under the cluster lock when
# other guests may run: flock -o /tmp/nodemedic-cluster.lock bench/arm64-cost.sh
set -euo pipefail
ROOT=$(readlink -f "$(dirname "$0")/..")
SECONDS_PER_TREE=60
if [ "${1:-}" = --seconds ]; then
    SECONDS_PER_TREE=$2
    shift 2
fi
DEB=${1:-$(bash "$ROOT/deploy/debian/build-deb.sh" --arch arm64)}
[ "$(dpkg-deb -f "$DEB" Architecture)" = arm64 ] || { echo "arm64-cost: $DEB is not an arm64 package" >&2; exit 2; }
# shellcheck source=deploy/bootstrap.sh
. "$ROOT/deploy/bootstrap.sh"
ensure_go >&2
# `file` checks the cross-built binary below; a minimal Debian has no `file`.
ensure_packages file >&2
NE_VERSION=$(sed -n 's/^NODE_EXPORTER_VERSION = "\(.*\)"$/\1/p' "$ROOT/bench/memory.py")
NE=/var/cache/nodemedic-bench/node_exporter-$NE_VERSION-arm64
if [ ! -x "$NE" ]; then
    echo "building node_exporter $NE_VERSION for arm64 (go install, GOARCH=arm64)" >&2
    gopath=$(mktemp -d)
    GOARCH=arm64 CGO_ENABLED=0 GOPATH=$gopath GOMODCACHE=$(go env GOMODCACHE) \
        go install "github.com/prometheus/node_exporter@$NE_VERSION"
    mkdir -p "$(dirname "$NE")"
    mv "$gopath/bin/linux_arm64/node_exporter" "$NE"
    chmod -R u+w "$gopath"
    rm -rf "$gopath"
fi
file -b "$NE" | grep -q 'ARM aarch64' || { echo "arm64-cost: $NE is not an arm64 binary: $(file -b "$NE")" >&2; exit 1; }
DIR=$(mktemp -d /tmp/nodemedic-arm64-cost.XXXXXX)
dpkg-deb -x "$DEB" "$DIR/deb"
cp "$DIR/deb/usr/bin/nodemedic" "$DIR/nodemedic"
rm -rf "$DIR/deb"
cp "$NE" "$DIR/node_exporter"
# memory.py finds the shipped configuration at ../deploy/nodemedic.toml from its own directory.
mkdir -p "$DIR/repo/bench" "$DIR/repo/deploy"
cp "$ROOT/bench/memory.py" "$ROOT/bench/procstat.py" "$DIR/repo/bench/"
cp "$ROOT/deploy/nodemedic.toml" "$DIR/repo/deploy/"
cat >"$DIR/test.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
echo "guest: \$(uname -r) \$(uname -m), \$(nproc) vCPUs (QEMU TCG, emulated), node_exporter \$(/mnt/host/node_exporter --version 2>&1 | head -n1)"
# Off the 9p share, as a package installs them: a binary run from 9p pages in over it.
install -m 0755 /mnt/host/nodemedic /usr/local/bin/nodemedic
install -m 0755 /mnt/host/node_exporter /usr/local/bin/node_exporter
cp -r /mnt/host/repo /tmp/repo
python3 /tmp/repo/bench/memory.py --seconds $SECONDS_PER_TREE --trees real \\
    --node-exporter /usr/local/bin/node_exporter nodemedic=/usr/local/bin/nodemedic
EOF
start=$(date +%s)
rc=0
NODEMEDIC_VM_ARCH=arm64 bash "$ROOT/tests/vm/run.sh" "$DIR" || rc=$?
cat "$DIR/stdout" 2>/dev/null || true
[ "$rc" -eq 0 ] || tail -n 30 "$DIR/stderr" >&2 2>/dev/null || true
echo "[arm64-cost] exit $rc after $(($(date +%s) - start))s; files in $DIR" >&2
exit "$rc"
