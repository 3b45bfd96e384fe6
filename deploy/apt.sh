# Sourced (not run) by deploy/bootstrap.sh and by the build scripts of tests/ that run in the
# background of tests/run-all.sh: the one way this repository's scripts install from Debian.

# ensure_packages [--no-start] PKG...: apt-get installs those not installed yet.
# Every install of this repository's scripts goes through here, under one lock
# (/var/lock/nodemedic-apt.lock): tests/run-all.sh runs several builds at once in the
# background (tests/prebuild.sh), and apt-get's own locks do not wait for each other:
# `apt-get update` fails at once on `Could not get lock .../apt/lists/lock` while another
# update runs, whatever DPkg::Lock::Timeout says (that one covers dpkg's lock only). Under the
# lock the list is checked again, so a script that waited finds what the other installed.
# --no-start: no service starts during the install (etcd, containerd: the tests start their
# own, with their own configuration); policy-rc.d is what invoke-rc.d and deb-systemd-invoke ask.
export DEBIAN_FRONTEND=noninteractive

# apt_locked CMD...: CMD (an apt-get of its own) under the same lock.
apt_locked() {
    flock -w 1800 /var/lock/nodemedic-apt.lock "$@" </dev/null
}

# apt_update_once: `apt-get update`, unless one of these functions ran it in the last 30 minutes
# and no source list changed since (a stamp beside apt's lists). A cold test run asks for
# packages a dozen times, from several background builds waiting for each other on the lock,
# and each update cost seconds of that wait. Called under the lock. apt_install retries once
# after a fresh update, so lists that went stale within the half hour cost a retry, not a failure.
APT_UPDATE_STAMP=/var/lib/apt/lists/.nodemedic-updated
apt_update_once() {
    if [ "${1:-}" != --force ] && [ -n "$(find "$APT_UPDATE_STAMP" -mmin -30 2>/dev/null)" ] &&
        [ -z "$(find /etc/apt/sources.list /etc/apt/sources.list.d \
            -newer "$APT_UPDATE_STAMP" 2>/dev/null)" ]; then
        return 0
    fi
    apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null || return 1
    touch "$APT_UPDATE_STAMP"
}
# apt_install PKG...: apt-get install under the caller's lock, after apt_update_once; once more
# after a forced update if it failed (a package gone from a mirror since the last update).
apt_install() {
    apt_update_once || return 1
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" </dev/null && return 0
    echo "apt_install: retrying after apt-get update" >&2
    apt_update_once --force || return 1
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" </dev/null
}

missing_packages() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || echo "$pkg"
    done
}
ensure_packages() {
    local no_start=0
    if [ "${1:-}" = --no-start ]; then no_start=1; shift; fi
    [ -n "$(missing_packages "$@")" ] || return 0
    (
        flock -w 1800 9 || { echo "ensure_packages: /var/lock/nodemedic-apt.lock held for 30 min" >&2; exit 1; }
        mapfile -t need < <(missing_packages "$@")
        [ ${#need[@]} -gt 0 ] || exit 0
        prc=/usr/sbin/policy-rc.d
        if [ "$no_start" = 1 ] && [ ! -e "$prc" ]; then
            printf '#!/bin/sh\n# deploy/bootstrap.sh ensure_packages --no-start\nexit 101\n' >"$prc"
            chmod +x "$prc"
            trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        fi
        echo "ensure_packages: installing ${need[*]}" >&2
        apt_install "${need[@]}"
    ) 9>>/var/lock/nodemedic-apt.lock
}

# ensure_bookworm_backports: Debian 12's backports in apt's sources, added once under the lock.
# Its packages keep their default priority (100): nothing comes from it unless named
# (`-t bookworm-backports`) or pinned, as ensure_qemu_system pins QEMU.
ensure_bookworm_backports() {
    local list=/etc/apt/sources.list.d/nodemedic-bookworm-backports.list
    [ -f "$list" ] && return 0
    (
        flock -w 1800 9 || { echo "ensure_bookworm_backports: /var/lock/nodemedic-apt.lock held for 30 min" >&2; exit 1; }
        [ -f "$list" ] && exit 0
        echo "deb http://deb.debian.org/debian bookworm-backports main" >"$list.tmp"
        mv "$list.tmp" "$list"
        apt_update_once --force
    ) 9>>/var/lock/nodemedic-apt.lock
}

# ensure_qemu_system PKG...: QEMU's system emulators (qemu-system-x86, qemu-system-arm), 8.1 or
# newer. Multi-threaded TCG before 8.1 could run a stale translation of code another vCPU had
# rewritten ("accel/tcg: Always lock pages before translation"), and a guest kernel died of
# the int3 it left (tests/vm/README.md, "A guest kernel panic under TCG"). Debian 12 ships
# 7.2; its backports ship 10.0, pinned here for QEMU's own packages alone
# (/etc/apt/preferences.d/nodemedic-qemu), so that an upgrade keeps them there and nothing
# else on the machine moves. Other systems install their own and tests/vm/run.sh runs a QEMU
# before 8.1 with one TCG thread.
QEMU_MIN_VERSION=1:8.1
ensure_qemu_system() {
    if ! grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
        ensure_packages "$@"
        return
    fi
    local pkg v need=()
    for pkg in "$@"; do
        # dpkg-query fails for a package dpkg has never seen: under pipefail and set -e (the
        # build scripts), that must not end the caller.
        v=$(dpkg-query -W -f='${Status} ${Version}' "$pkg" 2>/dev/null | sed -n 's/^install ok installed //p' || true)
        if [ -z "$v" ] || ! dpkg --compare-versions "$v" ge "$QEMU_MIN_VERSION"; then
            need+=("$pkg")
        fi
    done
    [ ${#need[@]} -gt 0 ] || return 0
    ensure_bookworm_backports || return 1
    (
        flock -w 1800 9 || { echo "ensure_qemu_system: /var/lock/nodemedic-apt.lock held for 30 min" >&2; exit 1; }
        cat >/etc/apt/preferences.d/nodemedic-qemu <<'PIN'
# deploy/apt.sh ensure_qemu_system: QEMU 8.1 or newer for the test suite's guests
Package: qemu-system-x86 qemu-system-arm qemu-system-common qemu-system-data seabios
Pin: release n=bookworm-backports
Pin-Priority: 990
PIN
        echo "ensure_qemu_system: installing ${need[*]} from bookworm-backports (QEMU >= ${QEMU_MIN_VERSION#1:})" >&2
        apt_install "${need[@]}"
    ) 9>>/var/lock/nodemedic-apt.lock
}
