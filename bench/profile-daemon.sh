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
BIN=$(readlink -f "$1"); SECS=${2:-120}; OUT=${3:-$(mktemp -d /tmp/nodemedic-profile.XXXXXX)}
mkdir -p $OUT; cd $OUT
printf 'sample_interval = "1s"\n' > nodemedic.toml
$BIN --config $OUT/nodemedic.toml run --web.listen-address 127.0.0.1:19123 >daemon.log 2>&1 &
d=$!
for i in $(seq 50); do curl -sf -o /dev/null http://127.0.0.1:19123/metrics && break; sleep 0.2; done
sleep 3
python3 - $SECS <<'PY' &
import http.client, sys, time
n = int(sys.argv[1]); c = http.client.HTTPConnection("127.0.0.1", 19123, timeout=10)
start = time.time()
for i in range(n):
    c.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse(); r.read()
    assert r.status == 200 and r.getheader("Content-Encoding") == "gzip", (r.status, r.getheader("Content-Encoding"))
    time.sleep(max(0.0, start + i + 1 - time.time()))
PY
s=$!
t0=$(awk '{print $14+$15}' /proc/$d/stat)
perf record -e cpu-clock -F 20000 --call-graph dwarf,16384 -p $d -o perf.data -- sleep $SECS 2>perf.err
t1=$(awk '{print $14+$15}' /proc/$d/stat)
wait $s; echo "scraper rc=$?"
echo "daemon CPU ticks over the window: $((t1 - t0)) (of ${SECS}s)"
kill $d; wait $d 2>/dev/null
