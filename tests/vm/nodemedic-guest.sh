#!/usr/bin/env bash
# Guest side of the end-to-end test (runs as root in the VM, from /mnt/host), on either guest
# of tests/vm/run.sh (x86-64 or arm64: nothing here names an architecture).
# First the upgrade from the previous release's .deb and the downgrade back, as apt would, with
# an edited configuration and /metrics scraped throughout (upgrade-guest.sh; left out, saying
# why, when the host put a skip-upgrade file with the reason in the share); then, from a
# fresh install: installs nodemedic from its Debian package (`dpkg -i`, then `systemctl enable --now`), checks
# the hardened Type=notify unit (systemd-analyze verify, readiness through sd_notify, the
# exposure level), replays the incident (irqbalance stuck, every NIC queue IRQ on CPU 0) and
# checks that nodemedic detects it, restarts irqbalance over D-Bus once with the hardening
# on, verifies the re-spread, and takes no second action during the cooldown; finally a
# sampler made to hang is restarted by systemd's watchdog; then the eBPF probes attach to this
# kernel and are checked against a traffic generator and bpftrace (probes-guest.sh).
# With capture-guest.sh in the share, the kernel's files are captured as fixture trees twice:
# healthy (irqbalance's placement, nodemedic saw no collapse) and collapsed (the NIC's queue
# IRQs pinned to CPU 0 with nodemedic and irqbalance stopped, at the end). With the container
# image's archive in the share, its binary runs under containerd in that collapsed state and
# must see what the .deb's does (image-guest.sh).
set -uo pipefail
H=/mnt/host
# shellcheck source=tests/vm/guest-lib.sh
. "$H/guest-lib.sh"
finish() {
    echo "-- nodemedic journal"
    journalctl -u nodemedic -o cat --no-pager | tail -n 60
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
}
http_get() { # path -> body (HTTP/1.0 over bash's /dev/tcp; the guest has no curl)
    local body
    exec 3<>/dev/tcp/127.0.0.1/9847 || return 1
    printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
    # Bounded, so a response that never ends names itself instead of hanging the run.
    if ! body=$(timeout 30 cat <&3); then
        echo "http_get $1: no complete response within 30 s" >&2
        exec 3<&-
        return 1
    fi
    exec 3<&-
    printf '%s\n' "${body#*$'\r\n\r\n'}"
}
# shellcheck disable=SC2317 # called through `declare -f` and by the sourced probe test
samples_total() { # -> nodemedic_samples_total in /metrics now, 0 before the first sample
    http_get /metrics | awk '$1 == "nodemedic_samples_total" { v = $2 } END { printf "%.0f\n", v + 0 }'
}
# shellcheck disable=SC2317
wait_samples() { # n description -> once nodemedic has completed n more samples (30 s at most)
    local want
    want=$(($(samples_total) + $1))
    wait_for 30 "$2 (nodemedic_samples_total >= $want in /metrics)" \
        bash -c "$(declare -f http_get samples_total); [ \$(samples_total) -ge $want ]"
}
audit_count() { # action result -> number of audit log lines
    journalctl -u nodemedic -o cat --no-pager | grep 'remediation decision' |
        grep -c "action=$1 .*result=$2"
}

echo "guest: $(uname -r) $(uname -m), $(systemctl --version | head -n1)"
if [ -f "$H/skip-upgrade" ]; then
    echo "SKIP upgrade and downgrade: $(cat "$H/skip-upgrade")"
else
    # shellcheck source=tests/vm/upgrade-guest.sh
    . "$H/upgrade-guest.sh"
fi
# shellcheck source=tests/vm/apparmor-guest.sh
. "$H/apparmor-guest.sh"
capture() { :; }
if [ -f "$H/capture-guest.sh" ]; then
    # shellcheck source=tests/vm/capture-guest.sh
    . "$H/capture-guest.sh"
fi

check deb_installs dpkg -i "$H/nodemedic.deb"
check deb_files bash -c "[ -x /usr/bin/nodemedic ] && [ -f /etc/nodemedic/nodemedic.toml ] && [ -f /usr/share/man/man1/nodemedic.1.gz ] && [ -f /usr/lib/systemd/system/nodemedic.service ]"
# --man=no: the minbase guest has no man(1); deb_files checks the page is installed.
check unit_verifies bash -c "out=\$(systemd-analyze verify --man=no /usr/lib/systemd/system/nodemedic.service 2>&1); echo \"\$out\"; [ -z \"\$out\" ]"
# The test's faster windows over the packaged (conffile) configuration.
install -m 0644 "$H/nodemedic.toml" /etc/nodemedic/nodemedic.toml
check irqbalance_active systemctl -q is-active irqbalance
echo "irqbalance $(irqbalance --version 2>&1 | head -n1)"

nic_queue_irqs
check nic_has_queue_irqs [ "${#IRQS[@]}" -ge 4 ]

# Type=notify: `enable --now` returns once nodemedic said READY=1, i.e. once it serves.
check enable_now systemctl enable --now nodemedic
check unit_active systemctl -q is-active nodemedic
check notify_status bash -c "systemctl show -p StatusText --value nodemedic | tee /dev/stderr | grep -Eq 'serving on|samples'"
check nodemedic_started wait_for 60 "nodemedic /healthz" bash -c "$(declare -f http_get); http_get /healthz | grep -q ok"
apparmor_confined
exposure=$(systemd-analyze security nodemedic 2>/dev/null | tail -n 1)
echo "systemd-analyze security: $exposure"
check exposure_ok_or_better bash -c "echo '$exposure' | grep -Eq 'Overall exposure level for nodemedic.service: [0-9.]+ (OK|SAFE)'"
check no_collapse_at_start wait_for 30 "a sample with no collapse" \
    bash -c "$(declare -f http_get); http_get /metrics | grep -q '^nodemedic_samples_total [1-9]' && ! http_get /metrics | grep -q 'nodemedic_irq_collapsed{.*} 1'"
