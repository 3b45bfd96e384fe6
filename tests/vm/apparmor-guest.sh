# shellcheck shell=bash
# AppArmor in the VM test (sourced by nodemedic-guest.sh; its check, wait_for, http_get,
# audit_count, pin_to_cpu0, affinities, distinct and IRQS). The guest's kernel enforces
# AppArmor (Debian's default LSM) and has the apparmor package, as Debian's cloud images do;
# the .deb installs and loads deploy/apparmor's profiles, and its unit runs under `nodemedic`.
#
#   apparmor_confined    after `systemctl enable --now nodemedic`: the profiles loaded in
#                        enforce mode, the service's label is `nodemedic (enforce)`
#   apparmor_no_denials  no AppArmor denial of a nodemedic profile so far (the incident, the
#                        watchdog, the probes and the tuning audit ran confined)
#   apparmor_native      native rebalancing under each profile: with /proc/irq writable but
#                        the profile `nodemedic`, the affinity write is refused by AppArmor and
#                        said so; with deploy/systemd/native-rebalance.conf (the profile
#                        `nodemedic-native-rebalance`) the same collapse is spread and verified

aa_label() { # the service's main process's label
    cat "/proc/$(systemctl show -p MainPID --value nodemedic)/attr/current" 2>/dev/null
}
aa_label_is() { [ "$(aa_label)" = "$1" ]; }
aa_denials() { # the kernel's AppArmor denials of nodemedic's profiles, one a line
    journalctl -k -o cat --no-pager | grep 'apparmor="DENIED"' | grep 'profile="nodemedic' || true
}

apparmor_confined() {
    check apparmor_enabled bash -c '[ "$(cat /sys/module/apparmor/parameters/enabled)" = Y ]'
    check apparmor_profiles_enforced bash -c "grep -x 'nodemedic (enforce)' /sys/kernel/security/apparmor/profiles && grep -x 'nodemedic-native-rebalance (enforce)' /sys/kernel/security/apparmor/profiles"
    echo "nodemedic's label: $(aa_label)"
    check apparmor_service_confined aa_label_is 'nodemedic (enforce)'
}

apparmor_no_denials() {
    local denials
    denials=$(aa_denials)
    [ -z "$denials" ] || printf 'AppArmor denials:\n%s\n' "$denials"
    check apparmor_no_denials [ -z "$denials" ]
}

apparmor_native_config() { # the VM test's configuration with native rebalancing on
    {
        cat "$H/nodemedic.toml"
        printf '\n[remediation.native]\nenabled = true\n# No traffic here to make it hurt.\nrequire_hurting = false\n'
    } >/etc/nodemedic/nodemedic.toml
}

apparmor_native() {
    local dropin=/etc/systemd/system/nodemedic.service.d
    echo "== native rebalancing under AppArmor (irqbalance stopped on purpose)"
    systemctl stop irqbalance
    apparmor_native_config
    # /proc/irq writable (the package's drop-in) but the profile without the writes (a
    # later drop-in): the write reaches AppArmor, which refuses it.
    install -d "$dropin"
    install -m 0644 /usr/share/doc/nodemedic/native-rebalance.conf "$dropin/native-rebalance.conf"
    printf '[Service]\nAppArmorProfile=-nodemedic\n' >"$dropin/zz-profile-without-writes.conf"
    systemctl daemon-reload
    systemctl restart nodemedic
    check native_denied_label aa_label_is 'nodemedic (enforce)'
    pin_to_cpu0
    check native_denied_failed wait_for 60 "a native_rebalance that failed for permission" \
        bash -c "$(declare -f audit_count); [ \$(audit_count native_rebalance failed_permission) -ge 1 ]"
    journalctl -u nodemedic -o cat --no-pager | grep 'remediation decision' | grep 'action=native_rebalance' | tail -n 2
    check native_denied_in_kernel_log bash -c "journalctl -k -o cat --no-pager | grep 'apparmor=\"DENIED\"' | grep 'profile=\"nodemedic\"' | grep -q 'name=\"/proc/irq/[0-9]*/smp_affinity'"
    check native_denied_named bash -c "journalctl -u nodemedic -o cat --no-pager | grep 'action=native_rebalance' | grep -q 'denied by AppArmor (profile nodemedic, enforce mode)'"
    check native_denied_nothing_moved [ "$(distinct)" -eq 1 ]
    echo "after the refused write: $(affinities)"
    # The profile that allows them, as the package's drop-in selects it.
    rm -f "$dropin/zz-profile-without-writes.conf"
    systemctl daemon-reload
    systemctl restart nodemedic
    check native_label aa_label_is 'nodemedic-native-rebalance (enforce)'
    check native_done wait_for 60 "a native_rebalance carried out" \
        bash -c "$(declare -f audit_count); [ \$(audit_count native_rebalance done) -ge 1 ]"
    check native_spread wait_for 30 "the queue IRQs on >= 2 CPUs" bash -c "[ \$(for i in ${IRQS[*]}; do cat /proc/irq/\$i/smp_affinity_list; done | sort -u | wc -l) -ge 2 ]"
    echo "after native rebalancing: $(affinities)"
    check native_verified wait_for 90 "the native rebalance verified" \
        bash -c "$(declare -f audit_count); [ \$(audit_count verify verified) -ge 1 ]"
    # Nothing but the refused writes was denied.
    local other
    other=$(aa_denials | grep -v 'name="/proc/irq/[0-9]*/smp_affinity' || true)
    [ -z "$other" ] || printf 'other AppArmor denials:\n%s\n' "$other"
    check apparmor_only_the_refused_writes [ -z "$other" ]
    rm -r "$dropin"
    install -m 0644 "$H/nodemedic.toml" /etc/nodemedic/nodemedic.toml
    systemctl daemon-reload
    systemctl restart nodemedic
    systemctl start irqbalance
}
