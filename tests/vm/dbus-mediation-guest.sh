#!/usr/bin/env bash
# Guest side of the D-Bus mediation test (tests/vm/dbus-mediation.sh; issue 52 point 2): does
# dbus-daemon refuse a D-Bus call by the caller's AppArmor label, as Ubuntu's does? Runs as root
# in the guest of tests/vm/run.sh built with Debian 13, trixie-backports' kernel (7.3) and sid's
# apparmor (5.0.2) and dbus (1.16.2), from /mnt/host, where the host put deploy/apparmor
# (apparmor/) and, optionally, a nodemedic binary (nodemedic) with the VM test's configuration
# (nodemedic.toml). What it found (docs/dbus-mediation.md): the kernel and dbus-daemon mediate
# D-Bus by label for profiles compiled against AppArmor 5's features (abi <abi/5.0>, or no abi:
# the parser's pinned features), not for profiles declaring abi 3.0 or 4.0. Debian 13's
# containerd 1.7.24 declares none: its default profile is refused, as on Ubuntu.
#
#   facts       the kernel's AppArmor features (dbus/mask, policy ABI versions), the versions,
#               what dbus-daemon said of AppArmor at start
#   control     unconfined, busctl's TryRestartUnit("irqbalance.service", "replace") restarts
#               irqbalance (a new MainPID): the call itself works here
#   negative    under a profile without dbus rules, shaped as containerd's default
#               (cri-containerd.apparmor.d, contrib/apparmor/template.go: abstractions/base,
#               network, capability, file, umount, signals; no dbus rule) declaring abi 5.0,
#               the same call by busctl and by dbus-send is refused by dbus-daemon with
#               AccessDenied "An AppArmor policy prevents ...", at Hello; irqbalance is not
#               restarted; the denial is in the audit log (type=1107, apparmor="DENIED"
#               operation="dbus_method_call" ... label="nm-test-nodbus")
#   containerd  the same with containerd's own default profile, as Debian 13's containerd
#               generates and loads it (ctr run --apparmor-default-profile), from a container:
#               refused at Hello, logged with label="cri-containerd.apparmor.d". Reported
#               (NOTE), not checked: the profile without dbus rules under abi 3.0 and 4.0 is
#               not mediated
#   nodemedic   under nodemedic's own profile (deploy/apparmor), with a test-only
#               /etc/apparmor.d/local/nodemedic that lets busctl and dbus-send run in it (no
#               D-Bus rule added): TryRestartUnit and Properties.Get on irqbalance's unit are
#               allowed; as shipped (no abi rule: the parser's AppArmor 5 features) StopUnit,
#               ListUnits and Properties.Get on another unit's path are refused by AppArmor
#               and logged, irqbalance untouched, and nothing it was allowed is denied. The
#               same profile pinned to abi 3.0 is reported (NOTE): not mediated
#   binary      (with a nodemedic binary in the share) the daemon under the profile
#               `nodemedic` as shipped, the incident replayed: it restarts irqbalance over
#               D-Bus with mediation on, and no D-Bus denial names it; its other AppArmor
#               denials are reported
# Prints PASS/FAIL (and NOTE) lines and "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
H=${HOST_DIR:-/mnt/host}
AA=/sys/kernel/security/apparmor
# shellcheck source=tests/vm/guest-lib.sh
. "$H/guest-lib.sh"
irqbalance_pid() { systemctl show -p MainPID --value irqbalance; }
# Every AppArmor D-Bus line dbus-daemon logged since the boot (through libaudit to the
# kernel's audit log when it can, else to its own log).
dbus_denials() { journalctl -b "$@" -o cat --no-pager | grep 'apparmor="DENIED"' | grep 'operation="dbus_' || true; }
# The call under test, as a caller of the profile $1 ("unconfined": as it is).
as() {
    local profile=$1
    shift
    if [ "$profile" = unconfined ]; then
        timeout 60 "$@"
    else
        timeout 60 aa-exec -p "$profile" -- "$@"
    fi
}
try_restart_busctl() {
    as "$1" busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
        org.freedesktop.systemd1.Manager TryRestartUnit ss irqbalance.service replace
}
try_restart_dbus_send() {
    as "$1" dbus-send --system --print-reply --dest=org.freedesktop.systemd1 /org/freedesktop/systemd1 \
        org.freedesktop.systemd1.Manager.TryRestartUnit string:irqbalance.service string:replace
}
APPARMOR_REFUSAL='An AppArmor policy prevents this sender from sending this message to this recipient'
# refused_by_apparmor CMD...: CMD fails with dbus-daemon's AppArmor AccessDenied. libdbus
# (dbus-send) prints the error's text; sd-bus (busctl) only its name ("Access denied"), or
# "Permission denied" for a refused Hello: the denial checks show it was AppArmor's.
refused_by_apparmor() {
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    echo "  [$rc] $out" | head -n 3
    [ "$rc" -ne 0 ] && grep -qE "$APPARMOR_REFUSAL|Access denied|Permission denied" <<<"$out"
}
allowed() {
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    echo "  [$rc] $out" | head -n 3
    [ "$rc" -eq 0 ]
}

