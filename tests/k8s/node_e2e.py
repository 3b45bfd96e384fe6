#!/usr/bin/env python3
"""nodemedic's shipped DaemonSet on a real Kubernetes node (tests/k8s/cluster-up.sh): the
image from deploy/container/build-image.sh imported into containerd, the chart installed with
helm and its default values (image pull policy aside), the kubelet running it as shipped.

    tests/k8s/node_e2e.py [DIR]      # as root; DIR keeps the cluster's state and logs
    NODEMEDIC_IMAGE_ARCHIVE=FILE     # an archive of deploy/container/build-image.sh --oci-archive
                                     # instead of building one (tests/run-all.sh builds it once)

Each check prints one line; the last line is "k8s node: N passed, N failed". The cluster is
torn down at the end (KEEP=1 leaves it running). Where the real node disagrees with an
assumption made on fixtures, this test is where it shows.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "tests" / "k8s"
HELM = None
ENV = {}
NAMESPACE = "nodemedic"
WORKLOAD_NS = "shop"
PORT = 9847
RESULTS = []


class Pending(Exception):
    """What a poll is still waiting for."""


def log(msg):
    print(f"[node-e2e {time.strftime('%T')}] {msg}", flush=True)


def run(cmd, check=True, input=None, timeout=300, env=None):
    p = subprocess.run(
        [str(c) for c in cmd],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and p.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    return p


def in_ns(cmd):
    return ["nsenter", f"--net=/run/netns/{ENV['NETNS']}"] + list(cmd)


def kubectl(*args, check=True, input=None, timeout=120):
    cmd = in_ns([ENV["KUBECTL"], "--kubeconfig", ENV["KUBECONFIG"], *args])
    return run(cmd, check=check, input=input, timeout=timeout)


def kjson(*args):
    return json.loads(kubectl(*args, "-o", "json").stdout)


def helm(*args, check=True):
    env = dict(os.environ, KUBECONFIG=ENV["KUBECONFIG"])
    return run(in_ns([HELM, *args]), check=check, env=env, timeout=300)


def poll(what, timeout, fn, every=0.5):
    start = time.time()
    last = "never tried"
    while True:
        try:
            return fn()
        except Pending as e:
            last = str(e)
        if time.time() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")
        time.sleep(every)


def http(path, timeout=25):
    """GET http://NODE_IP:9847/path from inside the cluster's network: (status, body)."""
    p = run(
        in_ns(
            [
                "curl", "-s", "--max-time", str(timeout), "-o", "-", "-w", "\n%{http_code}",
                f"http://{ENV['NODE_IP']}:{PORT}{path}",
            ]
        ),
        check=False,
        timeout=timeout + 5,
    )
    if p.returncode != 0:
        return 0, f"curl exit {p.returncode}: {p.stderr}"
    body, _, code = p.stdout.rpartition("\n")
    return int(code), body


def status():
    code, body = http("/status")
    if code != 200:
        raise Pending(f"/status {code}: {body[:200]}")
    return json.loads(body)


