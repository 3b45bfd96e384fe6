#!/usr/bin/env python3
"""What nodemedic costs in its pod on a real node, side by side with the same binary on the
host, over the same window:

    tests/k8s/cluster-up.sh DIR                      # a cluster, and the chart installed:
    python3 tests/k8s/node_e2e.py DIR  (KEEP=1)      # or helm install by hand
    python3 bench/k8s-pod.py DIR [SECONDS]           # default 120

Per sample CPU (the pod's cgroup CPU time over the samples it took; the host daemon's
schedstat), RSS, and the pod's own CFS throttling (nr_periods, nr_throttled: the chart sets
no CPU limit, so there should be no period at all). Then the probes are switched off in the
pod (helm upgrade --set features.probes=false) and on the host, and RSS measured again.
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "k8s"))
import node_e2e as t  # noqa: E402
from procstat import task_ns  # noqa: E402


def pod_cgroup(pid):
    """The pod's v1 cpu cgroup directory (kubepods/.../pod<uid>), from the daemon's own."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrl, path = line.split(":", 2)
        if "cpu" in ctrl.split(",") and "cpuacct" not in ctrl.split(","):
            return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
    raise RuntimeError("no cpu cgroup")


def cpu_stat(d):
    return dict(l.split() for l in (d / "cpu.stat").read_text().splitlines())


def schedstat_ns(pid):
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def host_daemon(probes, port):
    binary = ROOT / "target/x86_64-unknown-linux-musl/release/nodemedic"
    cfg = Path(tempfile.mkdtemp()) / "nodemedic.toml"
    cfg.write_text(f'sample_interval = "5s"\n[remediation]\nmode = "off"\n[probes]\nenabled = {str(probes).lower()}\n')
    p = subprocess.Popen([binary, "--config", cfg, "--web.listen-address", f"127.0.0.1:{port}", "run"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        r = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/readyz"], capture_output=True)
        if r.returncode == 0:
            break
        time.sleep(0.2)
    return p


def host_samples(port):
    r = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/status"], capture_output=True, text=True)
    return json.loads(r.stdout)["samples_total"]


def measure(window, port):
    pid = t.host_pid()
    cg = pod_cgroup(pid)
    host = host_daemon(True, port)
    s0, hs0 = t.status()["samples_total"], host_samples(port)
    c0, h0 = task_ns(pid), task_ns(host.pid)
    st0 = cpu_stat(cg)
    time.sleep(window)
    s1, hs1 = t.status()["samples_total"], host_samples(port)
    c1, h1 = task_ns(pid), task_ns(host.pid)
    st1 = cpu_stat(cg)
    out = {
        "pod_cpu_ms_per_sample": (c1 - c0) / 1e6 / max(1, s1 - s0),
        "host_cpu_ms_per_sample": (h1 - h0) / 1e6 / max(1, hs1 - hs0),
        "pod_samples": s1 - s0,
        "host_samples": hs1 - hs0,
        "pod_rss_kib_probes_on": rss_kib(pid),
        "host_rss_kib_probes_on": rss_kib(host.pid),
        "pod_nr_periods": int(st1["nr_periods"]) - int(st0["nr_periods"]),
        "pod_nr_throttled": int(st1["nr_throttled"]) - int(st0["nr_throttled"]),
        "pod_cpu_cfs_quota_us": int((cg / "cpu.cfs_quota_us").read_text()),
    }
    host.terminate()
    host.wait()
    off = host_daemon(False, port)
    t.helm("upgrade", "nodemedic", ROOT / "deploy/helm/nodemedic", "--reuse-values",
           "--set", "features.probes=false")
    t.poll("the pod rolled without probes", 180,
           lambda: t.nodemedic_pod() if not t.nodemedic_pod()["spec"]["containers"][0]["securityContext"]
           ["capabilities"].get("add") and t.pod_ready(t.nodemedic_pod()) else (_ for _ in ()).throw(t.Pending("rolling")))
    time.sleep(30)
    out["pod_rss_kib_probes_off"] = rss_kib(t.host_pid())
    out["host_rss_kib_probes_off"] = rss_kib(off.pid)
    off.terminate()
    off.wait()
    return out


def main():
    d = sys.argv[1]
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    t.attach(d)
    print(json.dumps(measure(window, 19847), indent=2))


if __name__ == "__main__":
    main()