echo "== facts"
echo "kernel $(uname -r); $(apparmor_parser --version 2>&1 | head -n1); $(dbus-daemon --version | head -n1)"
echo "libapparmor1 $(dpkg-query -W -f='${Version}' libapparmor1), apparmor $(dpkg-query -W -f='${Version}' apparmor), dbus-daemon $(dpkg-query -W -f='${Version}' dbus-daemon)"
echo "features: $(ls "$AA/features" | tr '\n' ' ')"
echo "policy ABI versions: $(ls "$AA/features/policy/versions" 2>/dev/null | tr '\n' ' ')"
echo "features/dbus/mask: $(cat "$AA/features/dbus/mask" 2>&1)"
echo "features/query/label: $(ls "$AA/features/query/label" 2>/dev/null | tr '\n' ' ')"
echo "<apparmor> in the bus configuration: $(grep -rhs '<apparmor' /usr/share/dbus-1/system.conf /etc/dbus-1/ || echo 'none (mode "enabled" by default)')"
echo "dbus-daemon at start: $(journalctl -b -u dbus -o cat --no-pager | grep -i apparmor | head -n 3 || true)"
echo "systemd's bus credentials: $(busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
    GetConnectionCredentials s org.freedesktop.systemd1 2>&1 | head -c 300)"
check apparmor_enabled bash -c "[ \"\$(cat /sys/module/apparmor/parameters/enabled)\" = Y ]"
check kernel_dbus_feature grep -qw send "$AA/features/dbus/mask"
check irqbalance_active systemctl -q is-active irqbalance

echo "== control: unconfined"
before=$(irqbalance_pid)
check control_try_restart allowed try_restart_busctl unconfined
check control_restarted wait_for 30 "a new irqbalance ($before before)" \
    bash -c "p=\$(systemctl show -p MainPID --value irqbalance); [ \"\$p\" != 0 ] && [ \"\$p\" != $before ]"

echo "== negative: a profile without dbus rules, shaped as containerd's default"
# nodbus_profile NAME ABI: test only, what containerd's default profile (cri-containerd.apparmor.d)
# allows in the rules that bear on D-Bus: everything of files, networks and capabilities, and no
# dbus rule; declaring `abi <abi/ABI>,` (containerd's template declares abi/3.0 where the file
# exists).
nodbus_profile() {
    sed -e "s/@NAME@/$1/" -e "s/@ABI@/$2/" "$H/nodbus-profile.template" >"/etc/apparmor.d/$1"
    apparmor_parser -r -W "/etc/apparmor.d/$1" 2>&1 | sed 's/^/  parser: /'
}
# Under AppArmor 5's policy ABI (abi/5.0), the one under which an upstream kernel mediates
# D-Bus (below: not under 3.0 or 4.0).
nodbus_profile nm-test-nodbus 5.0
check nodbus_loaded grep -qx 'nm-test-nodbus (enforce)' "$AA/profiles"
check nodbus_label bash -c "[ \"\$(aa-exec -p nm-test-nodbus -- cat /proc/self/attr/current)\" = 'nm-test-nodbus (enforce)' ]"
since=$(date +%s)
sleep 1
before=$(irqbalance_pid)
check nodbus_busctl_refused refused_by_apparmor try_restart_busctl nm-test-nodbus
check nodbus_dbus_send_refused refused_by_apparmor try_restart_dbus_send nm-test-nodbus
sleep 2
check nodbus_not_restarted [ "$(irqbalance_pid)" = "$before" ]
d=$(dbus_denials --since "@$since" | grep 'label="nm-test-nodbus"')
echo "  denials of nm-test-nodbus:"
sed 's/^/    /' <<<"$d"
# Refused at its first call, Hello, before any message reaches systemd.
check nodbus_denial_logged grep -q 'operation="dbus_method_call".*member="Hello".*label="nm-test-nodbus"' <<<"$d"

