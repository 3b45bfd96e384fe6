# Shared by deploy/install.sh and tests/run-all.sh (sourced, not run): installs Debian
# packages that are missing, and a Rust toolchain when cargo is missing.

export DEBIAN_FRONTEND=noninteractive

# section TEXT: a step's header for a long run's log (.ci/run, tests/run-all.sh), with when it
# began: the clock, and seconds since the script that sourced this file started (bash's
# SECONDS), so a slow run's log shows where the time went.
# NODEMEDIC_CI_START (.ci/run's start, epoch seconds) adds the time since then: the stamps of
# tests/run-all.sh count from its own start, 227 s into the cold CI of adeda8b, and a
# projection of the whole run from them once came out that much short (docs/ci.md).
section() {
    echo "== $* [$(date +%T), ${SECONDS}s${NODEMEDIC_CI_START:+; $(($(date +%s) - NODEMEDIC_CI_START))s into .ci/run}]"
}

# ensure_packages [--no-start] PKG...: deploy/apt.sh, the one way this repository's scripts
# install from Debian.
# shellcheck source=deploy/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

# ensure_rust: Debian 12's rustc (1.63) is too old; use rustup's stable toolchain.
ensure_rust() {
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
    if ! command -v cargo >/dev/null 2>&1; then
        ensure_packages curl ca-certificates
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
    # The minimal profile has neither; CI's quality gates need both.
    if command -v rustup >/dev/null 2>&1; then
        local c
        for c in rustfmt clippy; do
            rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
        done
    fi
}

# nodemedic_version: the workspace's version (Cargo.toml's [workspace.package]), which the
# image is tagged with, the .deb carries and the chart's appVersion must equal
# (crates/nodemedic/tests/versions.rs).
nodemedic_version() {
    sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "${1:-.}/Cargo.toml"
}

# The cargo tools the release scripts run (cargo-deny, cargo-auditable, cargo-cyclonedx,
# rust-audit-info), installed from crates.io once into a cache shared by every checkout.
NODEMEDIC_TOOLS_ROOT=${NODEMEDIC_TOOLS_ROOT:-/var/cache/nodemedic-tools}

# ensure_cargo_tool CRATE VERSION [BINARY]: installs CRATE at VERSION (--locked) into
# $NODEMEDIC_TOOLS_ROOT unless cargo's record of that root has it, under a flock so that two
# checkouts finding it missing install it once; prints the path of BINARY (default CRATE).
# The install's output goes to stderr with the seconds it took (CI's cold budget counts them).
# --debug: these tools check and describe the build, none of them is in what ships, and
# unoptimized they build in a third of the CPU (cargo-deny 0.20.2: 101 CPU-s against 264 in its
# release profile, docs/ci.md) while the check they run still takes seconds.
ensure_cargo_tool() {
    local crate=$1 version=$2 bin=${3:-$1} start
    ensure_rust >&2
    mkdir -p "$NODEMEDIC_TOOLS_ROOT"
    (
        flock 7
        if ! { cargo install --list --root "$NODEMEDIC_TOOLS_ROOT" | grep -qxF "$crate v$version:" &&
            [ -x "$NODEMEDIC_TOOLS_ROOT/bin/$bin" ]; }; then
            start=$(date +%s)
            echo "[tools] installing $crate $version into $NODEMEDIC_TOOLS_ROOT" >&2
            cargo install --debug --locked "$crate" --version "$version" --root "$NODEMEDIC_TOOLS_ROOT" >&2
            echo "[tools] $crate $version installed in $(($(date +%s) - start))s" >&2
        fi
    ) 7>"$NODEMEDIC_TOOLS_ROOT/.lock" || return 1
    echo "$NODEMEDIC_TOOLS_ROOT/bin/$bin"
}

