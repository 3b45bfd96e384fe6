#!/usr/bin/env bash
# scrape-bench.sh — compare the scrape cost of nodemedic and node_exporter,
# side by side in the same run, against one fixture tree (DIR/proc, DIR/sys).
#
# Usage:
#   bench/scrape-bench.sh [options] FIXTURE_DIR
#
# Options (each also settable through the env var in brackets):
#   -n K        timed scrapes per exporter              [SCRAPES, default 200]
#   -i MS       interval between scrape ticks, in ms    [INTERVAL_MS, default 200]
#               (also written to nodemedic's config as sample_interval)
#   -b PATH     nodemedic binary       [NODEMEDIC, default <repo>/target/release/nodemedic]
#   -e PATH     node_exporter binary   [NODE_EXPORTER, default ~/go/bin/node_exporter]
#   -N          skip the nodemedic half                 [SKIP_NODEMEDIC=1]
#   -E          skip the node_exporter half             [SKIP_NODE_EXPORTER=1]
#   -k          keep the work dir (logs, raw per-scrape times, last scrape bodies) [KEEP=1]
#               [STARTUP_TIMEOUT, default 120]: seconds to wait for each exporter's first 200
#   -h          this help
#   [NODEMEDIC_EXTRA_CONFIG]: TOML appended to nodemedic's config, e.g.
#               $'[probes]\nenabled = false\n[remediation]\nmode = "off"'
#
# Both exporters are started, listen on 127.0.0.1 only, and are scraped in the
# same loop: each tick (every -i ms) scrapes each exporter once with curl
# (order alternates per tick), so both see the same machine load.
# Per exporter it reports: curl time_total per scrape (p50/p95/max/mean),
# CPU time (utime+stime from /proc/PID/stat) consumed between just before the
# first timed scrape and just after the last, divided by the number of scrapes,
# VmHWM/VmRSS from /proc/PID/status at the end, and the series count
# (non-comment lines of the last scrape).
# For nodemedic the CPU figure includes its background sampling, which runs at
# the same rate as the scrapes (sample_interval = interval).
# A second table gives each exporter's CPU as % of one core over the timed window
# and, for nodemedic, CPU per sample: window CPU / samples taken in the window
# (nodemedic_samples_total of the first vs the last timed scrape). When scrapes
# are slower than the interval the loop overruns its schedule, nodemedic keeps
# sampling every interval, and only the per-sample figure is comparable.
# node_scrape_collector_success of node_exporter is checked in the first and
# last timed scrape; a failing collector is reported as a WARNING.
# Each curl opens a new TCP connection (no keep-alive), unlike Prometheus.
# Output: a Markdown table on stdout; progress and warnings on stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRAPES=${SCRAPES:-200}
INTERVAL_MS=${INTERVAL_MS:-200}
NODEMEDIC=${NODEMEDIC:-$here/../target/release/nodemedic}
NODE_EXPORTER=${NODE_EXPORTER:-$HOME/go/bin/node_exporter}
SKIP_NODEMEDIC=${SKIP_NODEMEDIC:-0}
SKIP_NODE_EXPORTER=${SKIP_NODE_EXPORTER:-0}
KEEP=${KEEP:-0}
STARTUP_TIMEOUT=${STARTUP_TIMEOUT:-120}
NODEMEDIC_EXTRA_CONFIG=${NODEMEDIC_EXTRA_CONFIG:-}

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die() { echo "scrape-bench: $*" >&2; exit 1; }
log() { echo "scrape-bench: $*" >&2; }

while getopts ":n:i:b:e:NEkh" opt; do
  case $opt in
    n) SCRAPES=$OPTARG ;;
    i) INTERVAL_MS=$OPTARG ;;
    b) NODEMEDIC=$OPTARG ;;
    e) NODE_EXPORTER=$OPTARG ;;
    N) SKIP_NODEMEDIC=1 ;;
    E) SKIP_NODE_EXPORTER=1 ;;
    k) KEEP=1 ;;
    h) usage; exit 0 ;;
    :) die "option -$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (see -h)" ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -eq 1 ]] || { usage >&2; exit 2; }