echo "== containerd's own default profile (cri-containerd.apparmor.d), as Debian 13's containerd makes it"
# ctr generates it from containerd's template (contrib/apparmor) and loads it, as the CRI plugin
# does for a pod: Debian 13's containerd 1.7.24 declares no abi, so apparmor_parser compiles it
# against its pinned features (/usr/share/apparmor-features/features, AppArmor 5's: dbus and
# network_v9). A container of the guest's /usr with the bus's socket makes the call.
if command -v ctr >/dev/null && systemctl start containerd; then
    echo "containerd $(dpkg-query -W -f='${Version}' containerd)"
    R=/var/lib/nm-test-rootfs
    mkdir -p "$R/usr" "$R/etc"
    for l in bin lib lib64 sbin; do ln -sfn "usr/$l" "$R/$l"; done
    cp /etc/passwd /etc/group "$R/etc/"
    since=$(date +%s)
    sleep 1
    before=$(irqbalance_pid)
    out=$(timeout 180 ctr run --rm --rootfs --apparmor-default-profile cri-containerd.apparmor.d \
        --mount type=bind,src=/usr,dst=/usr,options=rbind:ro \
        --mount type=bind,src=/run/dbus,dst=/run/dbus,options=rbind:rw "$R" nm-dbus-ctr \
        /usr/bin/sh -c 'cat /proc/self/attr/current; dbus-send --system --print-reply --dest=org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager.TryRestartUnit string:irqbalance.service string:replace' 2>&1)
    echo "  $(head -c 600 <<<"$out")"
    check containerd_profile_label grep -qx 'cri-containerd.apparmor.d (enforce)' <<<"$out"
    check containerd_profile_refused grep -qF "$APPARMOR_REFUSAL" <<<"$out"
    sleep 2
    check containerd_not_restarted [ "$(irqbalance_pid)" = "$before" ]
    d=$(dbus_denials --since "@$since" | grep 'label="cri-containerd.apparmor.d"')
    sed 's/^/    /' <<<"$d"
    check containerd_denial_logged grep -q 'operation="dbus_method_call".*member="Hello".*label="cri-containerd.apparmor.d"' <<<"$d"
else
    check containerd_starts false
fi

echo "== the same profile without dbus rules under the older policy ABIs"
# containerd's template declares abi/3.0 from 2.1.x/2.2.x/1.7.x of February 2026 on (sid's
# 2.1.9 does): under it, and under 4.0, an upstream kernel's dbus-daemon does not mediate.
for abi in 3.0 4.0; do
    name=nm-test-nodbus-abi${abi%.0}
    nodbus_profile "$name" "$abi"
    out=$(try_restart_dbus_send "$name" 2>&1)
    if grep -qF "$APPARMOR_REFUSAL" <<<"$out"; then verdict=refused; else verdict="not mediated (allowed)"; fi
    echo "NOTE abi $abi: TryRestartUnit $verdict: $(head -c 200 <<<"$out" | tr '\n' ' ')"
done
echo "NOTE parser on abi 3.0: $(apparmor_parser -QK --warn=all /etc/apparmor.d/nm-test-nodbus-abi3 2>&1 | sort -u | head -n 3 | tr '\n' ' ')"

