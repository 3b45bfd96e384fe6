# shellcheck shell=bash
# What the guest sides of the QEMU tests share (sourced from the share, /mnt/host): the
# PASS/FAIL count, waiting for a condition, and the virtio-net NIC's queue IRQs that the
# incident pins. Each host runner copies it into the share beside test.sh.
#   check NAME COMMAND...        runs COMMAND; prints PASS/FAIL NAME and counts it
#   wait_for SECONDS WHAT CMD... until CMD succeeds, at most SECONDS
#   nic_queue_irqs               sets nic, vdev and IRQS (the NIC's input/output queue IRQs)
#   pin_to_cpu0, affinities, distinct   the incident, and how IRQS are placed now

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
find_nic() {
    local d
    for d in /sys/class/net/*; do
        if [ "$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")" = virtio_net ]; then
            basename "$d"
            return 0
        fi
    done
    return 1
}
nic_queue_irqs() {
    # The test may start before udev has loaded virtio_net (Debian 13's boot under TCG did, as
    # node-agent.sh says): load it, and wait for the NIC.
    modprobe virtio_net 2>/dev/null || true
    check nic_found wait_for 60 "the virtio-net NIC" find_nic
    nic=$(find_nic)
    vdev=$(basename "$(readlink -f "/sys/class/net/$nic/device")")
    mapfile -t IRQS < <(awk -v d="$vdev" '$NF ~ "^"d"-(input|output)\\." {sub(":","",$1); print $1}' /proc/interrupts)
    echo "NIC $nic = $vdev, queue IRQs: ${IRQS[*]}"
}
pin_to_cpu0() { # the incident: every NIC queue IRQ on CPU 0
    local irq
    for irq in "${IRQS[@]}"; do echo 1 >"/proc/irq/$irq/smp_affinity"; done
}
affinities() {
    local irq
    for irq in "${IRQS[@]}"; do printf '%s:%s ' "$irq" "$(cat "/proc/irq/$irq/smp_affinity_list")"; done
    echo
}
distinct() {
    local irq
    for irq in "${IRQS[@]}"; do cat "/proc/irq/$irq/smp_affinity_list"; done | sort -u | wc -l
}