[[ $SCRAPES =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer"
[[ $INTERVAL_MS =~ ^[1-9][0-9]*$ ]] || die "-i must be a positive integer (ms)"
[[ $SKIP_NODEMEDIC == 1 && $SKIP_NODE_EXPORTER == 1 ]] && die "both halves skipped"
command -v curl >/dev/null || die "curl not found"

fixture=$(cd "$1" && pwd) || die "no such fixture dir: $1"
root=${fixture%/}                      # "/" -> "" so paths read /proc, not //proc
[[ -d $root/proc ]] || die "$fixture/proc does not exist (node_exporter panics at start without it)"
[[ -d $root/sys ]] || log "warning: $fixture/sys does not exist"
[[ -f $root/proc/stat ]] || log "warning: $root/proc/stat missing: node_exporter's stat collector will fail (node_scrape_collector_success{collector=\"stat\"} 0)"

names=()
declare -A bin pid port
if [[ $SKIP_NODE_EXPORTER != 1 ]]; then
  [[ -x $NODE_EXPORTER ]] || die "node_exporter not executable: $NODE_EXPORTER (go install github.com/prometheus/node_exporter@v1.12.1)"
  names+=(node_exporter); bin[node_exporter]=$NODE_EXPORTER
fi
if [[ $SKIP_NODEMEDIC != 1 ]]; then
  [[ -x $NODEMEDIC ]] || die "nodemedic not executable: $NODEMEDIC (build it, set NODEMEDIC=/path or -b, or skip with -N)"
  names+=(nodemedic); bin[nodemedic]=$NODEMEDIC
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/scrape-bench.XXXXXX")
cleanup() {
  local n p
  for n in "${!pid[@]}"; do
    p=${pid[$n]}
    kill -TERM "$p" 2>/dev/null || true
  done
  for n in "${!pid[@]}"; do
    p=${pid[$n]}
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [[ $KEEP == 1 ]]; then log "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Sets $picked to a loopback port nobody listens on (checked by trying to
# connect) and that this run has not handed out yet. No subshell: keeps state.
used_ports=" "
pick_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 20000))
    [[ $used_ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then used_ports+="$p "; picked=$p; return; fi
  done
  die "no free loopback port found"
}

clk_tck=$(getconf CLK_TCK)
# utime+stime of a process, in clock ticks (fields 14,15; parsed after the last ')').
cpu_ticks() { local s; s=$(<"/proc/$1/stat"); s=${s##*) }; set -- $s; echo $(( ${12} + ${13} )); }
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
now_us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }

# ---- start both exporters ----
for n in "${names[@]}"; do
  pick_port; port[$n]=$picked
  case $n in
    node_exporter)
      # --collector.softirqs is node_exporter >= 1.6; Debian 12's 1.5 has /proc/stat's
      # softirq totals only (collector.stat).
      softirqs=()
      "${bin[$n]}" --help 2>&1 | grep -q -- 'collector.softirqs' && softirqs=(--collector.softirqs)
      "${bin[$n]}" --path.procfs "$root/proc" --path.sysfs "$root/sys" \
        --collector.disable-defaults --collector.interrupts "${softirqs[@]}" \
        --collector.stat --collector.softnet \
        --web.listen-address "127.0.0.1:${port[$n]}" >"$work/$n.log" 2>&1 &
      ;;
    nodemedic)
      printf 'sample_interval = "%dms"\n%s\n' "$INTERVAL_MS" "$NODEMEDIC_EXTRA_CONFIG" >"$work/nodemedic.toml"
      # A fixture tree brings its own cgroup tree (or none); "/" reads the real one.
      cg=()
      [[ -n $root ]] && cg=(--path.cgroupfs "$root/sys/fs/cgroup")
      "${bin[$n]}" run --path.procfs "$root/proc" --path.sysfs "$root/sys" "${cg[@]}" \
        --path.rootfs "${root:-/}" --web.listen-address "127.0.0.1:${port[$n]}" \
        --config "$work/nodemedic.toml" >"$work/$n.log" 2>&1 &
      ;;
  esac
  pid[$n]=$!
  log "started $n pid ${pid[$n]} on 127.0.0.1:${port[$n]}"
done

# ---- wait until each serves /metrics with 200 (that scrape is the untimed warm-up) ----
# A full node_exporter scrape of a 256-CPU tree takes seconds on a small or busy machine:
# allow each attempt up to 30 s and the whole wait up to STARTUP_TIMEOUT seconds.
for n in "${names[@]}"; do
  url="http://127.0.0.1:${port[$n]}/metrics"
  ok=0
  deadline=$(( $(now_us) + STARTUP_TIMEOUT * 1000000 ))
  while (( $(now_us) < deadline )); do
    kill -0 "${pid[$n]}" 2>/dev/null || { tail -20 "$work/$n.log" >&2; die "$n exited during startup"; }
    rc=0
    code=$(curl -s -o "$work/$n.warmup" -w '%{http_code}' --max-time 30 "$url") || rc=$?
    [[ $code == 200 && $rc == 0 ]] && { ok=1; break; }
    sleep 0.1
  done
  [[ $ok == 1 ]] || { tail -20 "$work/$n.log" >&2; die "$n did not serve $url with 200 within ${STARTUP_TIMEOUT} s"; }
done

# ---- timed, interleaved scrapes ----
declare -A cpu0 cpu1 fails
for n in "${names[@]}"; do cpu0[$n]=$(cpu_ticks "${pid[$n]}"); fails[$n]=0; : >"$work/$n.times"; done
log "running $SCRAPES scrapes per exporter, one every ${INTERVAL_MS} ms (~$(( SCRAPES * INTERVAL_MS / 1000 )) s)"
t_start=$(now_us)
for ((i = 0; i < SCRAPES; i++)); do
  order=("${names[@]}")
  if (( i % 2 == 1 && ${#names[@]} == 2 )); then order=("${names[1]}" "${names[0]}"); fi
  for n in "${order[@]}"; do
    # A timed-out transfer can still report http_code 200 (headers arrived): count curl's
    # exit status too.
    rc=0
    out=$(curl -s -o "$work/$n.last" -w '%{http_code} %{time_total}' --max-time 30 \
            "http://127.0.0.1:${port[$n]}/metrics") || rc=$?
    code=${out%% *}; t=${out##* }
    [[ $code == 200 && $rc == 0 ]] || fails[$n]=$(( ${fails[$n]} + 1 ))
    echo "$t" >>"$work/$n.times"
    if (( i == 0 )); then cp "$work/$n.last" "$work/$n.first"; fi
  done
  next=$(( t_start + (i + 1) * INTERVAL_MS * 1000 ))
  wait_us=$(( next - $(now_us) ))
  if (( wait_us > 0 )); then sleep "$(printf '%d.%06d' $((wait_us / 1000000)) $((wait_us % 1000000)))"; fi
done
for n in "${names[@]}"; do
  kill -0 "${pid[$n]}" 2>/dev/null || die "$n died during the run (see ${work}/$n.log; rerun with -k)"
  cpu1[$n]=$(cpu_ticks "${pid[$n]}")
done
t_end=$(now_us)
window_ms=$(( (t_end - t_start) / 1000 ))
expected_ms=$(( SCRAPES * INTERVAL_MS ))

# ---- report ----
echo
echo "Fixture: \`$fixture\`, $SCRAPES scrapes each, every ${INTERVAL_MS} ms, interleaved in one run; $(nproc) CPUs, CLK_TCK=$clk_tck."
echo "Timed window: $(awk -v w="$window_ms" 'BEGIN { printf "%.1f", w / 1000 }') s (schedule: $(( expected_ms / 1000 )) s); load average at end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| exporter | scrapes (failed) | series | series w/o go_/process_/promhttp_ | p50 ms | p95 ms | max ms | mean ms | CPU ms total | CPU ms/scrape | VmHWM MiB | VmRSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
declare -A cpu_per
for n in "${names[@]}"; do
  series=$(grep -cv -e '^#' -e '^[[:space:]]*$' "$work/$n.last" || true)
  own=$(grep -v -e '^#' -e '^[[:space:]]*$' "$work/$n.last" | grep -cv -E '^(go_|process_|promhttp_)' || true)
  read -r p50 p95 max mean < <(sort -g "$work/$n.times" | awk '
    { v[NR] = $1 * 1000; s += v[NR] }
    END { i50 = int(0.50 * NR + 0.999999); i95 = int(0.95 * NR + 0.999999);
          printf "%.2f %.2f %.2f %.2f\n", v[i50], v[i95], v[NR], s / NR }')
  cpu_ms=$(( (${cpu1[$n]} - ${cpu0[$n]}) * 1000 / clk_tck ))
  cpu_per[$n]=$(awk -v c="$cpu_ms" -v k="$SCRAPES" 'BEGIN { printf "%.3f", c / k }')
  hwm=$(awk -v x="$(status_kb "${pid[$n]}" VmHWM)" 'BEGIN { printf "%.1f", x / 1024 }')
  rss=$(awk -v x="$(status_kb "${pid[$n]}" VmRSS)" 'BEGIN { printf "%.1f", x / 1024 }')
  label=$n; [[ $n == nodemedic ]] && label="nodemedic (incl. sampling every ${INTERVAL_MS} ms)"
  echo "| $label | $SCRAPES (${fails[$n]}) | $series | $own | $p50 | $p95 | $max | $mean | $cpu_ms | ${cpu_per[$n]} | $hwm | $rss |"
done
echo
# nodemedic samples in the background every INTERVAL_MS regardless of scrapes. When the loop
# overruns its schedule (a slow node_exporter scrape holds it up), nodemedic takes more samples
# than there were scrapes and "CPU ms/scrape" overstates its cost; normalise by the samples it
# actually took in the window (nodemedic_samples_total, first vs last timed scrape).
samples_total() { awk '$1 == "nodemedic_samples_total" { print $2 }' "$1" 2>/dev/null; }
echo "| exporter | CPU % of one core over the window | samples taken in window | CPU ms per sample (incl. its share of scrapes) |"
echo "|---|---|---|---|"
declare -A cpu_pct
per_sample=""
for n in "${names[@]}"; do
  cpu_ms=$(( (${cpu1[$n]} - ${cpu0[$n]}) * 1000 / clk_tck ))
  cpu_pct[$n]=$(awk -v c="$cpu_ms" -v w="$window_ms" 'BEGIN { printf "%.1f", (w > 0 ? 100 * c / w : 0) }')
  if [[ $n == nodemedic ]]; then
    s0=$(samples_total "$work/$n.first"); s1=$(samples_total "$work/$n.last")
    if [[ -n $s0 && -n $s1 ]] && (( s1 > s0 )); then
      ns=$(( s1 - s0 ))
      per_sample=$(awk -v c="$cpu_ms" -v k="$ns" 'BEGIN { printf "%.3f", c / k }')
      echo "| nodemedic | ${cpu_pct[$n]} | $ns | $per_sample |"
    else
      echo "| nodemedic | ${cpu_pct[$n]} | n/a (no nodemedic_samples_total) | n/a |"
    fi
  else
    echo "| $n | ${cpu_pct[$n]} | - (samples only when scraped) | ${cpu_per[$n]} (per scrape) |"
  fi
done
echo
if [[ -n ${cpu_per[nodemedic]:-} && -n ${cpu_per[node_exporter]:-} ]]; then
  awk -v a="${cpu_per[nodemedic]}" -v b="${cpu_per[node_exporter]}" 'BEGIN {
    if (a > 0) printf "CPU per scrape (raw window CPU / scrapes), node_exporter / nodemedic: %.1fx\n", b / a;
    else print "CPU per scrape (raw), node_exporter / nodemedic: n/a (nodemedic used 0 ticks)" }'
  if [[ -n $per_sample ]]; then
    awk -v a="$per_sample" -v b="${cpu_per[node_exporter]}" 'BEGIN {
      if (a > 0) printf "CPU per scrape, node_exporter / nodemedic per sample (one sample + at most one scrape): %.1fx\n", b / a }'
  fi
else
  echo "CPU per scrape ratio: n/a (only ${names[*]} ran)"
fi
if (( window_ms * 4 > expected_ms * 5 )); then
  echo "NOTE: the loop overran its schedule (${window_ms} ms vs ${expected_ms} ms): scrapes were slower than the interval; use the per-sample figure for nodemedic."
fi
echo "CPU resolution is 1 tick = $(( 1000 / clk_tck )) ms over the whole window; use more scrapes (-n) for small per-scrape costs."
if [[ -n ${pid[node_exporter]:-} ]]; then
  bad=$(cat "$work/node_exporter.first" "$work/node_exporter.last" | grep -E '^node_scrape_collector_success\{.*\} 0$' | sed -E 's/.*collector="([^"]+)".*/\1/' | sort -u | tr '\n' ' ' || true)
  [[ -z $bad ]] || echo "WARNING: node_exporter collectors failing on this fixture: $bad(see node_exporter log; -k keeps it)"
fi
