#!/usr/bin/env python3
"""Memory and CPU per sample of nodemedic builds and node_exporter, side by side in one run.

    bench/memory.py [--seconds S] [--interval-ms MS] [--trees real,256,1024]
                    [--node-exporter PATH] NAME=NODEMEDIC_BINARY [NAME=NODEMEDIC_BINARY ...]

e.g. the two builds users get, the .deb's glibc binary and the image's static musl binary:

    cargo build --release --locked -p nodemedic
    cargo build --release --locked --target x86_64-unknown-linux-musl -p nodemedic
    python3 bench/memory.py glibc=target/release/nodemedic \\
        musl=target/x86_64-unknown-linux-musl/release/nodemedic

For each tree (this machine's real /proc and /sys; the 256-CPU fixture `256cpu-collapsed`; the
1024-CPU tree of `generate.py --big`), every build runs twice, with the eBPF probes enabled
and disabled, next to node_exporter, all at once, so that every process sees the same minutes
of this VM's drifting speed. nodemedic runs the shipped configuration (deploy/nodemedic.toml:
every default feature on) with `sample_interval` = MS; node_exporter runs the collectors that
read what nodemedic reads (interrupts, softirqs where it has one, stat, softnet). Every process
is scraped once per interval.

Printed per tree and process, as Markdown:
- RSS after 3 samples and a scrape (`/proc/PID/status` VmRSS), the anonymous part of it
  (RssAnon: the heap and stacks; the rest is the binary's and the C library's code and
  read-only data, clean file pages the kernel can drop and read again), and VmHWM then;
- RSS and VmHWM at the end of the window;
- CPU per sample (one sample and its scrape; for node_exporter, per scrape), from the
  scheduler's nanosecond accounting of every thread (`/proc/PID/task/*/schedstat`) over the
  window after the first three samples;
- the VmHWM of the probes' loader, the child process that loads the eBPF probes, from the
  daemon's log line about its answer (builds that load the probes in the daemon: none).

node_exporter (none with `--without-node-exporter`): `--node-exporter PATH`, else
$NODE_EXPORTER, else it is built with
`go install github.com/prometheus/node_exporter@v1.12.1` into /var/cache/nodemedic-bench
(the Go module proxy; deploy/bootstrap.sh's ensure_go provides go).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procstat import free_port, status_kib, task_ns

ROOT = Path(__file__).resolve().parents[1]
NODE_EXPORTER_VERSION = "v1.12.1"
CACHE = Path("/var/cache/nodemedic-bench")


def get(port, path, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def config_text(interval_ms, probes):
    """The shipped configuration, with the bench's interval and the probes switched."""
    text = (ROOT / "deploy/nodemedic.toml").read_text()
    text, n = re.subn(r'(?m)^sample_interval = ".*"$', f'sample_interval = "{interval_ms}ms"', text)
    if n != 1:
        raise SystemExit("deploy/nodemedic.toml: no top-level sample_interval line")
    section = re.search(r"(?ms)^\[probes\]\n(.*?)(?=^\[)", text)
    if not section or "\nenabled = true" not in "\n" + section.group(1):
        raise SystemExit("deploy/nodemedic.toml: no `enabled = true` in [probes]")
    body = re.sub(r"(?m)^enabled = true$", f"enabled = {'true' if probes else 'false'}",
                  section.group(1), count=1)
    return text[: section.start(1)] + body + text[section.end(1):]


def node_exporter_binary(arg):
    path = arg or os.environ.get("NODE_EXPORTER")
    if path:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"memory.py: node_exporter {path!r} is not an executable file "
                             "(leave --node-exporter and $NODE_EXPORTER unset to build it)")
        return path
    binary = CACHE / f"node_exporter-{NODE_EXPORTER_VERSION}"
    if binary.exists():
        return str(binary)
    CACHE.mkdir(parents=True, exist_ok=True)
    gobin = Path(tempfile.mkdtemp(dir=CACHE))
    print(f"building node_exporter {NODE_EXPORTER_VERSION} with go install", file=sys.stderr)
    subprocess.run(["go", "install", f"github.com/prometheus/node_exporter@{NODE_EXPORTER_VERSION}"],
                   env=dict(os.environ, GOBIN=str(gobin)), check=True)
    (gobin / "node_exporter").rename(binary)
    shutil.rmtree(gobin)
    return str(binary)