echo "irqbalance's placement: $(affinities)"
capture healthy

echo "== the incident: irqbalance stuck, every NIC queue IRQ on CPU 0"
systemctl kill -s STOP irqbalance
pin_to_cpu0
echo "pinned: $(affinities)"
pinned_at=$(date +%s)

check detected wait_for 60 "nodemedic_irq_collapsed{group=\"$vdev\"} 1" \
    bash -c "$(declare -f http_get); http_get /metrics | grep -q 'nodemedic_irq_collapsed{group=\"$vdev\"} 1'"
check irqbalance_restarted wait_for 60 "an irqbalance_restart action carried out" \
    bash -c "$(declare -f audit_count); [ \$(audit_count irqbalance_restart done) -ge 1 ]"
journalctl -u nodemedic -o cat --no-pager | grep 'remediation decision' | grep -m1 'result=done' | grep -q 'TryRestartUnit' &&
    echo "via D-Bus TryRestartUnit"
check via_dbus bash -c "journalctl -u nodemedic -o cat --no-pager | grep 'remediation decision' | grep 'result=done' | grep -q TryRestartUnit"
check respread wait_for 60 "the queue IRQs on >= 2 CPUs" bash -c "[ \$(for i in ${IRQS[*]}; do cat /proc/irq/\$i/smp_affinity_list; done | sort -u | wc -l) -ge 2 ]"
echo "after restart: $(affinities) ($(distinct) distinct CPUs, $(($(date +%s) - pinned_at))s after pinning)"
check verified wait_for 90 "verification" bash -c "$(declare -f audit_count); [ \$(audit_count verify verified) -ge 1 ]"
check collapse_cleared wait_for 30 "the collapsed verdict to clear" \
    bash -c "$(declare -f http_get); http_get /metrics | grep -q 'nodemedic_irq_collapsed{group=\"$vdev\"} 0'"

# Still inside the 60 s cooldown: collapse it again and make sure nothing is done about it.
systemctl kill -s STOP irqbalance
pin_to_cpu0
# The policy decides on the sample that raises the verdict; three more give an action it
# should not have taken the time to be carried out and logged.
check collapsed_in_cooldown wait_for 60 "nodemedic_irq_collapsed{group=\"$vdev\"} 1 again" \
    bash -c "$(declare -f http_get); http_get /metrics | grep -q 'nodemedic_irq_collapsed{group=\"$vdev\"} 1'"
check sampled_in_cooldown wait_samples 3 "samples after the second collapse"
check one_action_in_cooldown [ "$(audit_count irqbalance_restart "done")" -eq 1 ]
check metrics_count bash -c "$(declare -f http_get); http_get /metrics | grep -q 'nodemedic_remediation_actions_total{action=\"irqbalance_restart\",result=\"done\"} 1'"
systemctl kill -s CONT irqbalance || true
echo "irqbalance pid now $(pidof irqbalance)"

echo "== a wedged sampler: the endpoint still answers, the watchdog restarts the service"
restarts_before=$(systemctl show -p NRestarts --value nodemedic)
install -d /etc/systemd/system/nodemedic.service.d
cat >/etc/systemd/system/nodemedic.service.d/hang.conf <<'UNIT'
[Service]
ExecStart=
ExecStart=/usr/bin/nodemedic run --config /etc/nodemedic/nodemedic.toml --fault.hang-sampler-after 3
WatchdogSec=6s
UNIT
systemctl daemon-reload
systemctl restart nodemedic
check hung_but_serving wait_for 20 "the fault-injected hang" bash -c "journalctl -u nodemedic -o cat --no-pager | grep -q 'the sampler hangs now'"
check watchdog_restarts wait_for 60 "a watchdog restart" bash -c "[ \$(systemctl show -p NRestarts --value nodemedic) -gt $restarts_before ]"
check watchdog_logged bash -c "journalctl -u nodemedic --no-pager | grep -q 'Watchdog timeout'"
rm -r /etc/systemd/system/nodemedic.service.d
systemctl daemon-reload
systemctl restart nodemedic
check healthy_again wait_for 30 "a healthy service again" systemctl -q is-active nodemedic

# shellcheck source=tests/vm/probes-guest.sh
. "$H/probes-guest.sh"
# shellcheck source=tests/vm/tuning-guest.sh
. "$H/tuning-guest.sh"
apparmor_no_denials
apparmor_native
# Last, the collapsed state held still: nodemedic and irqbalance stopped, the NIC's queue IRQs
# pinned to CPU 0 as in the incident. The collapsed tree is captured in it (a capture takes
# minutes under emulation, longer than the remediation's cooldown: captured in the incident,
# irqbalance had been restarted and the IRQs spread again before the files were read), and the
# container image's binary is compared with the .deb's in it (image-guest.sh).
if [ -f "$H/capture-guest.sh" ] || [ -f "$H/nodemedic-image.tar" ]; then
    systemctl stop nodemedic irqbalance
    pin_to_cpu0
    echo "pinned, and nothing moves them now: $(affinities)"
    capture collapsed
    if [ -f "$H/nodemedic-image.tar" ]; then
        # shellcheck source=tests/vm/image-guest.sh
        . "$H/image-guest.sh"
        image_checks
    fi
fi
finish
