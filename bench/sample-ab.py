#!/usr/bin/env python3
"""Side-by-side CPU per sample of two builds of the `sample` bench, interleaved.

    bench/sample-ab.py [--rounds N] [--samples N] NAME=BENCH_BINARY NAME=BENCH_BINARY

Each round runs every binary once, in alternating order, so both see the same machine
(this 2-vCPU VM's timings drift by ±30% from minute to minute). Per case and binary it prints
the median and the range over the rounds of "CPU ms/sample" and of the wall median, as a
Markdown table, then each build's per-round CPU ratio to the first build (paired within a
round, so it cancels most of the drift between rounds). Build a binary with `cargo bench -p nodemedic-engine --bench sample
--no-run` in each checkout; the path is printed as "Executable …". Set
NODEMEDIC_BENCH_1024 to include the 1024-CPU case.
"""

import argparse
import os
import statistics
import sys

from samplebench import run

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("builds", nargs="+", help="NAME=PATH")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.builds]
    results = {name: {} for name, _ in builds}
    for r in range(args.rounds):
        order = builds if r % 2 == 0 else list(reversed(builds))
        for name, path in order:
            for case, v in run(path, args.samples).items():
                results[name].setdefault(case, []).append(v)
        print(f"round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    cases = []
    for name, _ in builds:
        for case in results[name]:
            if case not in cases:
                cases.append(case)
    print(f"{args.rounds} interleaved rounds of {args.samples} samples per case; median (min–max) over rounds.\n")
    print("| case | build | CPU ms/sample | wall median ms | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for case in cases:
        for name, _ in builds:
            vs = results[name].get(case)
            if not vs:
                continue
            cpu = [v[0] for v in vs]
            wall = [v[1] for v in vs]
            rss = max(v[2] for v in vs)
            print(
                f"| {case} | {name} | **{statistics.median(cpu):.2f}** ({min(cpu):.2f}–{max(cpu):.2f}) "
                f"| {statistics.median(wall):.2f} | {rss:.1f} |"
            )
    # Paired: each round's builds ran back to back, so their ratio cancels most of the
    # machine's drift between rounds, which the medians above do not.
    if len(builds) > 1:
        base = builds[0][0]
        print(f"\nPer-round CPU ratio to {base} (same round), median (min–max):\n")
        print("| case | build | ratio |")
        print("|---|---|---|")
        for case in cases:
            b = results[base].get(case)
            for name, _ in builds[1:]:
                vs = results[name].get(case)
                if not b or not vs:
                    continue
                ratios = [v[0] / w[0] for v, w in zip(vs, b) if w[0] > 0]
                if ratios:
                    print(
                        f"| {case} | {name} | **{statistics.median(ratios):.2f}** "
                        f"({min(ratios):.2f}–{max(ratios):.2f}) |"
                    )


if __name__ == "__main__":
    main()
