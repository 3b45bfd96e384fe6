#!/usr/bin/env bash
# Guest side of bench/probe-overhead.sh.
set -euo pipefail
H=/mnt/host
install -m 0755 "$H/perfgen" /usr/local/bin/perfgen
dpkg -i "$H/nodemedic.deb" >/dev/null
systemctl stop nodemedic
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
BATCH=100
rate() { perfgen bench "$SECONDS_PER_RUN" "$BATCH" | sed -n 's/.* rate=\([0-9]*\).*/\1/p'; }
cpu_ns() { systemctl show -p CPUUsageNSec --value nodemedic; }
echo "kernel $(uname -r), $(nproc) vCPUs (TCG), perfgen bench ${SECONDS_PER_RUN}s batch $BATCH, outputs/s:"
declare -a none probes bt
for round in 1 2 3; do
    none+=("$(rate)")

    sysctl -qw kernel.bpf_stats_enabled=1
    systemctl start nodemedic
    until curl -sf localhost:9847/metrics | grep -q '^nodemedic_probe_up{probe="perf_event_output"} 1'; do sleep 1; done
    c0=$(cpu_ns)
    probes+=("$(rate)")
    sleep 2
    c1=$(cpu_ns)
    m=$(curl -sf localhost:9847/metrics)
    runs=$(printf '%s\n' "$m" | awk 'index($0, "nodemedic_probe_bpf_runs_total{probe=\"perf_event_output\"} ") == 1 { print $NF }')
    secs=$(printf '%s\n' "$m" | awk 'index($0, "nodemedic_probe_bpf_run_seconds_total{probe=\"perf_event_output\"} ") == 1 { print $NF }')
    wruns=$(printf '%s\n' "$m" | awk 'index($0, "nodemedic_probe_bpf_runs_total{probe=\"perf_event_wakeup\"} ") == 1 { print $NF }')
    wsecs=$(printf '%s\n' "$m" | awk 'index($0, "nodemedic_probe_bpf_run_seconds_total{probe=\"perf_event_wakeup\"} ") == 1 { print $NF }')
    echo "  round $round: probe perf_event_output $runs runs $(awk -v r="$runs" -v s="$secs" 'BEGIN { printf "%.0f ns/call", s * 1e9 / r }'), perf_event_wakeup $wruns runs $(awk -v r="$wruns" -v s="$wsecs" 'BEGIN { if (r > 0) printf "%.0f ns/call", s * 1e9 / r }'); nodemedic CPU $(( (c1 - c0) / 1000000 )) ms over the $((SECONDS_PER_RUN + 2)) s run"
    systemctl stop nodemedic
    sysctl -qw kernel.bpf_stats_enabled=0

    bpftrace -e 'kprobe:perf_event_output { @o[comm] = count(); } kprobe:perf_event_wakeup { @w[comm] = count(); }' >/tmp/bt.out 2>&1 &
    b=$!
    until grep -q Attaching /tmp/bt.out; do sleep 1; done
    bt+=("$(rate)")
    kill -INT "$b"
    wait "$b" || true
done
median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
n=$(median "${none[@]}")
p=$(median "${probes[@]}")
b=$(median "${bt[@]}")
echo "no probes:         ${none[*]}  median $n"
echo "nodemedic probes:  ${probes[*]}  median $p ($(awk -v a="$p" -v b="$n" 'BEGIN { printf "%+.1f%%", (a - b) * 100 / b }'))"
echo "bpftrace kprobes:  ${bt[*]}  median $b ($(awk -v a="$b" -v b="$n" 'BEGIN { printf "%+.1f%%", (a - b) * 100 / b }'))"
