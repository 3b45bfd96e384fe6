#!/usr/bin/env bash
# Builds nodemedic's Debian package on a Debian/Ubuntu machine (as root), installs it, and
# runs it with the default configuration: as a systemd service when systemd is running
# (`systemctl enable --now nodemedic`), else in the foreground.
#   deploy/install.sh            install and run
#   deploy/install.sh --no-run   install only
set -euo pipefail
cd "$(dirname "$0")/.."

run=1
[ "${1:-}" = "--no-run" ] && run=0

# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
# clang + libbpf-dev: build.rs compiles the eBPF probes (ebpf/*.bpf.c) from source.
ensure_packages build-essential pkg-config ca-certificates curl clang libbpf-dev
ensure_rust

deb=$(bash deploy/debian/build-deb.sh)
dpkg -i "$deb"
nodemedic --config /etc/nodemedic/nodemedic.toml config >/dev/null
echo "installed $deb: /usr/bin/nodemedic ($(nodemedic --version)), config /etc/nodemedic/nodemedic.toml, man nodemedic"

[ "$run" = 1 ] || exit 0
if [ -d /run/systemd/system ]; then
    systemctl enable --now nodemedic.service
    systemctl --no-pager status nodemedic.service || true
    echo "nodemedic is running: curl -s localhost:9847/metrics; nodemedic check"
else
    echo "no systemd: running nodemedic in the foreground (Ctrl-C stops it)"
    exec nodemedic run --config /etc/nodemedic/nodemedic.toml
fi
