#!/usr/bin/env bash
# Builds the Debian package with cargo-deb (installed from crates.io into a cache when
# missing): the binary, the systemd unit (deploy/systemd), the commented default
# configuration as a conffile in /etc/nodemedic/, and a man page generated from the clap
# definitions. Prints the .deb's path on stdout.
#   deploy/debian/build-deb.sh            release build
#   deploy/debian/build-deb.sh --debug    package the debug build (tests: no release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=release
[ "${1:-}" = "--debug" ] && profile=debug

CARGO_DEB_ROOT=${NODEMEDIC_CARGO_DEB_ROOT:-/var/cache/nodemedic-cargo-deb}
CARGO_DEB_VERSION=3.8.0
if ! "$CARGO_DEB_ROOT/bin/cargo-deb" --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "[build-deb] installing cargo-deb $CARGO_DEB_VERSION into $CARGO_DEB_ROOT" >&2
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --root "$CARGO_DEB_ROOT" >&2
fi

if [ "$profile" = release ]; then
    cargo build --release --locked -p nodemedic >&2
else
    cargo build --locked -p nodemedic >&2
fi
mkdir -p target/man
"target/$profile/nodemedic" man | gzip -9n >target/man/nodemedic.1.gz

args=(--no-build -p nodemedic --output target/debian/)
[ "$profile" = debug ] && args+=(--profile dev)
"$CARGO_DEB_ROOT/bin/cargo-deb" "${args[@]}" | tail -n 1
