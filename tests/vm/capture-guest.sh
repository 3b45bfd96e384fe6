# shellcheck shell=bash
# Sourced by nodemedic-guest.sh when the host put it in the share (tests/vm/nodemedic-e2e.sh
# does with NODEMEDIC_VM_CAPTURE set): `capture NAME` copies the files this kernel writes, as
# it writes them, into $H/capture/NAME, laid out as a fixture tree of tests/fixtures (paths
# under the tree's root as under /). Nothing is generated: each file is read from the kernel
# with cat, and each sysfs symlink is made with the target the kernel gives it. The one file
# that is not the kernel's, expected.json, is what the exposition tests compare with: the
# online CPUs and each IRQ's count summed over them, by awk from the captured
# /proc/interrupts, not by nodemedic.
#
#   proc/{interrupts,softirqs,stat,net/softnet_stat,pressure/*,cmdline,cpuinfo,sys/kernel/osrelease}
#   proc/irq/default_smp_affinity, proc/irq/N/{smp_affinity,smp_affinity_list,
#       effective_affinity,effective_affinity_list,node}
#   sys/kernel/irq/N/{chip_name,hwirq,name,actions,type,per_cpu_count,wakeup}
#   sys/devices/system/cpu/{possible,present,online,offline,isolated,nohz_full},
#       cpuN/topology/*, sys/devices/system/node/{possible,online,nodeK/cpulist,nodeK/cpumap}
#   sys/bus/pci/devices/ADDR -> the device's directory, with numa_node, local_cpulist,
#       local_cpus, class, vendor, device, irq, msi_irqs/*, driver ->
#   sys/class/net/IF -> the interface's directory, with ifindex, device ->
# NAME.facts beside the tree: the kernel, irqbalance, the CPU topology and caches, for the
# fixture's README.

capture_file() { # ROOT PATH: PATH's content now, at ROOT/PATH (a file that cannot be read is left out)
    [ -r "$2" ] || return 0
    mkdir -p "$1$(dirname "$2")"
    cat "$2" >"$1$2" 2>/dev/null || rm -f "$1$2"
}
capture_link() { # ROOT PATH: PATH's symlink, with the kernel's target, at ROOT/PATH
    [ -L "$2" ] || return 0
    mkdir -p "$1$(dirname "$2")"
    ln -sfn "$(readlink "$2")" "$1$2"
}
capture() { # NAME
    local out=$H/capture/$1 f d real
    rm -rf "$out"
    mkdir -p "$out"
    for f in interrupts softirqs stat net/softnet_stat pressure/cpu pressure/memory pressure/io \
        pressure/irq cmdline cpuinfo sys/kernel/osrelease irq/default_smp_affinity; do
        capture_file "$out" "/proc/$f"
    done
    for d in /proc/irq/[0-9]*; do
        for f in smp_affinity smp_affinity_list effective_affinity effective_affinity_list node; do
            capture_file "$out" "$d/$f"
        done
    done
    for d in /sys/kernel/irq/[0-9]*; do
        for f in chip_name hwirq name actions type per_cpu_count wakeup; do
            capture_file "$out" "$d/$f"
        done
    done
    for f in possible present online offline isolated nohz_full; do
        capture_file "$out" "/sys/devices/system/cpu/$f"
    done
    for f in /sys/devices/system/cpu/cpu[0-9]*/topology/*; do capture_file "$out" "$f"; done
    for f in /sys/devices/system/node/possible /sys/devices/system/node/online \
        /sys/devices/system/node/node[0-9]*/cpulist /sys/devices/system/node/node[0-9]*/cpumap; do
        capture_file "$out" "$f"
    done
    for d in /sys/bus/pci/devices/*; do
        capture_link "$out" "$d"
        real=$(readlink -f "$d")
        for f in numa_node local_cpulist local_cpus class vendor device irq; do
            capture_file "$out" "$real/$f"
        done
        for f in "$real"/msi_irqs/*; do capture_file "$out" "$f"; done
        capture_link "$out" "$real/driver"
    done
    for d in /sys/class/net/*; do
        capture_link "$out" "$d"
        real=$(readlink -f "$d")
        capture_file "$out" "$real/ifindex"
        capture_link "$out" "$real/device"
    done
    # The parser's view is nodemedic's; this is awk's: each numeric row's counts over the
    # header's CPUs.
    awk 'NR == 1 { n = NF; next }
        $1 ~ /^[0-9]+:$/ {
            s = 0
            for (i = 2; i <= n + 1; i++) s += $i
            sub(":", "", $1)
            rows = rows sprintf("%s\n  \"%s\": %d", (rows == "" ? "" : ","), $1, s)
        }
        END { printf "{\n \"irq_interrupts\": {%s\n },\n \"online_cpus\": %d\n}\n", rows, n }' \
        "$out/proc/interrupts" >"$out/expected.json"
    {
        echo "captured: $(date -u +%FT%TZ), guest uptime $(cut -d' ' -f1 /proc/uptime) s"
        echo "kernel: $(uname -r) ($(uname -m)); $(grep -m1 -i 'model name\|CPU part' /proc/cpuinfo)"
        echo "irqbalance: $(irqbalance --version 2>&1 | head -n1), $(systemctl is-active irqbalance)"
        echo "systemd: $(systemctl --version | head -n1)"
        for f in /sys/devices/system/cpu/cpu[0-9]*; do
            echo "$(basename "$f"): package $(cat "$f/topology/physical_package_id" 2>/dev/null)," \
                "cluster $(cat "$f/topology/cluster_id" 2>/dev/null)," \
                "package_cpus $(cat "$f/topology/package_cpus_list" 2>/dev/null)," \
                "caches: $(cat "$f"/cache/index*/level 2>/dev/null | tr '\n' ' ')"
        done
        grep -h -i -E 'GIC|ITS|cacheinfo|MSI' <(dmesg 2>/dev/null) | head -n 40
    } >"$H/capture/$1.facts" 2>&1
    echo "captured $1: $(find "$out" -type f | wc -l) files, $(find "$out" -type l | wc -l) links"
}
