#!/usr/bin/env bash
# Memory of both builds where the eBPF probes attach: one boot of the QEMU guest (tests/vm/run.sh,
# Debian 12's 6.1 kernel with BTF, TCG), each build run as root with the shipped configuration
# (deploy/nodemedic.toml, one sample a second), probes enabled and disabled, all four at once
# (bench/memory.py's figures are from this machine, where the probes fail to attach).
#   bench/memory-guest.sh NAME=BINARY [NAME=BINARY ...]
# e.g. the .deb's and the image's builds:
#   bench/memory-guest.sh glibc=target/release/nodemedic \
#       musl=target/x86_64-unknown-linux-musl/release/nodemedic
# Printed per process, after 3 samples and a scrape and again 20 s later: VmRSS, RssAnon, the
# transparent huge pages in it (AnonHugePages), VmHWM (MiB), whether its probes were up, and
# the VmHWM of its probes' loader (the child process that loads them; "-" for builds that load
# them in the daemon); and the guest kernel's THP mode.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "$0")/..")
[ $# -gt 0 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
DIR=$(mktemp -d /tmp/nodemedic-memory-guest.XXXXXX)
names=()
for b in "$@"; do
    name=${b%%=*} bin=${b#*=}
    [ "$name" != "$b" ] && [ -x "$bin" ] || { echo "memory-guest: $b: expected NAME=EXECUTABLE" >&2; exit 2; }
    cp "$bin" "$DIR/nodemedic-$name"
    names+=("$name")
done
for probes in true false; do
    # The [probes] section's own switch only.
    awk -v on="$probes" '/^\[/{sec=$0} sec=="[probes]" && /^enabled = /{$0="enabled = " on} {print}' \
        "$ROOT/deploy/nodemedic.toml" | sed 's/^sample_interval = .*/sample_interval = "1s"/' >"$DIR/probes-$probes.toml"
done
grep -q '^sample_interval = "1s"' "$DIR/probes-true.toml" || { echo "memory-guest: no sample_interval in deploy/nodemedic.toml" >&2; exit 1; }
cat >"$DIR/test.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
H=/mnt/host
NAMES="${names[*]}"
EOF
cat >>"$DIR/test.sh" <<'EOF'
kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
huge() { awk '$1 == "AnonHugePages:" { print $2 }' "/proc/$1/smaps_rollup"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
port=19900
declare -A pid portof
echo "kernel $(uname -r), $(nproc) vCPUs (TCG), BTF $(stat -c %s /sys/kernel/btf/vmlinux) bytes, THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
for name in $NAMES; do
    for probes in true false; do
        port=$((port + 1))
        "$H/nodemedic-$name" --config "$H/probes-$probes.toml" --web.listen-address "127.0.0.1:$port" run \
            >"/tmp/$name-$probes.log" 2>&1 &
        pid[$name-$probes]=$!
        portof[$name-$probes]=$port
    done
done
samples() { curl -sf "localhost:$1/status" | sed -n 's/.*"samples_total": *\([0-9]*\).*/\1/p' | head -n1; }
report() {
    echo "| process | RSS MiB | of which anonymous MiB | of which huge pages MiB | VmHWM MiB | probes up | loader VmHWM MiB |"
    echo "|---|---|---|---|---|---|---|"
    for k in "${!pid[@]}"; do
        p=${pid[$k]}
        up=$(curl -sf "localhost:${portof[$k]}/metrics" | grep -c '^nodemedic_probe_up{.*} 1' || true)
        loader=$(sed -n "s/.*the eBPF probes' loader .* answered.*peak_kib=\([0-9]*\).*/\1/p" "/tmp/$k.log" | head -n1)
        [ -n "$loader" ] && loader=$(mib "$loader")
        echo "| ${k/-true/ probes on} | $(mib "$(kib "$p" VmRSS)") | $(mib "$(kib "$p" RssAnon)") | $(mib "$(huge "$p")") | $(mib "$(kib "$p" VmHWM)") | $up | ${loader:--} |" \
            | sed 's/-false/ probes off/'
    done | sort
}
for k in "${!pid[@]}"; do
    for _ in $(seq 240); do
        n=$(samples "${portof[$k]}" || true)
        [ "${n:-0}" -ge 3 ] && break
        sleep 0.5
    done
    [ "${n:-0}" -ge 3 ] || { echo "$k: no 3 samples"; cat "/tmp/$k.log"; exit 1; }
    curl -sf "localhost:${portof[$k]}/metrics" >/dev/null
done
echo "### after 3 samples and a scrape"
echo
report
sleep 20
echo
echo "### 20 s later"
echo
report
kill "${pid[@]}"
EOF
chmod +x "$DIR/test.sh"
NODEMEDIC_VM_TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-900} bash "$ROOT/tests/vm/run.sh" "$DIR" || true
cat "$DIR/stdout"
[ -s "$DIR/stderr" ] && sed 's/^/guest stderr: /' "$DIR/stderr" >&2
test "$(cat "$DIR/exit-code" 2>/dev/null)" = 0