CARGO_DEB_ROOT=${NODEMEDIC_CARGO_DEB_ROOT:-/var/cache/nodemedic-cargo-deb}
CARGO_DEB_VERSION=3.8.0
CARGO_DEB=$CARGO_DEB_ROOT/bin/cargo-deb
# ensure_cargo_deb: installs cargo-deb $CARGO_DEB_VERSION into $CARGO_DEB_ROOT unless it is there,
# and leaves the calling shell holding the cache's lock shared on fd 9 (until it exits).
# The cache is shared by every build on the machine (the VM test, the probe benchmark, other
# worktrees, the previous release's build), under a flock like the other caches: exclusive
# while it is checked and installed, so that two builds finding it missing install it once;
# shared from then on, so that builds run it side by side and none reinstalls it under another.
# --debug, as ensure_cargo_tool's tools, for the same reason: it packs what was built and ships
# in nothing. Its manifest keeps the compressors (xz2, lzma-sys, zopfli) at opt-level 2 in the
# dev profile, so packing stays fast; its release profile cost 358 s of a background lane in the
# cold CI of adeda8b (docs/ci.md).
ensure_cargo_deb() {
    local start
    mkdir -p "$CARGO_DEB_ROOT"
    exec 9>"$CARGO_DEB_ROOT/.lock"
    flock 9
    if ! "$CARGO_DEB" --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
        start=$(date +%s)
        echo "[build-deb] installing cargo-deb $CARGO_DEB_VERSION into $CARGO_DEB_ROOT" >&2
        CARGO_PROFILE_DEV_DEBUG=0 cargo install --debug cargo-deb --version "$CARGO_DEB_VERSION" \
            --locked --root "$CARGO_DEB_ROOT" >&2 || return 1
        echo "[build-deb] cargo-deb $CARGO_DEB_VERSION installed in $(($(date +%s) - start))s" >&2
    fi
    flock -s 9
}

# source_date_epoch: the time every release artifact carries (SOURCE_DATE_EPOCH, as Debian's
# reproducible builds use it): the given one, else the commit's, so two builds of one commit
# write the same timestamps.
source_date_epoch() {
    if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        echo "$SOURCE_DATE_EPOCH"
    else
        git log -1 --format=%ct 2>/dev/null || echo 0
    fi
}

# build_sbom [amd64|arm64]: writes the CycloneDX SBOM of that architecture's static binary's
# crates (default amd64) to target/sbom/nodemedic.cdx.json (deploy/sbom.py, with CycloneDX's Python library from PyPI in a
# virtualenv cached beside the cargo tools) and prints its path. The .deb and the image ship it.
CYCLONEDX_LIB_VERSION=11.12.0
build_sbom() {
    local venv=$NODEMEDIC_TOOLS_ROOT/venv-cyclonedx out=target/sbom/nodemedic.cdx.json target
    target=$(musl_target "${1:-amd64}") || return 1
    ensure_packages python3-venv >&2
    mkdir -p "$NODEMEDIC_TOOLS_ROOT"
    (
        flock 7
        if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$CYCLONEDX_LIB_VERSION" ]; then
            # Debian's interpreter, not one found first on PATH (as run-all.sh).
            /usr/bin/python3 -m venv --clear "$venv" >&2
            "$venv/bin/pip" install --quiet "cyclonedx-python-lib[json-validation]==$CYCLONEDX_LIB_VERSION" >&2
            echo "$CYCLONEDX_LIB_VERSION" >"$venv/.installed"
        fi
    ) 7>"$NODEMEDIC_TOOLS_ROOT/.lock" || return 1
    SOURCE_DATE_EPOCH=$(source_date_epoch) "$venv/bin/python" deploy/sbom.py "$out" \
        --target "$target" >&2 || return 1
    echo "$out"
}

# The static binary that both the image and the .deb ship (BENCHMARKS.md, "One binary for the
# package and the image"), one per architecture: amd64 built natively, arm64 cross-built on
# this x86-64 machine.
# NODEMEDIC_ARCHES narrows what build-image.sh and tests/image.sh build, e.g. to amd64 alone:
# a quick local run; CI builds both (docs/ci.md, "arm64").
MUSL_TARGET=x86_64-unknown-linux-musl
ARCHES=${NODEMEDIC_ARCHES:-amd64 arm64}

# musl_target amd64|arm64: the Rust target of a Debian/OCI architecture name.
musl_target() {
    case "$1" in
        amd64) echo x86_64-unknown-linux-musl ;;
        arm64) echo aarch64-unknown-linux-musl ;;
        *) echo "unknown architecture '$1' (amd64 or arm64)" >&2; return 1 ;;
    esac
}

# cross_env ARCH: what building for ARCH on this machine needs. amd64 is native (musl-gcc
# compiles ring's C); arm64 uses rustup's aarch64-unknown-linux-musl target, which links its
# own musl (crt objects and libc.a), with Debian's aarch64 cross gcc as the linker and the C
# compiler of ring's C and assembly, and binutils' aarch64 strip.
cross_env() {
    case "$1" in
        amd64) STRIP=strip ;;
        arm64)
            # The cross gcc only recommends the C library's aarch64 headers, which ring's C
            # includes (stdint.h): a fresh machine, installing without recommends, lacked them.
            ensure_packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross >&2
            export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
            export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
            export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
            STRIP=aarch64-linux-gnu-strip
            ;;
    esac
}

