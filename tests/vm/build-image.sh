#!/usr/bin/env bash
# Builds (once, cached) the Debian guest used by the real-kernel VM tests (Debian 12, kernel
# 6.1, for tests/vm; Debian 13, kernel 6.12, for the cluster's second node, tests/k8s; Debian 13
# arm64, kernel 6.12, for the arm64 guest, NODEMEDIC_VM_ARCH=arm64):
#   $CACHE/vmlinuz, $CACHE/initrd.img, $CACHE/rootfs.img (raw ext4), $CACHE/stamp
# The stamp holds this script's sha256: editing the script rebuilds the image.
# Needs root (debootstrap, chroot). No stdin, no loop mounts.
#
# Env:
#   NODEMEDIC_VM_ARCH    the guest's Debian architecture: amd64 (default) or arm64. A foreign
#                        one is debootstrapped through qemu-user-static, registered with
#                        binfmt_misc here (the F flag: the chroot needs no emulator of its own)
#   NODEMEDIC_VM_CACHE   cache dir (default /var/cache/nodemedic-vm; for arm64
#                        /var/cache/nodemedic-vm-arm64)
#   NODEMEDIC_VM_SUITE   Debian release (default bookworm; trixie for Debian 13, the default
#                        for arm64)
#   NODEMEDIC_VM_MIRROR  Debian mirror (default: the Debian mirror of this host's apt sources)
#   NODEMEDIC_VM_REBUILD=1  rebuild even if the stamp matches
#   NODEMEDIC_VM_IMG_SIZE   size of the raw image (default 2G)
#   NODEMEDIC_VM_PACKAGES   extra Debian packages, comma- or space-separated (e.g. containerd)
#   NODEMEDIC_VM_FILES      extra files, whitespace-separated SRC=DST[=MODE] (host path, guest
#                           path, octal mode: default 0755 for executables, else 0644)
#   NODEMEDIC_VM_ENABLE     extra systemd units to enable, comma- or space-separated
#   NODEMEDIC_VM_APT_SOURCES  extra apt sources for a second install in the chroot, one-line
#                           format, ';'-separated; @MIRROR@ stands for the mirror (e.g.
#                           "deb @MIRROR@ trixie-backports main; deb [check-valid-until=no]
#                           @MIRROR@ sid main")
#   NODEMEDIC_VM_APT_INSTALL  what that install takes from them, in apt's PKG/RELEASE form,
#                           comma- or space-separated (e.g. "linux-image-amd64/trixie-backports
#                           apparmor/sid"); the newest kernel of the image is the one booted
# An image with extras belongs in a cache of its own (NODEMEDIC_VM_CACHE): the stamp covers
# the extras (the package list, each file's destination, mode and sha256), so a cache built
# with other extras is rebuilt, not reused.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
ARCH=${NODEMEDIC_VM_ARCH:-amd64}
case "$ARCH" in
amd64)
    CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm}
    SUITE=${NODEMEDIC_VM_SUITE:-bookworm}
    QEMU_PACKAGE=qemu-system-x86
    ;;
arm64)
    CACHE=${NODEMEDIC_VM_CACHE:-/var/cache/nodemedic-vm-arm64}
    SUITE=${NODEMEDIC_VM_SUITE:-trixie}
    QEMU_PACKAGE=qemu-system-arm
    ;;
*)
    echo "build-image.sh: NODEMEDIC_VM_ARCH=$ARCH: amd64 or arm64" >&2
    exit 2
    ;;
esac
IMG_SIZE=${NODEMEDIC_VM_IMG_SIZE:-2G}
# shellcheck disable=SC2020 # tr maps both separators to newlines, one character each
EXTRA_PACKAGES=$(echo "${NODEMEDIC_VM_PACKAGES:-}" | tr ', ' '\n\n' | sed '/^$/d' | sort -u | paste -sd, -)
# shellcheck disable=SC2020
EXTRA_ENABLE=$(echo "${NODEMEDIC_VM_ENABLE:-}" | tr ', ' '\n\n' | sed '/^$/d' | paste -sd' ' -)
read -r -a EXTRA_FILES <<<"${NODEMEDIC_VM_FILES:-}"
APT_SOURCES=$(echo "${NODEMEDIC_VM_APT_SOURCES:-}" | tr ';' '\n' | sed 's/^[[:space:]]*//; s/[[:space:]]*$//; /^$/d')
# shellcheck disable=SC2020
APT_INSTALL=$(echo "${NODEMEDIC_VM_APT_INSTALL:-}" | tr ', ' '\n\n' | sed '/^$/d' | paste -sd' ' -)
if [ -n "$APT_INSTALL" ] && [ -z "$APT_SOURCES" ]; then
    echo "build-image.sh: NODEMEDIC_VM_APT_INSTALL needs NODEMEDIC_VM_APT_SOURCES" >&2
    exit 2
