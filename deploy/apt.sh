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
        apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" </dev/null
    ) 9>>/var/lock/nodemedic-apt.lock
}