def tree_path(name, work):
    if name == "real":
        return None
    if name == "256":
        return ROOT / "tests/fixtures/256cpu-collapsed"
    if name == "1024":
        big = work / "1024"
        subprocess.run([sys.executable, str(ROOT / "tests/fixtures/generate.py"), "--big", str(big)],
                       check=True, stdout=subprocess.DEVNULL)
        return big / "1024cpu"
    raise SystemExit(f"unknown tree {name!r}: real, 256 or 1024")


class Proc:
    def __init__(self, label, argv, port, work, kind):
        self.label, self.port, self.kind = label, port, kind
        self.log = open(work / f"{label}.log", "wb")
        self.path = work / f"{label}.log"
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, NO_COLOR="1",
                                           RUST_LOG="warn,nodemedic_probe::loader=info"))
        self.scrapes = self.failed = 0
        self.body = b""  # the last scrape that answered 200

    def alive(self):
        return self.p.poll() is None

    def scrape(self):
        try:
            code, body = get(self.port, "/metrics")
        except OSError:
            code = None
        self.scrapes += 1
        if code == 200:
            self.body = body
        else:
            self.failed += 1

    def samples(self):
        if self.kind != "nodemedic":
            return self.scrapes
        _, body = get(self.port, "/status")
        return json.loads(body)["samples_total"]

    def loader_peak_kib(self):
        """The probes' loader's VmHWM, from the daemon's log (None: no loader child)."""
        m = re.search(rb"the eBPF probes' loader .* answered.*?peak_kib=(\d+)", self.path.read_bytes())
        return int(m.group(1)) if m else None

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def start_all(builds, tree, ne_bin, interval_ms, work):
    procs = []
    paths = []
    if tree is not None:
        paths = ["--path.procfs", f"{tree}/proc", "--path.sysfs", f"{tree}/sys",
                 "--path.cgroupfs", f"{tree}/sys/fs/cgroup", "--path.rootfs", str(tree)]
    for name, binary in builds:
        for probes in (True, False):
            label = f"{name} probes {'on' if probes else 'off'}"
            cfg = work / f"{name}-{probes}.toml"
            cfg.write_text(config_text(interval_ms, probes))
            port = free_port()
            argv = [binary, "--config", str(cfg), *paths,
                    "--web.listen-address", f"127.0.0.1:{port}", "run"]
            procs.append(Proc(label, argv, port, work, "nodemedic"))
    if ne_bin is None:
        return procs
    port = free_port()
    argv = node_exporter_argv(ne_bin, port, tree)
    procs.append(Proc("node_exporter", argv, port, work, "node_exporter"))
    return procs


def node_exporter_argv(ne_bin, port, tree=None):
    """node_exporter with the four collectors that compare with nodemedic's (interrupts,
    softirqs where this version has it, stat, softnet), on TREE's /proc and /sys (default the
    real ones), listening on 127.0.0.1:PORT. Also bench/daemon-cost.py's."""
    procfs = f"{tree}/proc" if tree else "/proc"
    sysfs = f"{tree}/sys" if tree else "/sys"
    help_text = subprocess.run([ne_bin, "--help"], capture_output=True, text=True).stdout
    # kingpin lists it as `--[no-]collector.softirqs`; versions before 1.6 have none.
    softirqs = ["--collector.softirqs"] if "collector.softirqs" in help_text else []
    return [ne_bin, "--path.procfs", procfs, "--path.sysfs", sysfs, "--collector.disable-defaults",
            "--collector.interrupts", *softirqs, "--collector.stat", "--collector.softnet",
            "--web.listen-address", f"127.0.0.1:{port}"]


def node_exporter_check(argv, body):
    """Every collector ARGV enables succeeded in BODY, a scrape of it: the comparison credits
    node_exporter with the work of each (`node_scrape_collector_success{collector=...} 1`)."""
    for arg in argv:
        name = arg.removeprefix("--collector.")
        if name != arg and name != "disable-defaults":
            line = f'node_scrape_collector_success{{collector="{name}"}} 1'.encode()
            if line not in body.splitlines():
                raise SystemExit(f"node_exporter: no {line.decode()!r} in its scrape; "
                                 "it would be credited with work it did not do")