# build_static release|debug [amd64|arm64]: builds nodemedic for that architecture's musl
# target (default amd64; installing what that needs: musl-gcc or the cross gcc, clang and
# libbpf's headers for the probes, the toolchain's target), refuses a dynamically linked or
# wrong-architecture result, and prints the binary's path; the build's output goes to stderr.
# The build is `cargo auditable build` (the dependency list embedded in the binary, for
# `cargo audit bin`, trivy, syft: docs/release.md) with the checkout's and cargo's paths
# remapped, and the release binary stripped by cargo: the image and the .deb ship this one
# file, and two checkouts of one commit build it byte for byte the same
# (deploy/reproducible-build.sh).
# prepare_target amd64|arm64: installs what building for that architecture needs (musl-gcc or
# the cross gcc, clang and libbpf's headers for the probes, the toolchain's target) and sets
# TARGET and cross_env's variables in the calling shell.
prepare_target() {
    TARGET=$(musl_target "$1") || return 1
    ensure_packages build-essential musl-tools clang libbpf-dev >&2
    ensure_rust >&2
    cross_env "$1"
    rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET" >&2
}

build_static() {
    local profile=$1 arch=${2:-amd64} target bin machine auditable flags
    prepare_target "$arch" || return 1
    target=$TARGET
    auditable=$(ensure_cargo_tool cargo-auditable 0.7.7) || return 1
    # With --target, RUSTFLAGS reach the target's crates only, not build scripts or macros.
    flags="${RUSTFLAGS:-} --remap-path-prefix=$(pwd -P)=/nodemedic"
    flags+=" --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
    if [ "$profile" = release ]; then
        CARGO_PROFILE_RELEASE_STRIP=symbols RUSTFLAGS="$flags" PATH="$(dirname "$auditable"):$PATH" \
            cargo auditable build --release --locked --target "$target" -p nodemedic >&2 || return 1
    else
        RUSTFLAGS="$flags" PATH="$(dirname "$auditable"):$PATH" \
            cargo auditable build --locked --target "$target" -p nodemedic >&2 || return 1
    fi
    bin=target/$target/$profile/nodemedic
    # Static, or neither the scratch image nor a system with another C library can run it.
    if readelf -l "$bin" | grep -q INTERP; then
        echo "$bin is dynamically linked" >&2
        return 1
    fi
    machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
    case "$arch:$machine" in
        amd64:*X86-64* | arm64:AArch64) ;;
        *) echo "$bin is built for '$machine', not $arch" >&2; return 1 ;;
    esac
    echo "$bin"
}

# ensure_test_deps: everything the quality gates and the test suite build or run with
# (clang and libbpf's headers compile the eBPF probes, so even clippy needs them; the tests
# run kill, which is procps', not in a minimal Debian).
ensure_test_deps() {
    ensure_packages build-essential pkg-config ca-certificates curl openssl python3 python3-yaml \
        prometheus prometheus-node-exporter clang llvm libbpf-dev python3-seccomp procps
    ensure_rust
    # Go builds kube-apiserver, the kubelet and helm for the Kubernetes tests.
    ensure_go
}

# The Go toolchain the test suite builds Kubernetes and Helm with. The go command fetches it
# from the Go module proxy (golang.org/toolchain) when the local go is another version;
# pinned, so that every machine builds with the same compiler and Go's build cache stays warm.
export GOTOOLCHAIN="${GOTOOLCHAIN_PIN:-go1.26.8}"

# ensure_go: a go command that understands GOTOOLCHAIN (1.21 or newer). Debian 12's golang-go
# is 1.19, which does not; bookworm-backports' golang-1.23-go does, and fetches the pinned
# toolchain above through the module proxy.
ensure_go() {
    case ":$PATH:" in *:/usr/local/go/bin:*) ;; *) export PATH="$PATH:/usr/local/go/bin" ;; esac
    local v
    v=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)
    case "$v" in
        go1.2[1-9]* | go1.[3-9][0-9]*) return 0 ;;
    esac
    ensure_bookworm_backports
    apt_locked apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends -t bookworm-backports golang-1.23-go
    ln -sf /usr/lib/go-1.23/bin/go /usr/local/bin/go
}