# profile_at ABI: nodemedic's profile as shipped (ABI "shipped": no abi rule), or declaring
# `abi <abi/ABI>,`.
profile_at() {
    if [ "$1" = shipped ]; then
        cat "$H/apparmor/nodemedic"
    else
        sed "s|^include <tunables/global>|abi <abi/$1>,\n\ninclude <tunables/global>|" "$H/apparmor/nodemedic"
    fi
}
# nodemedic_profile_checks ABI MEDIATED: nodemedic's profile (profile_at ABI), with the calls it
# makes and calls it must not. MEDIATED=no: the calls it must not make are only reported
# (NOTE), not checked.
nodemedic_profile_checks() {
    local abi=$1 mediated=$2 t=abi${1%.0} since before
    [ "$abi" != shipped ] || t=shipped
    echo "== nodemedic's profile, abi $abi"
    install -D -m 0644 "$H/apparmor/abstractions/nodemedic" /etc/apparmor.d/abstractions/nodemedic
    profile_at "$abi" >/etc/apparmor.d/nodemedic
    check "nodemedic_${t}_loads" apparmor_parser -r -W /etc/apparmor.d/nodemedic
    check "nodemedic_${t}_label" bash -c "[ \"\$(aa-exec -p nodemedic -- cat /proc/self/attr/current)\" = 'nodemedic (enforce)' ]"
    since=$(date +%s)
    sleep 1
    before=$(irqbalance_pid)
    check "nodemedic_${t}_try_restart_allowed" allowed try_restart_busctl nodemedic
    check "nodemedic_${t}_restarted" wait_for 30 "a new irqbalance ($before before)" \
        bash -c "p=\$(systemctl show -p MainPID --value irqbalance); [ \"\$p\" != 0 ] && [ \"\$p\" != $before ]"
    check "nodemedic_${t}_dbus_send_allowed" allowed try_restart_dbus_send nodemedic
    check "nodemedic_${t}_irqbalance_property_allowed" allowed as nodemedic busctl --system get-property \
        org.freedesktop.systemd1 /org/freedesktop/systemd1/unit/irqbalance_2eservice org.freedesktop.systemd1.Unit ActiveState
    wait_for 30 "irqbalance active" systemctl -q is-active irqbalance >/dev/null
    before=$(irqbalance_pid)
    expect_refused "nodemedic_${t}_stop_unit_refused" as nodemedic busctl --system call org.freedesktop.systemd1 \
        /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager StopUnit ss irqbalance.service replace
    expect_refused "nodemedic_${t}_list_units_refused" as nodemedic busctl --system call org.freedesktop.systemd1 \
        /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager ListUnits
    expect_refused "nodemedic_${t}_other_unit_property_refused" as nodemedic busctl --system get-property \
        org.freedesktop.systemd1 /org/freedesktop/systemd1/unit/dbus_2eservice org.freedesktop.systemd1.Unit ActiveState
    sleep 2
    if [ "$mediated" = no ]; then
        systemctl -q is-active irqbalance || systemctl start irqbalance
        return 0
    fi
    check "nodemedic_${t}_irqbalance_untouched" bash -c "systemctl -q is-active irqbalance && [ \"\$(systemctl show -p MainPID --value irqbalance)\" = $before ]"
    systemctl -q is-active irqbalance || systemctl start irqbalance
    echo "  denials of nodemedic:"
    dbus_denials --since "@$since" | grep 'label="nodemedic"' | sed 's/^/    /'
    local d
    d=$(dbus_denials --since "@$since" | grep 'label="nodemedic"')
    check "nodemedic_${t}_refusals_logged" bash -c 'for m in StopUnit ListUnits Get; do grep -q "member=\"$m\"" <<<"$1" || exit 1; done' _ "$d"
    check "nodemedic_${t}_allowed_not_denied" bash -c '! grep -Eq "member=\"(Hello|TryRestartUnit)\"|path=\"/org/freedesktop/systemd1/unit/irqbalance_2eservice\"" <<<"$1"' _ "$d"
}
expect_refused() { # NAME CMD...: checked where D-Bus is mediated, else only reported
    local name=$1 out
    shift
    if [ "$mediated" = yes ]; then
        check "$name" refused_by_apparmor "$@"
    else
        out=$("$@" 2>&1 | head -c 120 | tr '\n' ' ')
        echo "NOTE $name: not mediated under abi $abi: $out"
    fi
}
# Test only, in the guest: the tools run under the profile in nodemedic's place. No D-Bus
# rule: what they may say on the bus is the profile's.
mkdir -p /etc/apparmor.d/local
cat >/etc/apparmor.d/local/nodemedic <<'EOF'
# tests/vm/dbus-mediation-guest.sh: busctl and dbus-send in nodemedic's place (test only)
/usr/bin/busctl mrix,
/usr/bin/dbus-send mrix,
/usr/bin/cat mrix,
/etc/machine-id r,
# sd-bus tries SO_SNDBUFFORCE/SO_RCVBUFFORCE, then does without
deny capability net_admin,
EOF
# As shipped (no abi rule: AppArmor 5's features here), the way an upstream kernel mediates it.
nodemedic_profile_checks shipped yes
# Pinned to abi 3.0, as it was: its calls work, and dbus-daemon does not mediate the others.
nodemedic_profile_checks 3.0 no

