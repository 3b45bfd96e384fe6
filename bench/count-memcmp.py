"""Counts the calls to the C library's `memcmp` of a program run under gdb (a gdb script).

    NODEMEDIC_BENCH_SAMPLES=15 NODEMEDIC_BENCH_CASE=256cpu-collapsed \
        gdb -q -batch -x bench/count-memcmp.py --args <sample bench binary> --bench

Prints `memcmp calls: N` when the program exits. Run it twice with different
NODEMEDIC_BENCH_SAMPLES: the difference divided by the difference in samples is the count
per steady sample, exactly (BENCHMARKS.md, "Fewer memcmp calls"). musl's `memcmp` is a byte
loop behind a call, so these calls are the musl build's cost of comparing.
"""

import gdb

gdb.execute("set pagination off")
calls = [0]


class Count(gdb.Breakpoint):
    def stop(self):
        calls[0] += 1
        return False


Count("memcmp", internal=True)
gdb.events.exited.connect(lambda _: print(f"memcmp calls: {calls[0]}"))
gdb.execute("run")
