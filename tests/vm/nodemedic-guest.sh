#!/usr/bin/env bash
# Guest side of the end-to-end remediation test (runs as root in the VM, from /mnt/host).
# Installs nodemedic with deploy/nodemedic.service, replays the incident (irqbalance stuck,
# every NIC queue IRQ on CPU 0) and checks that nodemedic detects it, restarts irqbalance over
# D-Bus once, verifies the re-spread, and takes no second action during the cooldown.
set -uo pipefail
H=/mnt/host
pass=0
fail=0
check() {
    local name=$1
    shift
    if "$@"; then
        echo "PASS $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name"
        fail=$((fail + 1))
    fi
}
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
    body=$(cat <&3)
    exec 3<&-
    printf '%s\n' "${body#*$'\r\n\r\n'}"
}
wait_for() { # seconds description command...
    local limit=$1 what=$2 start
    shift 2
    start=$(date +%s)
    until "$@"; do
        if [ $(($(date +%s) - start)) -ge "$limit" ]; then
            echo "timed out after ${limit}s waiting for $what"
            return 1
        fi
        sleep 1
    done
    echo "after $(($(date +%s) - start))s: $what"
}
audit_count() { # action result -> number of audit log lines
    journalctl -u nodemedic -o cat --no-pager | grep 'remediation decision' |
        grep -c "action=$1 .*result=$2"
}

install -m 0755 "$H/nodemedic" /usr/local/bin/nodemedic
install -d /etc/nodemedic
install -m 0644 "$H/nodemedic.toml" /etc/nodemedic/nodemedic.toml
install -m 0644 "$H/nodemedic.service" /etc/systemd/system/nodemedic.service
systemctl daemon-reload
check irqbalance_active systemctl -q is-active irqbalance
echo "irqbalance $(irqbalance --version 2>&1 | head -n1)"

nic=
for d in /sys/class/net/*; do
    if [ "$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")" = virtio_net ]; then
        nic=$(basename "$d")
        break
    fi
done
vdev=$(basename "$(readlink -f "/sys/class/net/$nic/device")")
mapfile -t IRQS < <(awk -v d="$vdev" '$NF ~ "^"d"-(input|output)\\." {sub(":","",$1); print $1}' /proc/interrupts)
echo "NIC $nic = $vdev, queue IRQs: ${IRQS[*]}"
check nic_has_queue_irqs [ "${#IRQS[@]}" -ge 4 ]
affinities() {
    local irq
    for irq in "${IRQS[@]}"; do printf '%s:%s ' "$irq" "$(cat "/proc/irq/$irq/smp_affinity_list")"; done
    echo
}
distinct() {
    local irq
    for irq in "${IRQS[@]}"; do cat "/proc/irq/$irq/smp_affinity_list"; done | sort -u | wc -l
}

systemctl start nodemedic
check nodemedic_started wait_for 60 "nodemedic /healthz" bash -c "$(declare -f http_get); http_get /healthz | grep -q ok"
check unit_active systemctl -q is-active nodemedic
check no_collapse_at_start wait_for 30 "a sample with no collapse" \
    bash -c "$(declare -f http_get); http_get /metrics | grep -q '^nodemedic_samples_total [1-9]' && ! http_get /metrics | grep -q 'nodemedic_irq_collapsed{.*} 1'"

echo "== the incident: irqbalance stuck, every NIC queue IRQ on CPU 0"
systemctl kill -s STOP irqbalance
for irq in "${IRQS[@]}"; do echo 1 >"/proc/irq/$irq/smp_affinity"; done
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
for irq in "${IRQS[@]}"; do echo 1 >"/proc/irq/$irq/smp_affinity"; done
sleep 8
check one_action_in_cooldown [ "$(audit_count irqbalance_restart done)" -eq 1 ]
check metrics_count bash -c "$(declare -f http_get); http_get /metrics | grep -q 'nodemedic_remediation_actions_total{action=\"irqbalance_restart\",result=\"done\"} 1'"
systemctl kill -s CONT irqbalance || true
echo "irqbalance pid now $(pidof irqbalance)"
finish
