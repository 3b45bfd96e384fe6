#!/usr/bin/env bash
# read-bench.sh — per-file read cost of the read layer's backends (open + read + close,
# kept-open pread, io_uring batch) on the same files: this machine's /proc/irq, 500 real
# cgroups under the cgroup v2 mount, a 500-pod cgroup fixture tree (5 files per pod) and the
# 256-CPU IRQ fixture. Needs root (creates the cgroups; removes them on exit, also on failure).
#
# Usage: bench/read-bench.sh [ROUNDS]     (default 200; results as a Markdown table on stdout)
# Env: CGROUP_V2 (default /sys/fs/cgroup/unified, this machine's hybrid mount; /sys/fs/cgroup
#      on a pure v2 host), PODS (default 500).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${1:-200}
CGROUP_V2=${CGROUP_V2:-/sys/fs/cgroup/unified}
PODS=${PODS:-500}
[[ -f $CGROUP_V2/cgroup.controllers ]] || { echo "read-bench: $CGROUP_V2 is not a cgroup v2 mount" >&2; exit 1; }

parent=$CGROUP_V2/nodemedic-read-bench.$$
work=$(mktemp -d "${TMPDIR:-/tmp}/read-bench.XXXXXX")
cleanup() {
  if [[ -d $parent ]]; then
    for d in "$parent"/*/; do [[ -d $d ]] && rmdir "$d" 2>/dev/null || true; done
    rmdir "$parent" 2>/dev/null || echo "read-bench: could not remove $parent" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir "$parent"
for ((i = 0; i < PODS; i++)); do mkdir "$parent/pod$i"; done
echo "read-bench: $PODS cgroups under $parent" >&2

# A 500-pod kubepods tree as the systemd cgroup driver lays it out on cgroup v2, 5 files per pod.
python3 - "$work/pods" "$PODS" <<'PY'
import os, sys, uuid
root, n = sys.argv[1], int(sys.argv[2])
base = os.path.join(root, "kubepods.slice", "kubepods-burstable.slice")
psi = "some avg10=0.12 avg60=0.08 avg300=0.02 total=1234567\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2345\n"
for i in range(n):
    uid = str(uuid.UUID(int=i + 1)).replace("-", "_")
    d = os.path.join(base, f"kubepods-burstable-pod{uid}.slice")
    os.makedirs(d)
    files = {
        "cpu.max": "50000 100000\n",
        "cpu.stat": "usage_usec 123456789\nuser_usec 100000000\nsystem_usec 23456789\n"
                    "nr_periods 100000\nnr_throttled 1234\nthrottled_usec 5678901\n"
                    "nr_bursts 0\nburst_usec 0\n",
        "cpu.pressure": psi, "memory.pressure": psi, "io.pressure": psi,
    }
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
PY

cd "$here/.."
echo "read-bench: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)" >&2
NODEMEDIC_BENCH_ROUNDS=$ROUNDS NODEMEDIC_BENCH_CGROUPS=$parent NODEMEDIC_BENCH_PODS=$work/pods \
  cargo bench -q -p nodemedic-collect --bench read_backends
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
