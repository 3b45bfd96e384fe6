#!/usr/bin/env python3
"""CPU of running nodemedic daemons, split into sampling and serving, builds side by side.

    bench/daemon-cost.py [--seconds S] [--interval-ms MS] [--modes M,M] [--shipped-config]
                         [--node-exporter] [--sample-bench NAME=BENCH] NAME=BINARY [...]

For every build it starts one daemon per mode, all at once (so every build and mode sees the
same minutes of this VM's drifting speed), each on the real /proc and /sys with
`sample_interval` = MS (default 1000) and the eBPF probes off (with `--shipped-config`: the
shipped deploy/nodemedic.toml, every default feature on, with that interval):

- `sampling`: no scrapes: what sampling alone costs;
- `keepalive`: one GET /metrics per interval on one kept-alive connection (plain text);
- `gzip`: the same with `Accept-Encoding: gzip`, as Prometheus scrapes (the answer must come
  back gzip-encoded, or the run fails);
- `curl`: one GET /metrics per interval on a new TCP connection each time (`curl`);
- `healthz-curl`: one GET /healthz per interval on a new connection: the HTTP and TCP floor
  of the same server, without rendering anything;
- `healthz`: one GET /healthz per interval on one kept-alive connection: the floor of a
  request on a kept connection (what Prometheus keeps), without rendering anything.

With `--node-exporter`, node_exporter ($NODE_EXPORTER, else the v1.12.1 build memory.py makes
and caches) runs beside them, one per mode that makes requests, with the four collectors that
compare (interrupts, softirqs, stat, softnet), as memory.py runs it. Its CPU is per request:
it reads its files when scraped. It has no /healthz, so it runs in `keepalive`, `gzip` and `curl`.

With `--sample-bench`, the engine's `sample` bench (the binary `cargo bench -p
nodemedic-engine --bench sample --no-run` prints) runs its `this machine` case in the same
minutes, twice: one sample every interval for the whole run, as the daemon samples, and 300
samples back to back (1 ms apart) at its end. The first is the sample's cost at the daemon's
cadence, when every sample starts with caches the rest of the machine has used since; the
second is the warm figure the bench prints by default.

CPU is the scheduler's nanosecond accounting of every thread (`/proc/PID/task/*/schedstat`),
not 10 ms ticks. Printed per build and mode: CPU ms per interval (one sample plus at most one
request), and how it splits between the sampler thread and the rest (runtime, HTTP).
"""

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time

import samplebench
from memory import config_text, get, node_exporter_argv, node_exporter_binary, node_exporter_check
from procstat import free_port

MODES = ["sampling", "keepalive", "gzip", "curl", "healthz-curl", "healthz"]
NODE_EXPORTER = "node_exporter"
# node_exporter reads its files when scraped, and has no /healthz.
NODE_EXPORTER_MODES = ("keepalive", "gzip", "curl")


def thread_ns(pid):
    """(sampler thread ns, all other threads ns), summed over live threads."""
    sampler = other = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if comm.startswith("nodemedic-sampl"):
            sampler += ns
        else:
            other += ns
    return sampler, other


def run_one(name, binary, mode, seconds, interval_ms, shipped, results):
    port = free_port()
    work = tempfile.mkdtemp(prefix="nodemedic-daemon-cost.")
    if name == NODE_EXPORTER:
        argv = node_exporter_argv(binary, port)
    else:
        config = os.path.join(work, "nodemedic.toml")
        with open(config, "w") as f:
            if shipped:
                f.write(config_text(interval_ms, probes=True))
            else:
                f.write(f'sample_interval = "{interval_ms}ms"\n[probes]\nenabled = false\n')
        argv = [binary, "--config", config, "run", "--web.listen-address", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        path = "/healthz" if mode.startswith("healthz") else "/metrics"
        deadline = time.time() + 30
        while True:
            try:
                code, body = get(port, "/metrics", 5)
                if code == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit(f"{name} {mode}: no 200 from /metrics within 30 s")
            time.sleep(0.2)
        if name == NODE_EXPORTER:
            node_exporter_check(argv, body)
        time.sleep(2 * interval_ms / 1000)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        url = f"http://127.0.0.1:{port}{path}"

        def request():
            if mode in ("keepalive", "gzip", "healthz"):
                headers = {"Accept-Encoding": "gzip"} if mode == "gzip" else {}
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit(f"{name} {mode}: HTTP {r.status}")
                encoding = r.getheader("Content-Encoding", "")
                if (mode == "gzip") != (encoding == "gzip"):
                    raise SystemExit(f"{name} {mode}: Content-Encoding '{encoding}'")
            elif mode in ("curl", "healthz-curl"):
                subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)

        steps = int(seconds * 1000 / interval_ms)
        s0, o0 = thread_ns(proc.pid)
        start = time.time()
        for i in range(steps):
            request()
            time.sleep(max(0.0, start + (i + 1) * interval_ms / 1000 - time.time()))
        s1, o1 = thread_ns(proc.pid)
        results[(name, mode)] = ((s1 - s0) / steps / 1e6, (o1 - o0) / steps / 1e6)
    finally:
        proc.terminate()
        proc.wait()


