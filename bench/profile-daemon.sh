#!/usr/bin/env bash
# A perf profile of a running daemon that samples once a second and is scraped once a second
# with gzip on a kept-alive connection, as Prometheus scrapes (BENCHMARKS.md, "Where a second
# goes on this node"). Needs perf and a binary with symbols: the shipped build's command with
# CARGO_PROFILE_RELEASE_STRIP=none.
#
#   bench/profile-daemon.sh BINARY [SECONDS] [OUTDIR]
#   perf report -i OUTDIR/perf.data --children --sort sym --stdio -g none
#
# DWARF call graphs inflate the process's CPU several times: read shares from it, not ms.
set -u
[ $# -ge 1 ] || { echo "usage: $0 BINARY [SECONDS] [OUTDIR]" >&2; exit 2; }
BENCH=$(dirname "$(readlink -f "$0")")
BIN=$(readlink -f "$1"); SECS=${2:-120}; OUT=${3:-$(mktemp -d /tmp/nodemedic-profile.XXXXXX)}
# A port nothing listens on, as bench/daemon-cost.py takes one (procstat.free_port).
PORT=$(cd "$BENCH" && python3 -c 'from procstat import free_port; print(free_port())')
mkdir -p "$OUT"; cd "$OUT" || exit 1
printf 'sample_interval = "1s"\n' > nodemedic.toml
"$BIN" --config "$OUT/nodemedic.toml" run --web.listen-address "127.0.0.1:$PORT" >daemon.log 2>&1 &
d=$!
up=0
for _ in $(seq 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/metrics" && { up=1; break; }
    sleep 0.2
done
if [ "$up" != 1 ]; then
    echo "profile-daemon.sh: no 200 from /metrics within 10 s; $OUT/daemon.log:" >&2
    tail -n 20 daemon.log >&2
    kill "$d" 2>/dev/null
    exit 1
fi
sleep 3
python3 - "$SECS" "$PORT" <<'PY' &
import http.client, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
start = time.time()
for i in range(n):
    c.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse(); r.read()
    assert r.status == 200 and r.getheader("Content-Encoding") == "gzip", (r.status, r.getheader("Content-Encoding"))
    time.sleep(max(0.0, start + i + 1 - time.time()))
PY
s=$!
t0=$(awk '{print $14+$15}' "/proc/$d/stat")
perf record -e cpu-clock -F 20000 --call-graph dwarf,16384 -p "$d" -o perf.data -- sleep "$SECS" 2>perf.err
t1=$(awk '{print $14+$15}' "/proc/$d/stat")
wait "$s"; rc=$?
echo "scraper rc=$rc"
echo "daemon CPU ticks over the window: $((t1 - t0)) (of ${SECS}s); perf.data in $OUT"
kill "$d"; wait "$d" 2>/dev/null
exit "$rc"
