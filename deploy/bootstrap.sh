# Shared by deploy/install.sh and tests/run-all.sh (sourced, not run): installs Debian
# packages that are missing, and a Rust toolchain when cargo is missing.

export DEBIAN_FRONTEND=noninteractive

# ensure_packages PKG...: apt-get installs those not installed yet.
ensure_packages() {
    local need=() pkg
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update
        apt-get install -y --no-install-recommends "${need[@]}"
    fi
}

# ensure_rust: Debian 12's rustc (1.63) is too old; use rustup's stable toolchain.
ensure_rust() {
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
    if ! command -v cargo >/dev/null 2>&1; then
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
}