def sample_bench(name, binary, samples, pause_ms, results):
    """CPU ms per sample of the engine's `sample` bench, `this machine` case."""
    rows = samplebench.run(binary, samples, case="this machine", pause_ms=pause_ms)
    machine = [cpu for case, (cpu, _, _) in rows.items() if case.startswith("this machine")]
    if not machine:
        raise SystemExit(f"sample bench {name}: no 'this machine' row in its output")
    results[(name, pause_ms)] = machine[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    ap.add_argument("--shipped-config", action="store_true",
                    help="deploy/nodemedic.toml (every default feature on, the probes too) "
                         "instead of the probes off")
    ap.add_argument("--node-exporter", action="store_true",
                    help="node_exporter beside the builds ($NODE_EXPORTER, else memory.py's "
                         "build of v1.12.1)")
    ap.add_argument("--sample-bench", action="append", default=[], metavar="NAME=BENCH",
                    help="the engine's sample bench binary, run in the same minutes (repeatable)")
    ap.add_argument("builds", nargs="+", metavar="NAME=BINARY")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown modes {unknown}")
    builds = [b.split("=", 1) for b in args.builds]
    if any(n == NODE_EXPORTER for n, _ in builds):
        ap.error(f"the name {NODE_EXPORTER!r} is --node-exporter's")
    runs = [(n, b, m) for n, b in builds for m in modes]
    if args.node_exporter:
        ne = node_exporter_binary(None)
        builds.append((NODE_EXPORTER, ne))
        runs += [(NODE_EXPORTER, ne, m) for m in modes if m in NODE_EXPORTER_MODES]
    results = {}
    threads = [
        threading.Thread(target=run_one,
                         args=(n, b, m, args.seconds, args.interval_ms, args.shipped_config, results))
        for n, b, m in runs
    ]
    benches = [b.split("=", 1) for b in args.sample_bench]
    bench_results = {}
    steps = int(args.seconds * 1000 / args.interval_ms)
    cadence = [
        threading.Thread(target=sample_bench, args=(n, b, steps, args.interval_ms, bench_results))
        for n, b in benches
    ]
    for t in threads + cadence:
        t.start()
    for t in threads + cadence:
        t.join()
    # Back to back, after the daemons: as the bench prints by default.
    for n, b in benches:
        sample_bench(n, b, 300, 1, bench_results)
    print(
        f"{len(threads)} daemons at once, {args.seconds} s, one sample (and one request) every "
        f"{args.interval_ms} ms; load average at end: {open('/proc/loadavg').read().split()[0]}.\n"
    )
    print("| mode | build | CPU ms per interval | sampler thread | other threads |")
    print("|---|---|---|---|---|")
    for m in modes:
        for n, _ in builds:
            if n == NODE_EXPORTER and m not in NODE_EXPORTER_MODES:
                continue
            if (n, m) not in results:
                print(f"| {m} | {n} | failed | | |")
                continue
            s, o = results[(n, m)]
            if n == NODE_EXPORTER:
                print(f"| {m} | {n} | **{s + o:.3f}** | | |")
            else:
                print(f"| {m} | {n} | **{s + o:.3f}** | {s:.3f} | {o:.3f} |")
    if benches:
        print(f"\nThe engine's `sample` bench, `this machine` case, CPU ms per sample:\n")
        print(f"| bench | one sample every {args.interval_ms} ms, during the run "
              "| 300 back to back, after it |")
        print("|---|---|---|")
        for n, _ in benches:
            cad = bench_results.get((n, args.interval_ms))
            warm = bench_results.get((n, 1))
            print(f"| {n} | {'failed' if cad is None else f'{cad:.3f}'} "
                  f"| {'failed' if warm is None else f'{warm:.3f}'} |")
    ok = len(results) == len(threads) and len(bench_results) == 2 * len(benches)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
