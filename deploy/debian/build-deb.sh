#!/usr/bin/env bash
# Builds the Debian package with cargo-deb (installed from crates.io into a cache when
# missing): the binary (the image's: static, musl, so the package needs no C library of a
# given version; BENCHMARKS.md "One binary for the package and the image" says why), the
# systemd unit (deploy/systemd), the commented default configuration as a conffile in
# /etc/nodemedic/, and a man page generated from the clap definitions. Prints the .deb's path
# on stdout.
#   deploy/debian/build-deb.sh                release build, amd64
#   deploy/debian/build-deb.sh --debug        package the debug build
#   deploy/debian/build-deb.sh --arch arm64   nodemedic_VERSION_arm64.deb: the arm64 binary the
#                                             image's linux/arm64 variant carries, cross-built
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=release
arch=amd64
while [ $# -gt 0 ]; do
    case "$1" in
        --debug) profile=debug; shift ;;
        --arch) arch=${2:-}; shift 2 ;;
        *) echo "usage: $0 [--debug] [--arch amd64|arm64]" >&2; exit 2 ;;
    esac
done

# What the build needs (build.rs compiles the eBPF probes with clang against libbpf's headers);
# stdout is the package's path only.
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
ensure_packages build-essential pkg-config ca-certificates curl clang libbpf-dev >&2
ensure_rust >&2

# cargo-deb, installed once per machine; this build holds its cache's lock shared until it ends.
ensure_cargo_deb

target=$(musl_target "$arch")
BIN=$(build_static "$profile" "$arch")
mkdir -p target/man
# The man page is the binary's own (`nodemedic man`); an arm64 binary runs here under Debian's
# qemu-user, which also proves it starts.
run=()
if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
    ensure_packages qemu-user-static >&2
    run=(qemu-aarch64-static)
fi
"${run[@]}" "$BIN" man | gzip -9n >target/man/nodemedic.1.gz
# The SBOM the package installs in /usr/share/doc/nodemedic/ (the asset in Cargo.toml), of
# this architecture's binary.
build_sbom "$arch" >/dev/null
# The archive's dates are the commit's (reproducible builds; deploy/reproducible-build.sh).
SOURCE_DATE_EPOCH=$(source_date_epoch)
export SOURCE_DATE_EPOCH

# cargo-deb takes the binary from target/$target/ for the asset target/release/nodemedic and
# names the package's architecture after the target (arm64 for aarch64).
args=(--no-build -p nodemedic --target "$target" --output target/debian/)
# --no-strip: build_static's release binary is stripped already, and the package ships that
# very file, the image's (tests/image.sh compares them).
if [ "$profile" = debug ]; then args+=(--profile dev); else args+=(--no-strip); fi
"$CARGO_DEB" "${args[@]}" | tail -n 1
