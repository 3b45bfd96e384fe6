#!/usr/bin/env bash
# Issue 6's two remaining side-by-side figures, in one invocation:
#  1. node_exporter's `pressure` collector vs nodemedic's node PSI collector, both over this
#     machine's /proc/pressure/*;
#  2. the disk commit probe (write 2300 B + fdatasync, io_uring and syscalls) vs
#     `fio --rw=write --ioengine=sync --fdatasync=1 --bs=2300` (etcd's recommended check)
#     in the same directory.
# Usage: bench/pressure-commit-bench.sh [scrapes=2000] [seconds per commit round=2] [dir=/var/tmp] [rounds=8]
set -euo pipefail
cd "$(dirname "$0")/.."
SCRAPES=${1:-2000}
SECS=${2:-2}
DIR=${3:-/var/tmp}
ROUNDS=${4:-8}
PORT=19177
TCK=$(getconf CLK_TCK)
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
ensure_packages fio prometheus-node-exporter >&2

echo "== $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
cargo bench -p nodemedic-collect --bench pressure_commit --no-run -q 2>/dev/null

echo "-- node_exporter $(prometheus-node-exporter --version 2>&1 | head -1 | awk '{print $3}') --collector.disable-defaults --collector.pressure --web.disable-exporter-metrics"
prometheus-node-exporter --web.listen-address=127.0.0.1:$PORT --collector.disable-defaults \
    --collector.pressure --web.disable-exporter-metrics >/dev/null 2>&1 &
NE=$!
trap 'kill $NE 2>/dev/null || true' EXIT
sleep 1
python3 - "$NE" "$SCRAPES" "$PORT" "$TCK" <<'PY'
import sys, time, urllib.request, statistics
pid, n, port, tck = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
url = f"http://127.0.0.1:{port}/metrics"
for _ in range(20):
    urllib.request.urlopen(url).read()
durs, walls = [], []
c0 = cpu()
for _ in range(n):
    t = time.perf_counter()
    body = urllib.request.urlopen(url).read().decode()
    walls.append(time.perf_counter() - t)
    for line in body.splitlines():
        if line.startswith('node_scrape_collector_duration_seconds{collector="pressure"}'):
            durs.append(float(line.split()[-1]))
c1 = cpu()
durs.sort(); walls.sort()
series = sum(1 for l in body.splitlines() if l.startswith("node_pressure"))
print(f"node_exporter pressure collector: {n} scrapes, {series} node_pressure series: "
      f"collector duration median {durs[len(durs)//2]*1e6:.1f} µs, p90 {durs[len(durs)*9//10]*1e6:.1f} µs; "
      f"whole scrape wall median {walls[len(walls)//2]*1e6:.0f} µs; "
      f"node_exporter process CPU {(c1-c0)/tck/n*1e6:.1f} µs per scrape (HTTP + encoding + collector + Go runtime)")
PY
kill $NE; wait $NE 2>/dev/null || true
trap - EXIT

echo "-- nodemedic (same minutes)"
NODEMEDIC_BENCH_WHAT=pressure NODEMEDIC_BENCH_ROUNDS=$((SCRAPES * 10)) \
    cargo bench -q -p nodemedic-collect --bench pressure_commit 2>/dev/null

echo "-- commit probe vs fio in $DIR ($(df -T "$DIR" | awk 'NR==2{print $2, $1}')): $ROUNDS interleaved rounds of $SECS s each"
# This disk's latency swings 10x from minute to minute (a shared virtual disk), so the three
# run in short interleaved rounds and are compared per round; fio writes a 1 MiB file in a
# loop, the probe's own byte bound, so both rewrite the same amount of allocated space.
FIODIR=$(mktemp -d "$DIR/nodemedic-fio.XXXXXX")
trap 'rm -rf "$FIODIR"' EXIT
for r in $(seq "$ROUNDS"); do
    NODEMEDIC_BENCH_WHAT=commit NODEMEDIC_BENCH_COMMIT_SECS=$SECS NODEMEDIC_BENCH_COMMIT_DIR=$DIR \
        cargo bench -q -p nodemedic-collect --bench pressure_commit 2>/dev/null | sed "s/^/round $r: /"
    fio --name=etcd-wal --directory="$FIODIR" --rw=write --ioengine=sync --fdatasync=1 --bs=2300 \
        --size=1m --runtime="$SECS" --time_based --output-format=json >"$FIODIR/out.json"
    python3 - "$FIODIR/out.json" "$r" <<'PY2'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
s = j["sync"]["lat_ns"]; w = j["write"]["clat_ns"]
p = s.get("percentile", {})
n = s["N"]
cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["elapsed"] * 1e6 / n
print(f"round {sys.argv[2]}: fio (sync, fdatasync=1, bs=2300, 1 MiB file): {n} commits: write+fdatasync mean {(s['mean']+w['mean'])/1e3:.1f} µs "
      f"(fdatasync p50 {p.get('50.000000', 0)/1e3:.1f} µs, p99 {p.get('99.000000', 0)/1e3:.1f} µs); CPU {cpu:.1f} µs per commit")
PY2
    rm -f "$FIODIR"/etcd-wal*
done