# binary_checks ABI: the real daemon under its profile declaring `abi <abi/ABI>,` (a transient
# unit, AppArmorProfile=nodemedic), the incident replayed: irqbalance restarted over D-Bus.
binary_checks() {
    local abi=$1 t=abi${1%.0} t0 before vdev d irq
    [ "$abi" != shipped ] || t=shipped
    echo "== the nodemedic binary under its profile, abi $abi (a transient unit, AppArmorProfile=nodemedic)"
    profile_at "$abi" >/etc/apparmor.d/nodemedic
    apparmor_parser -r -W /etc/apparmor.d/nodemedic
    systemctl -q is-active irqbalance || systemctl start irqbalance
    t0=$(date +%s)
    sleep 1
    check "binary_${t}_starts" systemd-run --unit="nodemedic-$t" -p AppArmorProfile=nodemedic \
        /usr/bin/nodemedic --config /etc/nodemedic/nodemedic.toml run
    check "binary_${t}_label" wait_for 30 "nodemedic under 'nodemedic (enforce)'" bash -c \
        "[ \"\$(cat /proc/\$(systemctl show -p MainPID --value nodemedic-$t)/attr/current 2>/dev/null)\" = 'nodemedic (enforce)' ]"
    modprobe virtio_net 2>/dev/null || true
    vdev=
    for d in /sys/class/net/*; do
        [ "$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")" = virtio_net ] &&
            vdev=$(basename "$(readlink -f "$d/device")")
    done
    mapfile -t IRQS < <(awk -v d="$vdev" '$NF ~ "^"d"-(input|output)\\." {sub(":","",$1); print $1}' /proc/interrupts)
    echo "NIC $vdev, queue IRQs: ${IRQS[*]}"
    sleep 5 # a few samples of the healthy state
    echo "-- the incident: irqbalance stuck, every queue IRQ on CPU 0"
    before=$(irqbalance_pid)
    systemctl kill -s STOP irqbalance
    for irq in "${IRQS[@]}"; do echo 1 >"/proc/irq/$irq/smp_affinity"; done
    check "binary_${t}_restarted_irqbalance" wait_for 90 "an irqbalance_restart done" bash -c \
        "journalctl -u nodemedic-$t -o cat --no-pager | grep 'remediation decision' | grep 'action=irqbalance_restart' | grep -q 'result=done'"
    journalctl -u "nodemedic-$t" -o cat --no-pager | grep 'remediation decision' | tail -n 2 | cut -c 1-400
    check "binary_${t}_via_dbus" bash -c "journalctl -u nodemedic-$t -o cat --no-pager | grep 'remediation decision' | grep 'result=done' | grep -q TryRestartUnit"
    check "binary_${t}_new_irqbalance" bash -c "p=\$(systemctl show -p MainPID --value irqbalance); [ \"\$p\" != 0 ] && [ \"\$p\" != $before ]"
    echo "  other AppArmor denials of nodemedic's profile while it ran (not D-Bus; reported):"
    journalctl -b --since "@$t0" -o cat --no-pager | grep 'apparmor="DENIED"' | grep 'profile="nodemedic"' |
        sed -E 's/.*(operation="[^"]*").*(profile="[^"]*")/\1 \2/; s/ pid=[0-9]+//; s/audit\([^)]*\)//' | sort | uniq -c | sed 's/^/    /'
    check "binary_${t}_no_dbus_denial" bash -c "$(declare -f dbus_denials); ! dbus_denials --since @$t0 | grep -q 'label=\"nodemedic\"'"
    systemctl stop "nodemedic-$t"
    systemctl kill -s CONT irqbalance 2>/dev/null || true
}
if [ -x "$H/nodemedic" ]; then
    install -m 0755 "$H/nodemedic" /usr/bin/nodemedic
    install -D -m 0644 "$H/nodemedic.toml" /etc/nodemedic/nodemedic.toml
    echo "nodemedic: $(/usr/bin/nodemedic --version 2>&1 | head -n1)"
    # The real daemon: nothing of the test's own lets it do more.
    rm -f /etc/apparmor.d/local/nodemedic
    # As shipped: D-Bus mediated.
    binary_checks shipped
else
    echo "SKIP binary: no nodemedic binary in the share"
fi

echo "-- every AppArmor D-Bus denial of the boot"
dbus_denials | tail -n 20
echo "-- other AppArmor denials"
journalctl -b -k -o cat --no-pager | grep 'apparmor="DENIED"' | grep -v 'operation="dbus_' | tail -n 20
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
