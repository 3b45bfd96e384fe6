#!/usr/bin/env python3
"""CPU and memory of nodemedic beside cAdvisor 0.61 as the kubelet runs it, on real pod cgroups.

    bench/cadvisor-cost.py [--pods 200] [--seconds 120] [--scrape-seconds 15]
                           [--cadvisor PATH] NAME=NODEMEDIC_BINARY

It makes PODS pods' cgroups in this machine's real hierarchies, in the kubelet's cgroupfs
layout (kubepods/pod<uid>, kubepods/burstable/pod<uid>, kubepods/besteffort/pod<uid>, a third
of each, two containers each: the sandbox and one app, 64 hex digits as containerd names them),
with a sleeping process in every container in every hierarchy. It refuses to run where a
kubepods cgroup already exists (a kubelet's pods would be counted, and it removes what it made).

Then, side by side in one run so that both see the same minutes of this VM's drifting speed:
- nodemedic with the shipped configuration (deploy/nodemedic.toml: a sample a second, the
  cgroups walked every 15 s, one set of series per pod), and again with
  `[cgroups] containers = true` (a set per container too, as cAdvisor has);
- cAdvisor 0.61 with the kubelet's settings (bench/cadvisor/main.go: its library, housekeeping
  every 10 s, its metric set, /kubepods and /system.slice), from `--cadvisor PATH`, else
  $CADVISOR, else built from bench/cadvisor with the Go module proxy into
  /var/cache/nodemedic-bench.

Each is scraped every SCRAPE-SECONDS. Once each exposes every pod (nodemedic: a pod_uid label
per pod; cAdvisor: a container_cpu_usage_seconds_total series per pod cgroup), the window of
SECONDS starts. Printed, as Markdown: CPU per second of wall time (milliseconds of CPU, from
every thread's /proc/PID/task/*/schedstat), RSS and VmHWM at the end, the size of a scrape and
its series, and cAdvisor's CPU over each nodemedic's.
"""

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memory import CACHE, Proc, config_text, wait_until
from procstat import free_port, status_kib, task_ns

ROOT = Path(__file__).resolve().parents[1]
GO_MOD = ROOT / "bench/cadvisor/go.mod"
CADVISOR_VERSION = re.search(r"(?m)^\s*github\.com/google/cadvisor/lib (v\S+)", GO_MOD.read_text()).group(1)
QOS = ["", "burstable", "besteffort"]  # "": guaranteed pods sit at kubepods/pod<uid>


def hierarchies():
    """Every cgroup hierarchy mounted here: (mount point, is cgroup2), each once."""
    seen, out = set(), []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        dash = fields.index("-")
        fstype, mount = fields[dash + 1], fields[4]
        if fstype in ("cgroup", "cgroup2") and mount not in seen:
            seen.add(mount)
            out.append((Path(mount), fstype == "cgroup2"))
    if not out:
        raise SystemExit("cadvisor-cost.py: no cgroup hierarchy is mounted")
    return out


def make_dir(root, rel, v2):
    """mkdir ROOT/REL level by level, as the kubelet would: a v1 cpuset copies its parent's CPUs
    and nodes; a v2 parent hands its controllers down."""
    path = root
    for part in Path(rel).parts:
        child = path / part
        if not child.exists():
            if v2:
                controllers = (path / "cgroup.controllers").read_text().split()
                want = [c for c in ("cpu", "memory", "io", "pids") if c in controllers]
                if want:
                    (path / "cgroup.subtree_control").write_text(" ".join("+" + c for c in want))
            child.mkdir()
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (child / f).exists() and not (child / f).read_text().strip():
                    (child / f).write_text((path / f).read_text())
        path = child
    return path


class Pods:
    """PODS pods' cgroups with a sleeping process in each container, removed on close."""

    def __init__(self, n):
        self.hier = hierarchies()
        for root, _ in self.hier:
            if (root / "kubepods").exists() or (root / "kubepods.slice").exists():
                raise SystemExit(f"cadvisor-cost.py: {root} already has kubepods (a kubelet's "
                                 "pods?); stop it and remove them first")
        self.uids, self.sleepers = [], []
        try:
            for i in range(n):
                uid = str(uuid.uuid4())
                pod = "/".join(p for p in ("kubepods", QOS[i % 3], f"pod{uid}") if p)
                self.uids.append(uid)
                for _ in range(2):
                    rel = f"{pod}/{uuid.uuid4().hex}{uuid.uuid4().hex}"
                    sleeper = subprocess.Popen(["sleep", "infinity"])
                    self.sleepers.append(sleeper)
                    for root, v2 in self.hier:
                        make_dir(root, rel, v2)
                        (root / rel / "cgroup.procs").write_text(str(sleeper.pid))
        except BaseException:
            self.close()
            raise

    def close(self):
        for s in self.sleepers:
            s.kill()
            s.wait()
        for root, _ in self.hier:
            base = root / "kubepods"
            if not base.exists():
                continue
            for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                rmdir(d)
            rmdir(base)


def rmdir(d):
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # a killed process leaves its cgroup a moment later
    print(f"cadvisor-cost.py: could not remove {d}", file=sys.stderr)