def wait_until(what, deadline, check, every=0.05):
    """Calls CHECK every EVERY seconds until it is true, or fails at DEADLINE."""
    while True:
        try:
            if check():
                return
        except (OSError, ValueError, KeyError):
            pass  # not serving yet
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def measure(builds, tree_name, ne_bin, seconds, interval_ms, work):
    tree = tree_path(tree_name, work)
    procs = start_all(builds, tree, ne_bin, interval_ms, work)
    rows = []
    try:
        deadline = time.monotonic() + 180
        for p in procs:
            wait_until(f"{p.label} serving", deadline,
                       lambda p=p: p.alive() and get(p.port, "/metrics", 120)[0] == 200)
            p.scrapes = 1
            if p.kind == "node_exporter":
                node_exporter_check(p.p.args, get(p.port, "/metrics", 120)[1])
        # "After 3 samples and a scrape": the point the figures are taken at.
        for p in procs:
            if p.kind == "node_exporter":
                # It reads only when scraped: three scrapes are its three samples.
                while p.scrapes < 3:
                    time.sleep(interval_ms / 1000)
                    p.scrape()
            else:
                wait_until(f"{p.label}: 3 samples", deadline, lambda p=p: p.samples() >= 3)
            p.scrape()
            p.early = (status_kib(p.p.pid, "VmRSS"), status_kib(p.p.pid, "VmHWM"),
                       status_kib(p.p.pid, "RssAnon"))
        start = {p: (task_ns(p.p.pid), p.samples()) for p in procs}
        for p in procs:
            p.scrapes = p.failed = 0
        t0 = time.monotonic()
        n = max(1, int(seconds * 1000 / interval_ms))
        for i in range(n):
            for p in procs:
                p.scrape()
            pause = t0 + (i + 1) * interval_ms / 1000 - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        for p in procs:
            if not p.alive():
                raise SystemExit(f"{p.label} exited; see {work}/{p.label}.log")
            cpu0, s0 = start[p]
            samples = p.samples() - s0 if p.kind == "nodemedic" else p.scrapes
            cpu = task_ns(p.p.pid) - cpu0
            rows.append((p.label, p.early, (status_kib(p.p.pid, "VmRSS"), status_kib(p.p.pid, "VmHWM")),
                         cpu / max(samples, 1) / 1e6, samples, p.failed,
                         p.loader_peak_kib() if p.kind == "nodemedic" else None))
    finally:
        for p in procs:
            p.stop()
    return rows


def mib(kib):
    return f"{kib / 1024:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--trees", default="real,256,1024")
    ap.add_argument("--node-exporter")
    ap.add_argument("--without-node-exporter", action="store_true",
                    help="nodemedic's builds only (on a 1024-CPU tree node_exporter takes "
                         "seconds of CPU a scrape, which stretches the window on a small VM)")
    ap.add_argument("builds", nargs="+", metavar="NAME=BINARY")
    a = ap.parse_args()
    builds = []
    for b in a.builds:
        name, sep, binary = b.partition("=")
        if not sep or not os.access(binary, os.X_OK):
            raise SystemExit(f"{b!r}: expected NAME=EXECUTABLE")
        builds.append((name, os.path.abspath(binary)))
    ne_bin = None if a.without_node_exporter else node_exporter_binary(a.node_exporter)
    work = Path(tempfile.mkdtemp(prefix="nodemedic-memory."))
    try:
        print(f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
              f"{a.seconds:.0f} s per tree, one sample and one scrape every {a.interval_ms} ms\n")
        for tree in a.trees.split(","):
            rows = measure(builds, tree, ne_bin, a.seconds, a.interval_ms, work)
            print(f"### {tree}\n")
            print("| process | RSS after 3 samples + a scrape MiB | of which anonymous MiB "
                  "| VmHWM then MiB | RSS at end MiB | VmHWM at end MiB | CPU ms per sample "
                  "| samples (failed scrapes) | probes' loader VmHWM MiB |")
            print("|---|---|---|---|---|---|---|---|---|")
            for label, early, late, cpu, samples, failed, loader in rows:
                print(f"| {label} | {mib(early[0])} | {mib(early[2])} | {mib(early[1])} "
                      f"| {mib(late[0])} | {mib(late[1])} | {cpu:.2f} | {samples} ({failed}) "
                      f"| {mib(loader) if loader is not None else '-'} |")
            print(flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