def samples(text):
    """(name, labels dict, value) of every sample line of an exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4))))
    return out


def check(name):
    def wrap(fn):
        def run_check(*a, **kw):
            t0 = time.time()
            try:
                r = fn(*a, **kw)
            except Exception as e:  # a failed assertion or a broken step alike
                RESULTS.append((name, False, time.time() - t0))
                log(f"FAIL {name} ({time.time() - t0:.0f}s): {e}")
                raise
            RESULTS.append((name, True, time.time() - t0))
            log(f"ok   {name} ({time.time() - t0:.0f}s)")
            return r

        return run_check

    return wrap


def nodemedic_pod():
    pods = kjson("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=nodemedic")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) != 1:
        raise Pending(f"{len(live)} nodemedic pods")
    return live[0]


def pod_ready(pod):
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def wait_ready(timeout=180):
    def ready():
        p = nodemedic_pod()
        if not pod_ready(p):
            raise Pending(f"{p['metadata']['name']}: {p.get('status', {}).get('phase')}")
        return p

    return poll("the nodemedic pod Ready", timeout, ready)


def host_pid():
    """The daemon's pid as the host sees it (the container shares the host's pid space view
    from outside)."""
    pod = nodemedic_pod()
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    for cg in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            text = cg.read_text()
        except OSError:
            continue
        if cid in text:
            pid = cg.parent.name
            try:
                if (Path("/proc") / pid / "comm").read_text().strip() == "nodemedic":
                    return int(pid)
            except OSError:
                continue
    raise Pending("no host process for the nodemedic container")


def failed_collectors():
    """Collectors that failed, but the eBPF probes on a kernel that cannot attach them
    (tests/k8s runs on a kernel without kprobes or fentry: they are down with that reason
    from the start, which check 1 shows)."""
    out = []
    for c in status()["collectors"]:
        if c["state"] != "failed":
            continue
        if c["name"] == "perf_probes" and "kprobe" in c.get("reason", ""):
            continue
        out.append(c)
    return out


def fds_and_watches(pid):
    fds = list(Path(f"/proc/{pid}/fd").iterdir())
    watches = 0
    for f in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            watches += f.read_text().count("inotify wd:")
        except OSError:
            pass
    return len(fds), watches


# ------------------------------------------------------------------ the checks


@check("1. the DaemonSet, installed with the chart's defaults, is Ready on the kubelet and runs as shipped")
def install():
    helm(
        "install", "nodemedic", ROOT / "deploy/helm/nodemedic",
        "--set", "image.pullPolicy=Never",
    )
    pod = wait_ready()
    # Read back from the API: what the kubelet ran.
    spec = pod["spec"]
    c = spec["containers"][0]
    sec = c["securityContext"]
    assert spec.get("hostPID") in (False, None), spec
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", spec["securityContext"]
    assert sec["privileged"] is False and sec["allowPrivilegeEscalation"] is False, sec
    assert sec["readOnlyRootFilesystem"] is True, sec
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}, sec["capabilities"]
    assert "cpu" not in c["resources"].get("limits", {}), c["resources"]
    # The first scrape after Ready has every collector's series.
    code, body = http("/metrics")
    assert code == 200, (code, body[:300])
    st = status()
    names = {c["name"] for c in st["collectors"]}
    success = {l["collector"] for n, l, _ in samples(body) if n == "nodemedic_scrape_collector_success"}
    assert names <= success, f"collectors without series: {names - success}"
    assert any(n == "nodemedic_irq_interrupts_total" for n, _, _ in samples(body))
    # No system D-Bus on this node: the pod started, and remediation says why it cannot ask.
    irqb = st["remediation"]["irqbalance"]
    assert irqb["state"] == "unknown" and "no system D-Bus socket" in irqb["detail"], irqb
    return pod


@check("2. from inside the pod nodemedic sees the host: its IRQs, node PSI, the cgroup layout from mountinfo")
def sees_the_host():
    host_irqs = sum(
        1 for l in Path("/proc/interrupts").read_text().splitlines()[1:]
        if l.split(":")[0].strip().isdigit()
    )
    _, body = http("/metrics")
    irqs = {l["irq"] for n, l, _ in samples(body) if n == "nodemedic_irq_interrupts_total"}
    assert len(irqs) == host_irqs, f"{len(irqs)} IRQs exported, the host has {host_irqs}"
    assert any(n == "nodemedic_pressure_cpu_waiting_seconds_total" for n, _, _ in samples(body)), "no node PSI"
    st = status()
    p = st["pressure"]
    assert p["cgroup_mounts_from_mountinfo"] is True, p
    mounts = p["cgroup_mounts"]
    assert mounts["cpu"] == "/host/sys/fs/cgroup/cpu", mounts
    assert mounts["unified"] == "/host/sys/fs/cgroup/unified", mounts


WORKLOAD = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: burner, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: burner}}
  template:
    metadata: {labels: {app: burner}}
    spec:
      containers:
      - name: burn
        image: localhost/nodemedic-test-busy:1
        imagePullPolicy: Never
        args: ["2"]
        resources:
          requests: {cpu: 100m}
          limits: {cpu: 100m}
"""