def cadvisor_binary(arg):
    path = arg or os.environ.get("CADVISOR")
    if path:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"cadvisor-cost.py: {path!r} is not an executable file")
        return path
    # Named by its sources' hash, so that an edit of main.go builds it again.
    sources = b"".join((GO_MOD.parent / f).read_bytes() for f in ("go.mod", "go.sum", "main.go"))
    binary = CACHE / f"cadvisor-kubelet-{CADVISOR_VERSION}-{hashlib.sha256(sources).hexdigest()[:12]}"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"building cAdvisor {CADVISOR_VERSION} (bench/cadvisor) with go build", file=sys.stderr)
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_MOD.parent, check=True)
    return str(binary)


def pods_seen(kind, body, uids):
    """How many of UIDS the exposition BODY names."""
    text = body.decode()
    if kind == "nodemedic":
        found = set(re.findall(r'^nodemedic_cgroup_\w+\{[^}]*pod_uid="([0-9a-f-]+)"', text, re.M))
    else:
        found = set(re.findall(r'^container_cpu_usage_seconds_total\{[^}]*id="/kubepods/(?:\w+/)?pod([0-9a-f-]+)"',
                               text, re.M))
    return len(found & set(uids))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--scrape-seconds", type=float, default=15)
    ap.add_argument("--cadvisor")
    ap.add_argument("build", metavar="NAME=NODEMEDIC_BINARY")
    a = ap.parse_args()
    name, sep, binary = a.build.partition("=")
    if not sep or not os.access(binary, os.X_OK):
        raise SystemExit(f"{a.build!r}: expected NAME=EXECUTABLE")
    cadvisor = cadvisor_binary(a.cadvisor)
    work = Path(tempfile.mkdtemp(prefix="nodemedic-cadvisor."))
    pods = Pods(a.pods)
    daemons = []
    try:
        shipped = config_text(1000, probes=True)
        with_containers, n = re.subn(r"(?m)^containers = false$", "containers = true", shipped)
        if n != 1:
            raise SystemExit("deploy/nodemedic.toml: no `containers = false` line in [cgroups]")
        for label, text in ((f"nodemedic {name}", shipped),
                            (f"nodemedic {name}, [cgroups] containers = true", with_containers)):
            cfg = work / f"{len(daemons)}.toml"
            cfg.write_text(text)
            port = free_port()
            daemons.append(Proc(label, [os.path.abspath(binary), "--config", str(cfg),
                                "--web.listen-address", f"127.0.0.1:{port}", "run"], port, work, "nodemedic"))
        port = free_port()
        daemons.append(Proc(f"cAdvisor {CADVISOR_VERSION} (kubelet settings)",
                            [cadvisor, "--listen", f"127.0.0.1:{port}"], port, work, "cadvisor"))

        def names_every_pod(d):
            if not d.alive():
                raise SystemExit(f"{d.label} exited; see {d.path}")
            d.scrape()
            return pods_seen(d.kind, d.body, pods.uids) == len(pods.uids)

        deadline = time.monotonic() + 180
        for d in daemons:
            # A scrape a second: cAdvisor's are megabytes.
            wait_until(f"{d.label} naming all {a.pods} pods", deadline, lambda d=d: names_every_pod(d),
                       every=1)
        time.sleep(a.scrape_seconds)  # past the start's first walks and housekeeping
        start = {d: task_ns(d.p.pid) for d in daemons}
        for d in daemons:
            d.scrapes = d.failed = 0
        t0 = time.monotonic()
        rounds = max(1, int(a.seconds / a.scrape_seconds))
        for i in range(rounds):
            for d in daemons:
                d.scrape()
            pause = t0 + (i + 1) * a.scrape_seconds - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        elapsed = time.monotonic() - t0
        rows = []
        for d in daemons:
            if not d.alive():
                raise SystemExit(f"{d.label} exited; see {d.path}")
            cpu_ms = (task_ns(d.p.pid) - start[d]) / 1e6
            series = sum(1 for line in d.body.splitlines() if line and not line.startswith(b"#"))
            rows.append((d, cpu_ms / elapsed, status_kib(d.p.pid, "VmRSS"), status_kib(d.p.pid, "VmHWM"),
                         len(d.body), series, pods_seen(d.kind, d.body, pods.uids)))
    finally:
        for d in daemons:
            d.stop()
        pods.close()
    cad = rows[-1][1]
    print(f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {a.pods} pods "
          f"({2 * a.pods} containers), {elapsed:.0f} s, a scrape every {a.scrape_seconds:.0f} s\n")
    print("| process | CPU ms per second | cAdvisor's CPU over it | RSS MiB | VmHWM MiB "
          "| scrape KiB | series | pods named | scrapes (failed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d, cpu, rss, hwm, size, series, named in rows:
        ratio = "" if d.kind == "cadvisor" else f"{cad / cpu:.0f}×"
        print(f"| {d.label} | {cpu:.2f} | {ratio} | {rss / 1024:.1f} | {hwm / 1024:.1f} "
              f"| {size / 1024:.0f} | {series} | {named} | {d.scrapes} ({d.failed}) |")


if __name__ == "__main__":
    main()
