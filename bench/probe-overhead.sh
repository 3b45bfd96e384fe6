#!/usr/bin/env bash
# Probe overhead, measured in one boot of the QEMU guest (tests/vm/run.sh, Debian 12's 6.1
# kernel, TCG): perfgen flat out (`perfgen bench`: BPF outputs into a perf event array with
# wakeup_events=1, as the incident's agent did), three times each in rotation with
#   - nothing attached,
#   - nodemedic's probes (the .deb's hardened service, fentry),
#   - the bpftrace one-liner that found the incident (kprobes on perf_event_output and
#     perf_event_wakeup, counting by comm);
# plus the probes' own run time per call from BPF run stats (kernel.bpf_stats_enabled=1 for
# the nodemedic runs only) and nodemedic's CPU time.
#   bench/probe-overhead.sh [NODEMEDIC_DEB]     (default: package the release build)
# TCG emulates the CPU, so absolute rates are far below real hardware; the comparison within
# the run is what counts.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "$0")/..")
DEB=${1:-}
if [ -z "$DEB" ]; then
    DEB=$(bash "$ROOT/deploy/debian/build-deb.sh")
fi
DIR=$(mktemp -d /tmp/nodemedic-probe-bench.XXXXXX)
cp "$DEB" "$DIR/nodemedic.deb"
cc -O2 -static -Wall -Werror -o "$DIR/perfgen" "$ROOT/tests/vm/perfgen.c"
cp "$ROOT/bench/probe-overhead-guest.sh" "$DIR/test.sh"
NODEMEDIC_VM_TIMEOUT=${NODEMEDIC_VM_TIMEOUT:-900} bash "$ROOT/tests/vm/run.sh" "$DIR"
cat "$DIR/stdout"