@check("3. a workload capped at 100m with two busy loops is quota-bound: series, Pod Event, check in the pod; the idle node is not saturated")
def quota_bound():
    kubectl("apply", "-f", "-", input=WORKLOAD)

    def burner():
        pods = kjson("get", "pods", "-n", WORKLOAD_NS, "-l", "app=burner")["items"]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        if not running:
            raise Pending("burner not running")
        return running[0]

    pod = poll("the burner pod", 120, burner)
    name = pod["metadata"]["name"]

    def bound():
        _, body = http("/metrics")
        for n, l, v in samples(body):
            if n == "nodemedic_cgroup_quota_bound" and l.get("pod") == name and l.get("namespace") == WORKLOAD_NS:
                if v == 1:
                    return body
                raise Pending(f"quota_bound {v}")
        raise Pending("no quota_bound series for the pod")

    body = poll("nodemedic_cgroup_quota_bound = 1", 120, bound)
    # The throttled workload makes node CPU pressure high on idle CPUs: not saturation. This
    # needs the node otherwise idle (nothing else running the test machine's CPUs).
    busy = [v for n, _, v in samples(body) if n == "nodemedic_node_cpu_busy_ratio"]
    assert not busy or busy[0] < 0.8, f"the node is not idle (busy {busy}): something else loads this machine"
    saturated = [v for n, _, v in samples(body) if n == "nodemedic_node_pressure_saturated"]
    assert saturated == [0.0], f"node_pressure_saturated {saturated} on an idle node (busy {busy})"

    def event():
        evs = kjson("get", "events.events.k8s.io", "-n", WORKLOAD_NS)["items"]
        for e in evs:
            r = e.get("regarding", {})
            if r.get("kind") == "Pod" and r.get("name") == name and e.get("reason") == "CPUQuotaBound":
                return e
        raise Pending(f"{[(e.get('reason'), e.get('regarding', {}).get('name')) for e in evs]}")

    ev = poll("a CPUQuotaBound Event on the Pod", 60, event)
    assert ev["type"] == "Warning", ev
    assert "throttled in" in ev["note"] and "raise or remove the CPU limit" in ev["note"], ev["note"]
    # kubectl exec of check in the shipped pod, no extra flags.
    nm = nodemedic_pod()["metadata"]["name"]
    p = kubectl("exec", "-n", NAMESPACE, nm, "--", "nodemedic", "check", "--format", "json", check=False, timeout=120)
    assert p.returncode == 1, f"check exited {p.returncode}: {p.stderr[-2000:]}"
    report = json.loads(p.stdout)
    hits = [c for c in report["pressure"]["cgroups"] if c.get("pod") == name]
    assert hits and hits[0]["namespace"] == WORKLOAD_NS and hits[0]["quota_bound"], hits
    return name


CHURN_POD = """
apiVersion: v1
kind: Pod
metadata: {{name: churn-{i}, namespace: churn, labels: {{churn: "1"}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: idle
    image: registry.k8s.io/pause:3.10
    imagePullPolicy: Never
"""


@check("4. churn: 50 pods come and go; their series follow, fds and inotify watches return to baseline, no collector fails")
def churn():
    pid = poll("the daemon's host pid", 30, host_pid)
    base = fds_and_watches(pid)
    kubectl("create", "namespace", "churn")
    kubectl("apply", "-f", "-", input="\n---\n".join(CHURN_POD.format(i=i) for i in range(50)))

    def named(want):
        def count():
            _, body = http("/metrics")
            n = len({l["pod"] for n, l, _ in samples(body)
                     if n == "nodemedic_cgroup_cpu_usage_seconds_total" and l.get("namespace") == "churn"})
            if n != want:
                raise Pending(f"{n} churn pods in the series")
            return n
        return count

    poll("50 pods' series", 240, named(50), every=2)
    kubectl("delete", "namespace", "churn", "--wait=true", timeout=300)
    poll("the series gone", 120, named(0), every=2)

    def baseline():
        now = fds_and_watches(pid)
        if now[0] > base[0] + 2 or now[1] > base[1]:
            raise Pending(f"fds, watches {now} vs {base}")
        return now

    poll("fds and watches back to baseline", 120, baseline, every=2)
    failed = failed_collectors()
    assert not failed, failed