fi
extras_id() { # what the extras are, for the stamp
    local f src dst mode
    echo "suite=$SUITE packages=$EXTRA_PACKAGES size=$IMG_SIZE enable=$EXTRA_ENABLE"
    [ "$ARCH" = amd64 ] || echo "arch=$ARCH"
    [ -z "$APT_INSTALL" ] || echo "apt-sources=$(echo "$APT_SOURCES" | paste -sd';' -) apt-install=$APT_INSTALL"
    for f in "${EXTRA_FILES[@]}"; do
        IFS='=' read -r src dst mode <<<"$f"
        [ -f "$src" ] || { echo "build-image.sh: extra file $src not found" >&2; return 1; }
        echo "file=$dst mode=${mode:-} $(sha256sum "$src" | cut -d' ' -f1)"
    done
}
EXTRAS=
[ -z "$EXTRA_PACKAGES${EXTRA_ENABLE}${EXTRA_FILES[*]}${APT_INSTALL}" ] && [ "$SUITE" = bookworm ] && [ "$ARCH" = amd64 ] ||
    EXTRAS=$(extras_id)
HASH=$( (sha256sum "$SELF" | cut -d' ' -f1; echo "$EXTRAS") | sha256sum | cut -d' ' -f1)

log() { echo "[build-image] $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    echo "build-image.sh must run as root (debootstrap/chroot)" >&2
    exit 1
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9 # serialise concurrent builds/runs of this script

image_ok() {
    [ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initrd.img" ] && [ -s "$CACHE/rootfs.img" ] &&
        [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$HASH" ]
}

# --- host dependencies (only what is missing) ---------------------------------------
# shellcheck source=deploy/apt.sh
. "$(dirname "$SELF")/../../deploy/apt.sh"
# A foreign architecture's chroot runs its binaries through qemu-user-static.
FOREIGN=
[ "$ARCH" = "$(dpkg --print-architecture)" ] || FOREIGN=$ARCH
ensure_packages debootstrap debian-archive-keyring qemu-utils iproute2 e2fsprogs \
    coreutils util-linux file ${FOREIGN:+qemu-user-static} >&2
ensure_qemu_system "$QEMU_PACKAGE" >&2

if [ "${NODEMEDIC_VM_REBUILD:-0}" != 1 ] && image_ok; then
    log "cached image up to date in $CACHE"
    exit 0
fi

# --- a foreign architecture: its binaries run through qemu-user-static ------------------
# Registered with binfmt_misc from the package's own binfmt.d entry, with the F flag: the
# kernel opens the emulator when it is registered, so it runs inside the chroot, where its
# path does not exist. Debian's qemu-user-static registers it only through binfmt-support or
# systemd-binfmt, and a CI container has neither running.
register_binfmt() {
    local dir=/proc/sys/fs/binfmt_misc name=qemu-aarch64 line
    [ "$FOREIGN" = arm64 ] || {
        echo "build-image.sh: no emulator known for $FOREIGN on $(dpkg --print-architecture)" >&2
        return 1
    }
    mountpoint -q "$dir" || mount -t binfmt_misc binfmt_misc "$dir"
    if [ -e "$dir/$name" ]; then
        if grep -qx enabled "$dir/$name" && grep -Eq '^flags: *[A-Z]*F' "$dir/$name"; then
            return 0
        fi
        # Registered without F (or disabled): replace it with the entry the chroot can use.
        log "binfmt_misc: $name is $(tr '\n' ' ' <"$dir/$name"); registering it again with F"
        echo -1 >"$dir/$name"
    fi
    line=$(grep -m1 "^:$name:" "/usr/lib/binfmt.d/$name.conf") || {
        echo "build-image.sh: no :$name: entry in /usr/lib/binfmt.d/$name.conf (qemu-user-static)" >&2
        return 1
    }
    case "${line##*:}" in *F*) ;; *) line+=F ;; esac
    printf '%s' "$line" >"$dir/register"
    log "binfmt_misc: $name registered ($(sed -n 's/^flags: *//p' "$dir/$name"))"
}
[ -z "$FOREIGN" ] || register_binfmt

# --- mirror: the one this host's apt already uses for Debian main ----------------------
mirror=${NODEMEDIC_VM_MIRROR:-}
if [ -z "$mirror" ]; then
    # deb822 "URIs:" lines or one-line "deb URI suite ..." entries; take the first plain
    # Debian archive (…/debian, not …/debian-security).
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -nE 's/^URIs:[[:space:]]*//p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' |
        tr ' ' '\n' | grep -E '^https?://[^ ]*/debian/?$' | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
fi
log "mirror: $mirror"

# --- build ----------------------------------------------------------------------------
start=$(date +%s)
BUILD="$CACHE/build.tmp"
ROOT="$BUILD/rootfs"
cleanup() {
    # debootstrap normally unmounts what it mounted; be sure nothing stays mounted.
    local m
    for m in $(findmnt -rn -o TARGET | grep -F "$ROOT" | sort -r || true); do
        umount -l "$m" 2>/dev/null || true
    done
}
trap cleanup EXIT
cleanup
rm -rf "$BUILD"
mkdir -p "$ROOT" "$CACHE/debs"

# linux-image-$ARCH pulls initramfs-tools, whose hook builds /boot/initrd.img-* in the chroot.
INCLUDE=systemd-sysv,systemd,udev,dbus,irqbalance,linux-image-$ARCH,initramfs-tools,kmod
INCLUDE=$INCLUDE,iproute2,procps,ethtool,pciutils,util-linux,zstd
# AppArmor enforcing, as on Debian's cloud images: the kernel enables it by default, the
# package loads profiles at boot (the .deb's profile test; containerd's default profile for
# pods on the guest node).
INCLUDE=$INCLUDE,apparmor
# The eBPF probe test cross-checks nodemedic against Debian's bpftrace and reads BPF run stats
# with bpftool; curl scrapes /metrics.
INCLUDE=$INCLUDE,bpftrace,bpftool,curl
# The arm64 guest also runs the container image's arm64 binary under containerd's ctr (and
# runc), and bench/arm64-cost.sh runs bench/memory.py there: containerd and python3. The
# x86 guest has no need of them (its image runs in the test cluster).
[ "$ARCH" = amd64 ] || INCLUDE=$INCLUDE,containerd,python3
[ -z "$EXTRA_PACKAGES" ] || INCLUDE=$INCLUDE,$EXTRA_PACKAGES
# Two stages, so that the initrd is configured before any package is: the first unpacks the base
# system (no program of the guest runs), the second, in the chroot, installs and configures
# the rest. The kernel's package then builds its initrd once, small: only what finds and
# mounts /dev/vda (MODULES=most is ~30 MB, slow to build under qemu-user and to unpack and
# probe under TCG; built and then rebuilt, it cost minutes of a foreign build).
log "debootstrap $SUITE $ARCH (variant minbase, first stage) -> $ROOT"
debootstrap_failed() {
    tail -n 50 "$BUILD/debootstrap.log" >&2
    tail -n 50 "$ROOT/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    exit 1
}
debootstrap --foreign --arch="$ARCH" --variant=minbase --include="$INCLUDE" \
    --cache-dir="$CACHE/debs" "$SUITE" "$ROOT" "$mirror" >"$BUILD/debootstrap.log" 2>&1 ||
    debootstrap_failed
mkdir -p "$ROOT/etc/initramfs-tools/conf.d" "$ROOT/usr/share/initramfs-tools/modules.d"
printf 'MODULES=list\n' >"$ROOT/etc/initramfs-tools/conf.d/nodemedic.conf"
printf 'virtio_pci\nvirtio_blk\next4\n' >"$ROOT/usr/share/initramfs-tools/modules.d/nodemedic"
log "debootstrap second stage (in the chroot$([ -z "$FOREIGN" ] || echo ", through qemu-$ARCH"))"
chroot "$ROOT" /debootstrap/debootstrap --second-stage >>"$BUILD/debootstrap.log" 2>&1 ||
    debootstrap_failed

# --- a second install from extra sources (a backports kernel, packages of another suite) ---
# apt in the chroot, with the host's resolver, /proc, /sys and /dev, and no service started;
# the .debs are kept beside debootstrap's (debs-apt/) for rebuilds.
if [ -n "$APT_INSTALL" ]; then
    echo "$APT_SOURCES" | sed "s|@MIRROR@|$mirror|g" >"$ROOT/etc/apt/sources.list.d/nodemedic-extra.list"
    log "apt in the chroot: $APT_INSTALL (sources: $(paste -sd';' "$ROOT/etc/apt/sources.list.d/nodemedic-extra.list"))"
    [ -s "$ROOT/etc/resolv.conf" ] || cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    mkdir -p "$CACHE/debs-apt"
    mount -t proc proc "$ROOT/proc"
    mount -t sysfs sysfs "$ROOT/sys"
    mount --bind /dev "$ROOT/dev"
    mount --bind "$CACHE/debs-apt" "$ROOT/var/cache/apt/archives"
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
    # shellcheck disable=SC2086 # the package list is words
    if ! { chroot "$ROOT" apt-get update &&
        chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $APT_INSTALL; } \
        >"$BUILD/apt.log" 2>&1; then
        tail -n 50 "$BUILD/apt.log" >&2
        exit 1
    fi
    read -r -a names <<<"$(echo "$APT_INSTALL" | sed 's|/[^ ]*||g')"
    # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
    log "installed: $(chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}, ' "${names[@]}")"
    rm -f "$ROOT/usr/sbin/policy-rc.d"
    cleanup
fi

# --- guest configuration --------------------------------------------------------------
echo nodemedic-vm >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 nodemedic-vm\n' >"$ROOT/etc/hosts"
cat >"$ROOT/etc/fstab" <<'EOF'
/dev/vda / ext4 rw,errors=remount-ro 0 0
EOF
# Passwordless root on the console, only for interactive debugging (tests never log in).
chroot "$ROOT" passwd -d root >/dev/null
# A VM that lives for one test: volatile journal, no timers, no fsck.
mkdir -p "$ROOT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$ROOT/etc/systemd/journald.conf.d/volatile.conf"
# Every modprobe costs seconds under TCG: skip the ones systemd runs for features unused here.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
    fstrim.timer systemd-timesyncd.service getty@tty1.service modprobe@fuse.service \
    modprobe@dm_mod.service modprobe@drm.service modprobe@loop.service \
    modprobe@efi_pstore.service sys-fs-fuse-connections.mount; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$unit"
done
mkdir -p "$ROOT/mnt/host" # the runner mounts the 9p share itself (modules load on demand)
# The test runner: mounts the 9p share "host" at /mnt/host, runs /mnt/host/test.sh as root,
# writes stdout/stderr/exit-code back to the share, then the unit powers the VM off.
cat >"$ROOT/usr/local/sbin/nodemedic-guest-runner" <<'EOF'
#!/bin/bash
set -u
H=/mnt/host
say() { echo "nodemedic-guest-runner: $*" >/dev/console; }
modprobe 9pnet_virtio 2>/dev/null || true
if ! mountpoint -q "$H"; then
    if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none host "$H"; then
        say "cannot mount the 9p share 'host' at $H"
        exit 1
    fi
fi
read -r up _ </proc/uptime
echo "$up" >"$H/guest-uptime-at-test-start"
say "running $H/test.sh (guest uptime ${up}s)"
rm -f "$H/exit-code" "$H/stdout" "$H/stderr"
if [ -f "$H/test.sh" ]; then
    (cd "$H" && NODEMEDIC_VM=1 HOST_DIR="$H" bash "$H/test.sh") >"$H/stdout" 2>"$H/stderr" </dev/null
    rc=$?
else
    echo "no test.sh in the share" >"$H/stderr"
    rc=127
fi
read -r up2 _ </proc/uptime
echo "$up2" >"$H/guest-uptime-at-test-end"
journalctl -b --no-pager >"$H/journal.log" 2>&1 || true
echo "$rc" >"$H/exit-code.tmp" && mv "$H/exit-code.tmp" "$H/exit-code"
sync
say "test.sh exited $rc; powering off"
exit 0
EOF
chmod 0755 "$ROOT/usr/local/sbin/nodemedic-guest-runner"
cat >"$ROOT/etc/systemd/system/nodemedic-test.service" <<'EOF'
[Unit]
Description=nodemedic VM test (runs /mnt/host/test.sh, then powers off)
After=dbus.service irqbalance.service systemd-modules-load.service systemd-udev-settle.service
Wants=dbus.service
# Power off whatever happens; the host waits for qemu to exit.
SuccessAction=poweroff
FailureAction=poweroff

[Service]
# idle: start once the boot jobs are dispatched, so the test sees a settled system.
Type=idle
ExecStart=/usr/local/sbin/nodemedic-guest-runner
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
chroot "$ROOT" systemctl enable nodemedic-test.service >/dev/null 2>&1
chroot "$ROOT" systemctl enable irqbalance.service >/dev/null 2>&1 || true
# containerd starts when a test asks for it, not at every boot (seconds under TCG).
[ "$ARCH" = amd64 ] || chroot "$ROOT" systemctl disable containerd.service >/dev/null 2>&1

# --- extras: files copied in, units enabled ----------------------------------------------
for f in "${EXTRA_FILES[@]}"; do
    IFS='=' read -r src dst mode <<<"$f"
    if [ -z "$mode" ]; then
        mode=0644
        [ -x "$src" ] && mode=0755
    fi
    install -D -m "$mode" "$src" "$ROOT$dst"
done
for unit in $EXTRA_ENABLE; do
    chroot "$ROOT" systemctl enable "$unit" >/dev/null 2>&1 || {
        echo "cannot enable $unit in the image" >&2
        exit 1
    }
done
[ -z "$EXTRAS" ] || log "extras: $(echo "$EXTRAS" | tr '\n' ';')"

# --- kernel + initrd out of the rootfs, then the ext4 image -----------------------------
vmlinuz=$(find "$ROOT/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
initrd=$(find "$ROOT/boot" -maxdepth 1 -name 'initrd.img-*' | sort -V | tail -n1)
# Newer Debian kernels (7.x) ship the image as /usr/lib/modules/VERSION/vmlinuz: the newest
# kernel's, with its initrd, wherever it is.
newest=$(find "$ROOT/usr/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V | tail -n1)
if [ -n "$newest" ] && [ "$vmlinuz" != "$ROOT/boot/vmlinuz-$newest" ] &&
    [ -f "$ROOT/usr/lib/modules/$newest/vmlinuz" ] && [ -f "$ROOT/boot/initrd.img-$newest" ]; then
    vmlinuz=$ROOT/usr/lib/modules/$newest/vmlinuz
    initrd=$ROOT/boot/initrd.img-$newest
fi
if [ -z "$vmlinuz" ] || [ -z "$initrd" ]; then
    echo "no kernel/initrd in $ROOT/boot" >&2
    ls -l "$ROOT/boot" >&2
    exit 1
fi
# qemu -kernel loads it as it is: a bzImage, or arm64's Image (Debian 13's is not compressed;
# qemu 7.2 also unpacks a gzip'd one, but not an EFI zboot image).
case "$ARCH:$(file -b "$vmlinuz")" in
amd64:*"Linux kernel x86 boot executable"* | arm64:*"Linux kernel ARM64 boot executable Image"* | arm64:gzip*) ;;
*)
    echo "$vmlinuz is not a kernel qemu-system can boot for $ARCH: $(file -b "$vmlinuz")" >&2
    exit 1
    ;;
esac
cp "$vmlinuz" "$BUILD/vmlinuz"
cp "$initrd" "$BUILD/initrd.img"
# The kernel's package built it with the list above: a few MB, not MODULES=most's 30.
log "initrd: $(basename "$initrd"), $(du -k "$initrd" | cut -f1) KiB"
basename "$initrd" | sed 's/^initrd.img-//' >"$BUILD/kernel-release"

cleanup
if findmnt -rn -o TARGET | grep -qF "$ROOT"; then
    echo "something is still mounted under $ROOT" >&2
    exit 1
fi
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT/debootstrap"
log "mkfs.ext4 -d ($IMG_SIZE)"
truncate -s "$IMG_SIZE" "$BUILD/rootfs.img"
mkfs.ext4 -q -F -L nodemedic-root -d "$ROOT" "$BUILD/rootfs.img"
rm -rf "$ROOT"

# Publish atomically-ish: stamp last, so a half-copied cache is never taken as valid.
rm -f "$CACHE/stamp"
mv -f "$BUILD/vmlinuz" "$BUILD/initrd.img" "$BUILD/rootfs.img" "$BUILD/kernel-release" "$CACHE/"
mv -f "$BUILD/debootstrap.log" "$CACHE/"
took=$(($(date +%s) - start))
echo "$took" >"$CACHE/build-seconds"
echo "$HASH" >"$CACHE/stamp"
rm -rf "$BUILD"
log "built in ${took}s: $ARCH kernel $(cat "$CACHE/kernel-release"), image $CACHE/rootfs.img"
