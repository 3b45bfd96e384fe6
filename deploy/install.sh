#!/usr/bin/env bash
# Builds and installs nodemedic on a Debian/Ubuntu machine (as root), then runs it with the
# default configuration: as a systemd service when systemd is running, else in the foreground.
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

cargo build --release --locked -p nodemedic
install -m 0755 target/release/nodemedic /usr/local/bin/nodemedic
install -d /etc/nodemedic /usr/local/share/doc/nodemedic
[ -f /etc/nodemedic/nodemedic.toml ] || install -m 0644 deploy/nodemedic.toml /etc/nodemedic/nodemedic.toml
install -m 0644 README.md /usr/local/share/doc/nodemedic/README.md
nodemedic --config /etc/nodemedic/nodemedic.toml config >/dev/null
echo "installed /usr/local/bin/nodemedic ($(nodemedic --version)), config /etc/nodemedic/nodemedic.toml"

[ "$run" = 1 ] || exit 0
if [ -d /run/systemd/system ]; then
    install -m 0644 deploy/nodemedic.service /etc/systemd/system/nodemedic.service
    systemctl daemon-reload
    systemctl enable --now nodemedic.service
    systemctl --no-pager status nodemedic.service || true
    echo "nodemedic is running: curl -s localhost:9847/metrics; nodemedic check"
else
    echo "no systemd: running nodemedic in the foreground (Ctrl-C stops it)"
    exec nodemedic run --config /etc/nodemedic/nodemedic.toml
fi