def apiserver(action):
    pidfile = Path(ENV["DIR"]) / "kube-apiserver.pid"
    if action == "stop":
        pid = int(pidfile.read_text())
        os.killpg(pid, 15)

        def gone():
            if Path(f"/proc/{pid}").exists():
                raise Pending("alive")
            return True

        try:
            poll("the apiserver gone", 10, gone)
        except AssertionError:
            os.killpg(pid, 9)  # graceful shutdown waits for watches; an outage need not
            poll("the apiserver killed", 10, gone)
    else:
        run([K8S / "lib.sh", "restart-apiserver", ENV["DIR"]], timeout=180)


@check("5. the API is down for 60 s: back-off in the log, collectors keep working, names resume")
def api_outage(workload_pod):
    pid = poll("the daemon's host pid", 30, host_pid)
    nm = nodemedic_pod()["metadata"]["name"]
    before = status()["samples_total"]
    t_stop = time.time()
    apiserver("stop")
    time.sleep(60)  # the outage itself, not a synchronisation
    st = None
    code, body = http("/status")
    assert code == 200, (code, body[:200])
    st = json.loads(body)
    assert st["samples_total"] >= before + 10, f"{st['samples_total']} samples, {before} before"
    failed = [c for c in failed_collectors() if c["name"] != "kube_pods"]
    assert not failed, failed
    pods = [c for c in st["collectors"] if c["name"] == "kube_pods"][0]
    assert pods["state"] == "active" and "stale" in " ".join(pods["warnings"]), pods
    apiserver("start")
    # The daemon's log over the outage, as the kubelet kept it.
    logs = Path(ENV["DIR"]) / "pod-logs"
    text = "".join(f.read_text(errors="replace") for f in logs.rglob("*.log") if NAMESPACE in str(f))
    outage = [l for l in text.splitlines() if "watching this node's pods" in l or "kubernetes reporting failed" in l]
    assert 2 <= len(outage) <= 16, f"{len(outage)} lines about the outage in 60 s:\n" + "\n".join(outage[-20:])
    # Names resume: a pod made after the outage is named.
    kubectl("run", "after-outage", "-n", WORKLOAD_NS, "--image=registry.k8s.io/pause:3.10",
            "--image-pull-policy=Never", "--restart=Never")

    def named():
        _, body = http("/metrics")
        if any(l.get("pod") == "after-outage" for n, l, _ in samples(body)
               if n == "nodemedic_cgroup_cpu_usage_seconds_total"):
            return True
        raise Pending("after-outage not named")

    poll("names after the outage", 240, named, every=2)
    kubectl("delete", "pod", "-n", WORKLOAD_NS, "after-outage", "--wait=false")
    log(f"outage: {len(outage)} log lines in {time.time() - t_stop:.0f}s; pid {pid}, pod {nm}")


PROM_CONFIG = """
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files:
  - {alerts}
  - {fast}
scrape_configs:
  - job_name: nodemedic
    kubernetes_sd_configs:
      - role: pod
        api_server: {api}
        tls_config: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}
        namespaces: {{names: [nodemedic]}}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name]
        regex: nodemedic
        action: keep
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: metrics
        action: keep
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: instance
"""


@check("7. Prometheus discovers the pod (kubernetes_sd_configs, role pod): up 1, the shipped rules load, CPUQuotaBound fires for the workload")
def prometheus(workload_pod):
    import yaml

    d = Path(ENV["DIR"]) / "prometheus"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    shipped = ROOT / "deploy/prometheus/nodemedic-alerts.yml"
    rules = yaml.safe_load(shipped.read_text())
    fast = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "CPUQuotaBound"]
    assert fast, "no CPUQuotaBound in the shipped rules"
    fast[0]["for"] = "5s"
    fast[0]["alert"] = "CPUQuotaBound"
    (d / "fast.yml").write_text(yaml.safe_dump({"groups": [{"name": "test-fast", "rules": fast}]}))
    pki = Path(ENV["CA_FILE"]).parent
    (d / "prometheus.yml").write_text(PROM_CONFIG.format(
        alerts=shipped, fast=d / "fast.yml", api=ENV["APISERVER_URL"], ca=ENV["CA_FILE"],
        cert=pki / "admin.crt", key=pki / "admin.key"))
    # Debian's prometheus is built without kubernetes_sd_configs: this one comes from the Go
    # module proxy (tests/k8s/build-prometheus.sh, cached).
    server = run([K8S / "build-prometheus.sh"], timeout=1800).stdout.strip()
    proc = subprocess.Popen(
        in_ns([server, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
               "--web.listen-address=127.0.0.1:9090"]),
        stdout=open(d / "prometheus.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def query(q):
            p = run(in_ns(["curl", "-sf", "--max-time", "5", "--data-urlencode", f"query={q}",
                           "http://127.0.0.1:9090/api/v1/query"]), check=False)
            if p.returncode != 0:
                raise Pending(f"prometheus: curl {p.returncode}")
            return json.loads(p.stdout)["data"]["result"]

        def up():
            r = query('up{job="nodemedic"}')
            if [x["value"][1] for x in r] != ["1"]:
                raise Pending(f"up {r}")
            return r

        poll("up == 1", 120, up, every=2)
        p = run(in_ns(["curl", "-sf", "http://127.0.0.1:9090/api/v1/rules"]))
        groups = json.loads(p.stdout)["data"]["groups"]
        loaded = {r["name"] for g in groups for r in g["rules"]}
        want = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
        assert want <= loaded, f"shipped rules not loaded: {want - loaded}"

        def firing():
            r = query('ALERTS{alertname="CPUQuotaBound",alertstate="firing"}')
            pods = [x["metric"].get("pod") for x in r]
            if workload_pod not in pods:
                raise Pending(f"firing for {pods}")
            return pods

        poll("CPUQuotaBound firing", 120, firing, every=2)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


@check("8. helm upgrade with a changed config rolls the pod: no empty exposition in between; helm uninstall leaves nothing behind")
def upgrade_and_uninstall():
    old = nodemedic_pod()["metadata"]["uid"]
    scrapes = []
    helm("upgrade", "nodemedic", ROOT / "deploy/helm/nodemedic", "--reuse-values",
         "--set", "sampleInterval=3s")

    def rolled():
        code, body = http("/metrics", timeout=25)
        scrapes.append((code, body))
        p = nodemedic_pod()
        if p["metadata"]["uid"] == old or not pod_ready(p):
            raise Pending("not rolled yet")
        return p

    poll("the pod rolled", 180, rolled, every=0.3)
    for code, body in scrapes:
        if code == 200:
            assert any(n == "nodemedic_irq_interrupts_total" for n, _, _ in samples(body)), "200 with empty families"
        else:
            assert code in (0, 503), (code, body[:200])
    log(f"{len(scrapes)} scrapes during the roll: {sorted(set(c for c, _ in scrapes))}")
    helm("uninstall", "nodemedic", "--wait")

    def gone():
        left = []
        for kind in ("namespace/nodemedic", "clusterrole/nodemedic", "clusterrolebinding/nodemedic"):
            if kubectl("get", kind, check=False).returncode == 0:
                left.append(kind)
        if left:
            raise Pending(f"left: {left}")
        return True

    poll("nothing left", 180, gone, every=2)


@check("6. the IRQAffinityCollapsed condition is set by the pod's service account (collapsed fixture) and turns Unknown when the DaemonSet goes")
def condition():
    fixture = ROOT / "tests/fixtures/8cpu-collapsed"
    values = Path(ENV["DIR"]) / "collapsed-values.yaml"
    values.write_text(
        "image: {pullPolicy: Never}\n"
        "extraVolumes: [{name: fixture, hostPath: {path: %s, type: Directory}}]\n"
        "extraVolumeMounts: [{name: fixture, mountPath: /fixture, readOnly: true}]\n"
        "paths: {procfs: /fixture/proc, sysfs: /fixture/sys}\n"
        "sampleInterval: 1s\n" % fixture
    )
    helm("install", "nodemedic", ROOT / "deploy/helm/nodemedic", "-f", values)
    wait_ready()

    def collapsed():
        node = kjson("get", "node", ENV["NODE_NAME"])
        for c in node["status"].get("conditions", []):
            if c["type"] == "IRQAffinityCollapsed":
                if c["status"] == "True":
                    return node
                raise Pending(f"condition {c['status']}")
        raise Pending("no condition")

    poll("IRQAffinityCollapsed True", 120, collapsed)
    node = json.loads(kubectl("get", "node", ENV["NODE_NAME"], "-o", "json", "--show-managed-fields").stdout)
    managers = {f["manager"] for f in node["metadata"]["managedFields"] if f.get("subresource") == "status"}
    assert "nodemedic" in managers, managers
    kubectl("delete", "daemonset", "-n", NAMESPACE, "nodemedic", "--wait=true", timeout=120)

    def unknown():
        node = kjson("get", "node", ENV["NODE_NAME"])
        c = [c for c in node["status"]["conditions"] if c["type"] == "IRQAffinityCollapsed"][0]
        if c["status"] != "Unknown":
            raise Pending(f"condition {c['status']}")
        return c

    c = poll("IRQAffinityCollapsed Unknown", 60, unknown)
    assert c["reason"] == "NodemedicStopped", c
    helm("uninstall", "nodemedic", "--wait")


@check("9. under RuntimeDefault seccomp: bpf() and perf_event_open() fail as on the host; io_uring is used or refused with the reason on /status, for the read layer and the disk probe alike")
def seccomp():
    values = Path(ENV["DIR"]) / "seccomp-values.yaml"
    values.write_text(
        "image: {pullPolicy: Never}\n"
        "extraVolumes: [{name: probe-dir, emptyDir: {}}]\n"
        "extraVolumeMounts: [{name: probe-dir, mountPath: /var/lib/nodemedic}]\n"
        "extraConfig: |\n"
        "  [reader]\n"
        "  backend = \"io_uring\"\n"
        "  [disk_probe]\n"
        "  enabled = true\n"
    )
    helm("install", "nodemedic", ROOT / "deploy/helm/nodemedic", "-f", values)
    wait_ready()

    def probed():
        st = status()
        if not st.get("disk_commit"):
            raise Pending("no disk probe yet")
        return st

    st = poll("the disk probe's first commits", 60, probed)
    reader, disk = st["reader"], st["disk_commit"]
    for what, backend, reason in [
        ("reader", reader["backend"], reader.get("fallback_reason")),
        ("disk probe", disk["backend"], disk.get("fallback_reason")),
    ]:
        if backend != "io_uring":
            assert reason and ("seccomp" in reason or "io_uring_setup" in reason), (what, backend, reason)
    assert (reader["backend"] == "io_uring") == (disk["backend"] == "io_uring"), (reader, disk)
    # The probes: the pod's reason is the host's own (the kernel's limits), not the profile's.
    host = run([ROOT / "target/x86_64-unknown-linux-musl/release/nodemedic", "check",
                "--format", "json"], check=False)
    host_reason = json.loads(host.stdout)["perf"]["down_reason"]
    assert st["perf_probes"]["down_reason"] == host_reason, (st["perf_probes"]["down_reason"], host_reason)
    log(f"io_uring in the pod under RuntimeDefault: reader {reader['backend']}, disk probe {disk['backend']}")
    helm("uninstall", "nodemedic", "--wait")


def attach(d):
    """Points the helpers at the cluster of DIR (after cluster-up.sh)."""
    global HELM
    HELM = run([K8S / "build-helm.sh"]).stdout.strip()
    for line in (Path(d) / "env").read_text().splitlines():
        k, _, v = line.partition("=")
        ENV[k] = v
    ENV["DIR"] = str(d)


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="nodemedic-node-"))
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    image = os.environ.get("NODEMEDIC_IMAGE_ARCHIVE")
    if not image:
        image = d / "nodemedic-image.tar"
        log("building the image (deploy/container/build-image.sh)")
        run([ROOT / "deploy/container/build-image.sh", "--oci-archive", image], timeout=3600)
    log("bringing the cluster up (tests/k8s/cluster-up.sh)")
    run([K8S / "cluster-up.sh", d], timeout=3600)
    attach(d)
    run(["ctr", "--address", ENV["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import", image])
    log(f"cluster and image ready in {time.time() - t0:.0f}s")
    try:
        install()
        sees_the_host()
        workload = quota_bound()
        prometheus(workload)
        churn()
        api_outage(workload)
        upgrade_and_uninstall()
        condition()
        seccomp()
    except Exception:
        pass
    finally:
        if os.environ.get("KEEP") != "1":
            run([K8S / "cluster-down.sh", d], check=False)
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    log(f"total {time.time() - t0:.0f}s; logs in {d}/logs and {d}/pod-logs")
    print(f"k8s node: {passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and passed == 9 else 1)


if __name__ == "__main__":
    main()
